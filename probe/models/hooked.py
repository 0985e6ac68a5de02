"""``HookedModel``: the ``HookedTransformer`` interface over a model that owns its forward pass.

TransformerLens 4 removed ``HookedTransformer`` and its components; it keeps ``HookedRootModule``
and ``HookPoint`` as the way to hook a module tree of one's own, and its analysis tools
(``ActivationCache``, ``transformer_lens.patching``, ``utilities.test_prompt``, the head detector)
take any model with ``cfg``, ``run_with_cache``, ``run_with_hooks`` and ``to_tokens``. probe's
models are such a tree: this class gives them the rest of what TransformerLens users reach for
(``to_str_tokens``, ``generate``, the KV cache, ``W_Q`` ... stacked over layers, ``QK``/``OV``,
``accumulated_bias``, ``tokens_to_residual_directions``). The subclass defines ``embed``,
``blocks``, ``ln_final``, ``unembed`` and ``forward(tokens, return_type=..., past_kv_cache=...,
attention_mask=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from transformer_lens import ActivationCache, FactoredMatrix, HookedRootModule
from transformer_lens.config import TransformerLensConfig
from transformer_lens.utilities import sample_logits

from probe.compat import FollowsApply, child
from probe.errors import ProbeError
from probe.models.kv_cache import KeyValueCache

TextInput = str | Sequence[str]


@dataclass
class GenerateOutput:
    """``generate(..., output_logits=True)``: the sequences [batch, pos] and each step's logits
    [batch, d_vocab], as TransformerLens' and Hugging Face's ``generate`` return them."""

    sequences: torch.Tensor
    logits: tuple[torch.Tensor, ...]


@dataclass
class _Lane:
    """Prompts of one length, generated together by :meth:`HookedModel.generate`."""

    rows: list[int]  # their places in the batch
    sequences: torch.Tensor  # [rows, pos] the prompts and the tokens picked so far
    cache: KeyValueCache | None = None
    finished: torch.Tensor = field(init=False)  # [rows] which have picked the end of sequence
    logits: list[torch.Tensor] = field(default_factory=list)  # each step's [rows, d_vocab]

    def __post_init__(self) -> None:
        self.finished = torch.zeros(len(self.rows), dtype=torch.bool, device=self.sequences.device)


class HookedModel(FollowsApply, HookedRootModule):
    """A TransformerLens-hooked transformer: ``cfg`` is a ``TransformerLensConfig``."""

    cfg: TransformerLensConfig
    tokenizer: Any = None

    # The submodules TransformerLens' protocols name (``TransformerLensModelWithWeights``), as properties too:
    # Python 3.12's isinstance against a runtime-checkable protocol, like beartype's check, looks members up with
    # inspect.getattr_static, which does not see the submodules torch keeps in its own dict.
    @property
    def blocks(self) -> nn.ModuleList:
        """The layers, first to last."""
        return child(self, "blocks")

    @property
    def ln_final(self) -> nn.Module:
        """The norm before the unembedding."""
        return child(self, "ln_final")

    # --- activations -------------------------------------------------------------------------------
    def run_with_cache(
        self, *model_args: Any, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs: Any
    ) -> tuple[Any, ActivationCache | dict[str, torch.Tensor]]:
        """TransformerLens' ``run_with_cache``: the output and an ``ActivationCache`` of every hook."""
        out, cache = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        return (
            (out, ActivationCache(cache, self, has_batch_dim=not remove_batch_dim))
            if return_cache_object
            else (out, cache)
        )

    def set_use_attn_result(self, enabled: bool) -> None:
        """Compute each head's output separately, at ``blocks.{l}.attn.hook_result`` [batch, pos, head, d_model]:
        ``cfg.use_attn_result``, which the layers read on every pass (setting it directly does the same)."""
        self.cfg.use_attn_result = enabled

    def after_apply(self) -> None:
        """After ``.to()``, ``.cuda()``, ``.double()`` ...: ``cfg`` follows the weights' device and dtype."""
        weight = self.embed.W_E
        self.cfg.device, self.cfg.dtype = str(weight.device), weight.dtype

    # --- strings -----------------------------------------------------------------------------------
    def set_tokenizer(self, tokenizer: Any, default_padding_side: str = "right") -> None:
        """A Hugging Face tokenizer with this model's ids; its ``bos_token`` is what ``prepend_bos`` adds."""
        tokenizer.padding_side = default_padding_side
        self.tokenizer = tokenizer

    def _need_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise ProbeError("this model has no tokenizer; attach one (Tokenizer.attach_to) or pass token ids")
        return self.tokenizer

    def to_tokens(
        self,
        input: TextInput,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        move_to_device: bool = True,
        truncate: bool = True,
    ) -> torch.Tensor:
        """[batch, pos] ids of ``input`` (a string or a list, padded on ``padding_side``), with the
        tokenizer's ``bos_token`` first when ``prepend_bos`` (default ``cfg.default_prepend_bos``)."""
        tokenizer = self._need_tokenizer()
        prepend = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
        texts = [input] if isinstance(input, str) else list(input)
        try:
            rows = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
        except Exception as error:  # tokenizers' WordLevel without an unknown token: "Missing [UNK] token"
            if "Missing [UNK]" not in str(error):
                raise
            raise ProbeError(
                f"unknown word(s) {', '.join(map(repr, _unknown_words(tokenizer, texts)))} "
                "(not in this model's vocabulary)"
            ) from None
        if prepend and tokenizer.bos_token_id is not None:
            rows = [[tokenizer.bos_token_id, *row] for row in rows]
        if truncate:
            rows = [row[: self.cfg.n_ctx] for row in rows]
        width = max(len(row) for row in rows)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        side = padding_side or tokenizer.padding_side
        padded = [
            row + [pad] * (width - len(row)) if side == "right" else [pad] * (width - len(row)) + row for row in rows
        ]
        tokens = torch.tensor(padded, dtype=torch.long)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def to_string(self, tokens: torch.Tensor | Sequence[int]) -> str | list[str]:
        """The text of ``tokens`` [pos] (a string) or [batch, pos] (a list of strings)."""
        tokenizer = self._need_tokenizer()
        tokens = torch.as_tensor(tokens)
        if tokens.dim() == 2:
            return [tokenizer.decode(row.tolist(), clean_up_tokenization_spaces=False) for row in tokens]
        return tokenizer.decode(tokens.tolist(), clean_up_tokenization_spaces=False)

    def to_str_tokens(
        self,
        input: str | torch.Tensor | Sequence[Any],
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
    ) -> list[str] | list[list[str]]:
        """Each token of ``input`` as its own string: a string, a list of strings, or ids [pos] / [batch, pos]."""
        tokenizer = self._need_tokenizer()
        if isinstance(input, (list, tuple)) and input and isinstance(input[0], str):
            return [self.to_str_tokens(text, prepend_bos, padding_side) for text in input]
        tokens = (
            self.to_tokens(input, prepend_bos, padding_side, move_to_device=False)
            if isinstance(input, str)
            else torch.as_tensor(input)
        )
        if tokens.dim() == 2:
            if tokens.size(0) > 1:
                return [self.to_str_tokens(row) for row in tokens]
            tokens = tokens[0]
        return [tokenizer.decode([token], clean_up_tokenization_spaces=False) for token in tokens.tolist()]

    def to_single_token(self, string: str) -> int:
        """The id of ``string``, which must be one token."""
        tokens = self.to_tokens(string, prepend_bos=False, move_to_device=False)[0]
        if tokens.numel() != 1:
            raise ProbeError(f"{string!r} is {tokens.numel()} tokens, not one")
        return int(tokens[0])

    # --- generation --------------------------------------------------------------------------------
    @torch.no_grad()
    def key_value_cache(self, batch: int, capacity: int) -> KeyValueCache:
        """An empty key-value cache for ``batch`` sequences of up to ``capacity`` positions, on the model's device
        (:mod:`probe.models.kv_cache`: written in place, the same numbers as TransformerLens' concatenating one)."""
        return KeyValueCache(self.cfg, self.cfg.device, batch, capacity)

    @torch.inference_mode()
    def generate(
        self,
        input: TextInput | torch.Tensor = "",
        max_new_tokens: int = 10,
        stop_at_eos: bool = True,
        eos_token_id: int | None = None,
        do_sample: bool = True,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float = 1.0,
        freq_penalty: float = 0.0,
        use_past_kv_cache: bool = True,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        return_type: str | None = "input",
        verbose: bool = True,
        output_logits: bool = False,
    ) -> Any:
        """TransformerLens' ``generate``: sample (or, with ``do_sample=False``, greedily pick)
        ``max_new_tokens`` tokens after ``input`` (text or ids [batch, pos]), reusing keys and values
        with ``use_past_kv_cache``. ``return_type`` ``input`` gives what was given (text for text),
        ``str`` text (without special tokens), ``tokens`` ids; ``output_logits`` adds each step's logits
        (a ``GenerateOutput``). Texts of different token counts are generated in groups of one length, stepped
        together (a shorter prompt padded beside a longer one would read its padding as text), so each row is
        what it would be alone; the ids come back padded on ``padding_side`` with the pad token."""
        lanes, given_text = self._generate_input(input, prepend_bos)
        if stop_at_eos and eos_token_id is None:
            eos_token_id = getattr(self.tokenizer, "eos_token_id", None)
            if eos_token_id is None:
                raise ProbeError("stop_at_eos needs an eos_token_id or a tokenizer that has one")
        for lane in lanes:
            capacity = lane.sequences.size(1) + max_new_tokens
            lane.cache = self.key_value_cache(lane.sequences.size(0), capacity) if use_past_kv_cache else None
        sampling = dict(top_k=top_k, top_p=top_p, temperature=temperature, freq_penalty=freq_penalty)
        for _ in range(max_new_tokens):
            for lane in lanes:
                self._step(lane, sampling if do_sample else None, eos_token_id if stop_at_eos else None)
            if stop_at_eos and all(bool(lane.finished.all()) for lane in lanes):
                break
        rows = [row for lane in lanes for row in lane.rows]
        order = torch.tensor(rows, device=lanes[0].sequences.device).argsort()  # the lanes' rows in input order
        ids = [sequence for lane in lanes for sequence in lane.sequences]
        ids = [ids[i] for i in order.tolist()]  # [pos] each, unpadded
        side = padding_side or getattr(self.tokenizer, "padding_side", "right")
        sequences = pad_sequence(ids, batch_first=True, padding_value=self._pad_id(0), padding_side=side)
        if output_logits:
            steps = zip(*(lane.logits for lane in lanes))  # each step's [rows, d_vocab] of every lane
            return GenerateOutput(sequences, tuple(torch.cat(step)[order] for step in steps))
        if return_type == "str" or (return_type == "input" and given_text):  # special tokens left out
            text = [self.tokenizer.decode(row.tolist(), skip_special_tokens=True) for row in ids]
            return text[0] if isinstance(input, str) else text
        return sequences

    def _step(self, lane: _Lane, sampling: dict[str, Any] | None, eos_token_id: int | None) -> None:
        """One token more for each row of ``lane``: sampled with ``sampling`` (greedy without), a finished row
        padded where ``eos_token_id`` ends a row."""
        # all of the prompt first (and every step without a cache), then the last token
        new = lane.sequences[:, -1:] if lane.cache is not None and lane.logits else lane.sequences
        logits = self(new, past_kv_cache=lane.cache)[:, -1]  # [rows, d_vocab]
        if sampling is not None:
            token = sample_logits(logits, tokens=lane.sequences, **sampling).to(lane.sequences.device)
        else:
            token = logits.argmax(-1)
        if eos_token_id is not None:
            token = torch.where(lane.finished, torch.full_like(token, self._pad_id(eos_token_id)), token)
            lane.finished |= token == eos_token_id
        lane.sequences = torch.cat([lane.sequences, token[:, None]], dim=1)
        lane.logits.append(logits)

    def _generate_input(self, input: TextInput | torch.Tensor, prepend_bos: bool | None) -> tuple[list[_Lane], bool]:
        """``generate``'s input as lanes of prompts of one length each, on the model's device, and whether it
        was given as text."""
        given_text = isinstance(input, str) or (
            isinstance(input, (list, tuple)) and input and isinstance(input[0], str)
        )
        if not given_text:
            tokens = torch.as_tensor(input).to(self.cfg.device)
            tokens = tokens[None] if tokens.dim() == 1 else tokens  # [batch, pos]
            return [_Lane(list(range(tokens.size(0))), tokens)], False
        texts = [input] if isinstance(input, str) else list(input)
        prompts = [self.to_tokens(text, prepend_bos)[0] for text in texts]  # [pos] each, unpadded
        lengths: dict[int, list[int]] = {}
        for row, prompt in enumerate(prompts):
            lengths.setdefault(len(prompt), []).append(row)
        return [_Lane(rows, torch.stack([prompts[row] for row in rows])) for rows in lengths.values()], True

    def _pad_id(self, eos_token_id: int) -> int:
        """What a finished row is padded with: the tokenizer's pad token, else end of sequence."""
        pad = getattr(self.tokenizer, "pad_token_id", None) if self.tokenizer is not None else None
        return eos_token_id if pad is None else pad

    # --- weights, stacked over layers --------------------------------------------------------------
    def _stack(self, part: str, name: str) -> torch.Tensor:
        return torch.stack([getattr(getattr(block, part), name) for block in self.blocks])

    @property
    def W_E(self) -> torch.Tensor:  # [d_vocab, d_model]
        return self.embed.W_E

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, d_vocab]
        return self.unembed.W_U

    @property
    def b_U(self) -> torch.Tensor:  # [d_vocab]
        return self.unembed.b_U

    W_Q = property(lambda self: self._stack("attn", "W_Q"))  # [layer, head, d_model, d_head]
    W_K = property(lambda self: self._stack("attn", "W_K"))  # [layer, head, d_model, d_head]
    W_V = property(lambda self: self._stack("attn", "W_V"))  # [layer, head, d_model, d_head]
    W_O = property(lambda self: self._stack("attn", "W_O"))  # [layer, head, d_head, d_model]
    b_Q = property(lambda self: self._stack("attn", "b_Q"))  # [layer, head, d_head]
    b_K = property(lambda self: self._stack("attn", "b_K"))  # [layer, head, d_head]
    b_V = property(lambda self: self._stack("attn", "b_V"))  # [layer, head, d_head]
    b_O = property(lambda self: self._stack("attn", "b_O"))  # [layer, d_model]
    W_in = property(lambda self: self._stack("mlp", "W_in"))  # [layer, d_model, d_mlp]
    W_out = property(lambda self: self._stack("mlp", "W_out"))  # [layer, d_mlp, d_model]
    b_in = property(lambda self: self._stack("mlp", "b_in"))  # [layer, d_mlp]
    b_out = property(lambda self: self._stack("mlp", "b_out"))  # [layer, d_model]

    @property
    def QK(self) -> FactoredMatrix:  # [layer, head, d_model, d_model]
        """W_Q W_K^T per head: the content part of the logits (a PE's own term is not in it)."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:  # [layer, head, d_model, d_model]
        return FactoredMatrix(self.W_V, self.W_O)

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """[d_model] the sum of the output biases written to the residual before ``layer`` (its MLP's
        input too, with ``mlp_input``)."""
        total = torch.zeros(self.cfg.d_model, device=self.W_E.device, dtype=self.W_E.dtype)
        for index, block in enumerate(self.blocks[: layer + (1 if mlp_input else 0)]):
            total = total + block.attn.b_O
            if include_mlp_biases and index < layer:
                total = total + block.mlp.b_out
        return total

    def tokens_to_residual_directions(self, tokens: str | int | torch.Tensor) -> torch.Tensor:
        """The unembedding column(s) of ``tokens``: [d_model] for one token, [..., d_model] for several."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        if isinstance(tokens, int):
            return self.W_U[:, tokens]
        return self.W_U[:, tokens.to(self.W_U.device)].movedim(0, -1)


def _unknown_words(tokenizer: Any, texts: Sequence[str]) -> list[str]:
    """The words of ``texts`` that ``tokenizer``'s vocabulary lacks, as its own normalizer and
    pre-tokenizer split them (by whitespace where it has neither)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    vocab = tokenizer.get_vocab()
    words: list[str] = []
    for text in texts:
        if backend is not None and backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        if backend is not None and backend.pre_tokenizer is not None:
            words += [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
        else:
            words += text.split()
    return [word for word in dict.fromkeys(words) if word not in vocab][:10]
