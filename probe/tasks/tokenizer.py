"""Word-level tokenizer: one id per word of a task's alphabet, plus bos, pad, eos and sep.

A tokenizer also holds the sequence format a run trains on: probe's ``<bos> source <sep> target
<eos>``, or the authors' ``source [sep] target <eos>`` (no ``<bos>``; a separator only for the
tasks their configs give one, ``configs/data/*.jsonnet``' ``decoder_only_input_output_sep_token``).
Every place that builds a prompt or a training sequence asks the run's tokenizer, so a model is
always given what it was trained on.

Words are split as :mod:`probe.tasks.words` says (punctuation glued to a word is a ``##`` token of
its own), so ``decode(encode(text)) == text`` for every single-spaced text.

``Tokenizer.to_hf()`` is the same tokenizer for Hugging Face and TransformerLens (same ids), and
``attach_to(model)`` gives it to a model so ``to_tokens``, ``generate`` and friends take strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError
from probe.tasks.words import GLUED, PUNCTUATION, join_words, split_words

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

    from probe.tasks.base import Example, Task

SPECIALS = ("<bos>", "<pad>", "<eos>", "<sep>")


class Tokenizer:
    """Maps words to ids: ``<bos>``=0, ``<pad>``=1, ``<eos>``=2, ``<sep>``=3, then ``words`` in order.

    ``bos`` and ``separator`` say whether sequences open with ``<bos>`` and whether ``<sep>`` ends
    the prompt (the ids stay the same either way)."""

    def __init__(self, words: Sequence[str], *, bos: bool = True, separator: bool = True) -> None:
        self.bos, self.separator = bool(bos), bool(separator)
        words = list(dict.fromkeys(words))
        clash = [word for word in words if word in SPECIALS]
        if clash:
            raise ProbeError(f"tokenizer words may not include the special tokens {clash}")
        self._vocab = [*SPECIALS, *words]
        self._ids = {word: i for i, word in enumerate(self._vocab) if i >= len(SPECIALS)}

    @classmethod
    def for_task(cls, task: Task, *, authors: bool = False) -> Tokenizer:
        """The task's tokenizer in probe's sequence format, or with ``authors`` in theirs."""
        if authors:
            return cls(task.vocabulary(), bos=False, separator=task.authors_separator)
        return cls(task.vocabulary())

    @property
    def vocab(self) -> list[str]:
        return list(self._vocab)

    @property
    def bos_id(self) -> int:
        return 0

    @property
    def pad_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    @property
    def sep_id(self) -> int:
        return 3

    def __len__(self) -> int:
        return len(self._vocab)

    def encode(self, text: str) -> list[int]:
        tokens = split_words(text)
        try:
            return [self._ids[token] for token in tokens]
        except KeyError:
            pass
        unknown = [token for token in dict.fromkeys(tokens) if token not in self._ids]
        raise ProbeError(
            f"unknown word(s) {', '.join(map(repr, unknown[:10]))}"
            f"{' ...' if len(unknown) > 10 else ''} (not in this task's {len(self) - len(SPECIALS)}-word vocabulary)"
        )

    def decode(self, ids: Iterable[int]) -> str:
        """Maps ids back to text, skipping special tokens (it stops at nothing)."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self._vocab)]
        if bad:
            raise ProbeError(f"token id(s) {bad[:10]} outside this vocabulary of {len(self._vocab)}")
        return join_words(self._vocab[i] for i in ids if i >= len(SPECIALS))

    def encode_prompt(self, source: str) -> list[int]:
        """``[bos] + source + [sep]`` (each special as the format has it): what a model is given to continue."""
        return [*([self.bos_id] if self.bos else []), *self.encode(source), *([self.sep_id] if self.separator else [])]

    def encode_example(self, example: Example) -> tuple[list[int], int]:
        """The prompt + ``target + [eos]``, and the index where the target starts."""
        prompt = self.encode_prompt(example.source)
        return [*prompt, *self.encode(example.target), self.eos_id], len(prompt)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "word",
            "specials": list(SPECIALS),
            "words": self._vocab[len(SPECIALS) :],
            "bos": self.bos,
            "separator": self.separator,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tokenizer:
        if not isinstance(data, dict) or data.get("kind") != "word" or not isinstance(data.get("words"), list):
            raise ProbeError("not a word-level tokenizer description (expected kind 'word' and a 'words' list)")
        if data.get("specials", list(SPECIALS)) != list(SPECIALS):
            raise ProbeError(f"tokenizer specials {data.get('specials')} differ from {list(SPECIALS)}")
        flags = {key: data.get(key, True) for key in ("bos", "separator")}  # runs saved before formats: probe's
        if not all(isinstance(flag, bool) for flag in flags.values()):
            raise ProbeError(f"tokenizer flags {flags} must be true or false")
        return cls([str(word) for word in data["words"]], **flags)

    def to_hf(self) -> PreTrainedTokenizerFast:
        """This tokenizer for Hugging Face and TransformerLens: the same ids, ``<bos>`` prepended
        where the format has it.

        A ``tokenizers`` WordLevel model over :attr:`vocab`; a normalizer rewrites glued trailing
        punctuation as :func:`split_words` does ("5." -> "5 ##."), and a WordPiece decoder glues
        ``##`` tokens back. So ``hf(text, add_special_tokens=False)`` ids equal :meth:`encode`'s and
        ``hf.decode(ids, skip_special_tokens=True)`` equals :meth:`decode`'s (``<sep>`` is a special
        token too), except that a text opening with a ``##`` token keeps that ``##``. There is no
        unknown-word id: an unknown word raises tokenizers' "Missing [UNK] token" error, as
        :meth:`encode` raises, rather than taking an id our models never saw.
        """
        from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers
        from tokenizers import Tokenizer as Backend
        from transformers import PreTrainedTokenizerFast

        ids = {word: i for i, word in enumerate(self._vocab)}
        backend = Backend(models.WordLevel(ids, unk_token=" "))  # no word holds a space: unknown words raise
        # A mark is split off when it follows a non-space and only marks follow it up to the word's end.
        trailing = rf"(?=[{re.escape(PUNCTUATION)}]*(?:\s|$))"
        backend.normalizer = normalizers.Sequence(
            [
                normalizers.Replace(Regex(rf"(?<=\S){re.escape(mark)}{trailing}"), f" {GLUED}{mark}")
                for mark in PUNCTUATION
            ]
        )
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        backend.decoder = decoders.WordPiece(prefix=GLUED, cleanup=False)
        bos, pad, eos, sep = SPECIALS
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            name_or_path="probe-word-level",
            bos_token=bos,
            eos_token=eos,
            pad_token=pad,
            sep_token=sep,
            add_bos_token=self.bos,
            padding_side="right",
        )

    def attach_to(self, model: Any) -> None:
        """Set :meth:`to_hf` as ``model.tokenizer`` so TransformerLens' string methods work.

        ``to_tokens`` then prepends ``<bos>`` where the run's sequences have it (TransformerLens'
        ``default_prepend_bos``); weights and ``d_vocab`` stay.
        """
        if len(self) > model.cfg.d_vocab:
            raise ProbeError(f"a {len(self)}-token vocabulary does not fit a model with d_vocab={model.cfg.d_vocab}")
        model.set_tokenizer(self.to_hf(), default_padding_side="right")
        model.cfg.default_prepend_bos = self.bos
