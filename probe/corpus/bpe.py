"""Byte-level BPE (Hugging Face ``tokenizers``), trained on the corpus's training files.

Byte-level: every byte sequence has a tokenization and ``decode(encode(text)) == text`` for any
text, so held-out files are scored exactly as written. Saved as ``tokenizer.json`` (plain JSON).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from probe.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

END_OF_FILE = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"  # beside a prepared corpus, and in every run trained on one


class CodeTokenizer:
    """A trained byte-level BPE: ``encode``/``decode`` text, and ``eof_id`` between files."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        eof = tokenizer.token_to_id(END_OF_FILE)
        if eof is None:
            raise ProbeError(f"tokenizer has no {END_OF_FILE} token; it was not made by probe")
        self.eof_id = eof

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """Each id's text (bytes shown as the characters they are), for labelling attention maps."""
        return [self.decode([i]) for i in ids]

    def to_json(self) -> str:
        return self.tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str) -> CodeTokenizer:
        try:
            return cls(Tokenizer.from_str(text))
        except Exception as error:  # tokenizers raises its own Exception for malformed JSON
            raise ProbeError(f"not a tokenizer file ({str(error).splitlines()[0]})") from None

    def to_hf(self) -> PreTrainedTokenizerFast:
        """The same tokenizer for ``transformers`` and TransformerLens (same ids, no token prepended:
        a window of code starts wherever it starts)."""
        from transformers import PreTrainedTokenizerFast

        # No bos_token: a window of code has no start-of-sequence token, so to_tokens prepends nothing.
        return PreTrainedTokenizerFast(
            tokenizer_object=self.tokenizer,
            name_or_path="probe-code-bpe",
            eos_token=END_OF_FILE,
            pad_token=END_OF_FILE,
            padding_side="right",
        )

    def attach_to(self, model: Any) -> None:
        """``model.tokenizer`` = :meth:`to_hf`, so ``to_tokens``, ``to_str_tokens`` and ``generate`` take code."""
        if len(self) > model.cfg.d_vocab:
            raise ProbeError(f"a {len(self)}-token vocabulary does not fit a model with d_vocab={model.cfg.d_vocab}")
        model.set_tokenizer(self.to_hf(), default_padding_side="right")
        model.cfg.default_prepend_bos = False


def train_bpe(texts: Iterable[str], vocab_size: int) -> CodeTokenizer:
    """A byte-level BPE of ``vocab_size`` ids (256 bytes, ``<|endoftext|>`` and merges) learnt from ``texts``."""
    if vocab_size < 258:
        raise ProbeError(
            f"vocab_size must be at least 258 (256 bytes, the end-of-file token, one merge), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_FILE],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return CodeTokenizer(tokenizer)
