"""``PETransformer``: a TransformerLens-hooked decoder-only transformer whose positional encoding is
chosen by name.

Everything TransformerLens users rely on keeps working (``run_with_cache``, ``run_with_hooks``,
``blocks.{l}.attn.hook_pattern`` [batch, head, query, key], ``hook_attn_scores``, the W_Q ... W_U
properties, ``generate``, the KV cache; ``probe.models.hooked``). ``model.pe`` holds the PE
(``probe.models.positional``); APE's vectors pass through ``hook_pos_embed``; with
``tie_embeddings`` the unembedding is W_E^T applied to the final residual scaled by d_model^-0.5
(T5, and the paper's released code).

Positions are computed once per forward pass and handed to the PE: the indices 0 .. T-1 of the
token tensor (cached tokens included), or ``model(tokens, positions=...)`` [T] to choose them.
Batch with right padding (causal attention never lets a real position see the padding after it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformer_lens.config import TransformerLensConfig
from transformer_lens.hook_points import HookPoint
from transformer_lens.utilities import lm_cross_entropy_loss

from probe.errors import ProbeError
from probe.models.attention import PEAttention, hook_may_edit
from probe.models.components import Block, Embed, TiedUnembed, Unembed, make_norm
from probe.models.hooked import HookedModel
from probe.models.model_config import ModelConfig
from probe.models.registry import make_positional_encoding

if TYPE_CHECKING:
    from transformer_lens import ActivationCache

    from probe.models.kv_cache import KeyValueCache

# Buffers of checkpoints written on TransformerLens 3.x that nothing reads now: its causal masks and
# rotary tables.
_LEGACY_BUFFERS = (".attn.mask", ".attn.IGNORE", ".attn.rotary_sin", ".attn.rotary_cos")


def lens_config(config: ModelConfig) -> TransformerLensConfig:
    """The TransformerLens view of ``config``: the fields its tools read."""
    return TransformerLensConfig(
        d_model=config.d_model,
        d_head=config.d_head,
        n_layers=config.n_layers,
        n_ctx=config.n_ctx,
        n_heads=config.n_heads,
        d_mlp=config.d_mlp,
        d_vocab=config.d_vocab,
        device="cpu",
        default_prepend_bos=False,
        positional_embedding_type=config.pe,
        act_fn=config.act_fn,
        normalization_type=config.normalization,
        uses_rms_norm=config.normalization == "RMS",
        eps=config.eps,
        final_rms=config.normalization == "RMS",
    )


class PETransformer(HookedModel):
    """A decoder-only transformer with one positional encoding; see the module docstring."""

    def __init__(self, config: ModelConfig, device: str | torch.device = "cpu"):
        super().__init__()
        self.config = config
        self.cfg = lens_config(config)
        self._aranges: dict[tuple[int, torch.device], torch.Tensor] = {}  # see _positions
        self.embed = Embed(config.d_vocab, config.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        pe = make_positional_encoding(config)
        if pe.adds_embedding:
            self.hook_pos_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList(
            Block(
                config.normalization,
                config.d_model,
                config.d_mlp,
                config.act_fn,
                config.eps,
                PEAttention(config.n_heads, config.d_model, config.d_head, config.attn_scale, layer, pe, self.cfg),
            )
            for layer in range(config.n_layers)
        )
        self.ln_final = make_norm(config.normalization, config.d_model, config.eps)
        self.unembed = (
            TiedUnembed(self.embed, config.d_model, config.d_vocab)
            if config.tie_embeddings
            else Unembed(config.d_model, config.d_vocab)
        )
        self.pe = pe  # registered last: parameters keep TransformerLens 3.x's order (optimizer states resume)
        self._initialise()
        if not config.bias:
            for name, param in self.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("b_"):
                    param.requires_grad_(False)
        self.setup()
        if torch.device(device).type != "cpu":
            self.to(device)

    def _initialise(self) -> None:
        """Seeded from ``config.seed`` with a private generator (the global RNG is untouched).

        ``t5``: T5's scheme, which stands in for the 1/sqrt(d_head) logit scale it omits; ``gpt2``:
        TransformerLens' N(0, 0.8 / sqrt(d_model)) for every weight matrix.
        """
        c = self.config
        generator = torch.Generator().manual_seed(c.seed)
        gpt2 = 0.8 / math.sqrt(c.d_model)
        t5 = {
            "W_E": 1.0,
            "W_Q": (c.d_model * c.d_head) ** -0.5,
            "W_K": c.d_model**-0.5,
            "W_V": c.d_model**-0.5,
            "W_O": (c.n_heads * c.d_head) ** -0.5,
            "W_in": c.d_model**-0.5,
            "W_out": c.d_mlp**-0.5,
            "W_U": c.d_model**-0.5,
        }
        with torch.no_grad():
            for name, param in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if name.startswith("pe.") or leaf.startswith("b_") or leaf == "w":  # biases 0, gains 1
                    continue
                std = t5.get(leaf, gpt2) if c.init == "t5" else gpt2
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * std)
            self.pe.initialise(generator, c.init)  # the PE's own parameters, drawn last

    def forward(
        self,
        input: Any,
        return_type: str | None = "logits",
        loss_per_token: bool = False,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        start_at_layer: int | None = None,
        tokens: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        stop_at_layer: int | None = None,
        past_kv_cache: KeyValueCache | None = None,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> Any:
        """TransformerLens' forward: ``input`` is text, tokens [batch, pos] / [pos], or with
        ``start_at_layer`` a residual [batch, pos, d_model]; ``return_type`` ``logits``, ``loss``,
        ``both`` or None; ``stop_at_layer`` returns the residual entering that block (the blocks run are
        ``blocks[start_at_layer:stop_at_layer]``, negative indices as in Python).
        ``attention_mask`` [batch, pos] marks right padding with 0 (the loss leaves it out); ``past_kv_cache`` (a
        ``TransformerLensKeyValueCache``) holds earlier tokens' keys and values; ``positions``
        [offset + T] (cached tokens first) replaces the default 0, 1, ... for this pass. ``segments``
        [batch, pos] packs several examples into a row (each token's example within its row): a token
        attends within its own example, and an embedded PE counts each example's positions from 0."""
        if isinstance(input, (str, list)):
            input = self.to_tokens(input, prepend_bos, padding_side)
        if start_at_layer is None:
            tokens = input if input.dim() == 2 else input[None]  # [batch, pos]
            tokens = tokens.to(self.embed.W_E.device)
        offset = past_kv_cache.entries[0].past_keys.size(1) if past_kv_cache is not None else 0
        new = input.shape[1] if input.dim() > 1 else input.shape[0]
        if offset + new > self.cfg.n_ctx:
            raise ProbeError(
                f"sequence of {offset + new} positions is longer than this model's context "
                f"(n_ctx={self.cfg.n_ctx}); rebuild it with n_ctx={offset + new} or more"
            )
        mask = attention_mask  # what the layers read: the given mask, or one for packed rows or the cache's keys
        if segments is not None:
            mask = self._segment_mask(segments, attention_mask, past_kv_cache, positions)
        self.pe.begin_forward(self._positions(offset + new, positions))
        if past_kv_cache is not None:
            batch = input.shape[0] if input.dim() > 1 else 1
            mask = _cached_mask(past_kv_cache, attention_mask, batch, new, offset)
        residual = self._embed(tokens, offset, segments) if start_at_layer is None else input
        # TransformerLens' blocks[start_at_layer:stop_at_layer]: Python's slice, negative indices included
        for layer in range(self.cfg.n_layers)[start_at_layer:stop_at_layer]:
            entry = past_kv_cache.entries[layer] if past_kv_cache is not None else None
            residual = self.blocks[layer](residual, entry, mask)  # [batch, pos, d_model]
        if stop_at_layer is not None or return_type is None:
            return residual if stop_at_layer is not None else None
        logits = self.unembed(self.ln_final(residual))  # [batch, pos, d_vocab]
        if return_type == "logits":
            return logits
        if tokens is None:
            raise ProbeError("a loss from start_at_layer needs the tokens (tokens=...)")
        if attention_mask is not None:
            attention_mask = attention_mask.to(logits.device)
        loss = lm_cross_entropy_loss(logits, tokens, attention_mask, per_token=loss_per_token)
        return loss if return_type == "loss" else (logits, loss)

    def _segment_mask(self, segments: torch.Tensor, attention_mask, past_kv_cache, positions) -> torch.Tensor:
        """[batch, query, key] True where query and key belong to one example of a packed row."""
        if attention_mask is not None or past_kv_cache is not None or positions is not None:
            raise ProbeError("segments (packed rows) take no attention_mask, past_kv_cache or positions")
        if not type(self.pe).packable() or self.config.random_positions:
            raise ProbeError(
                f"{self.config.pe} cannot train on packed rows: its logits read more than each "
                "example's relative positions"
            )
        segments = segments.to(self.embed.W_E.device)
        return segments[:, :, None] == segments[:, None, :]

    def _embed(self, tokens: torch.Tensor, offset: int, segments: torch.Tensor | None = None) -> torch.Tensor:
        """[batch, pos] -> the residual [batch, pos, d_model]: the token embedding, plus the PE's
        vectors at these tokens' positions (after ``offset`` cached ones; in a packed row, each
        example's own) when it adds any."""
        residual = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        if self.pe.adds_embedding and segments is not None:
            starts = torch.ones_like(segments, dtype=torch.bool)
            starts[:, 1:] = segments[:, 1:] != segments[:, :-1]  # [batch, pos] first token of each example
            index = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
            first = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
            own = self.pe.positions[index - first]  # [batch, pos] each example counted from 0
            pos_embed = self.pe.embedding(own.flatten(), residual.dtype).reshape(*tokens.shape, -1)
            residual = residual + self.hook_pos_embed(pos_embed)
        elif self.pe.adds_embedding:
            positions = self.pe.positions[offset : offset + tokens.size(1)]  # [pos]
            pos_embed = self.pe.embedding(positions, residual.dtype).expand(tokens.size(0), -1, -1)
            if hook_may_edit(self.hook_pos_embed):  # the view's rows share memory: a hook edits rows of its own
                pos_embed = pos_embed.contiguous()
            residual = residual + self.hook_pos_embed(pos_embed)
        return residual

    @property
    def W_pos(self) -> torch.Tensor:  # [n_ctx, d_model]
        """TransformerLens' ``W_pos``, the vector added at each position: a learned PE's table itself (edits reach
        the model), APE's sinusoids as computed. A PE that adds none has no ``W_pos`` (``hasattr`` is False)."""
        if not self.pe.adds_embedding:
            raise AttributeError(f"{self.pe.kind} adds no positional embedding, so the model has no W_pos")
        table = getattr(self.pe, "W_pos", None)
        if table is not None:
            return table
        return self.pe.embedding(torch.arange(self.cfg.n_ctx, device=self.W_E.device), self.W_E.dtype)

    def sample_positions(self, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """[length] positions for a sequence of ``length`` tokens: 0 .. length - 1, or with
        ``random_positions`` = N a sorted random subset of 0 .. N - 1 (Ruoss et al. 2023, Sec. 3;
        one draw for the whole batch, as their code does)."""
        n = self.config.random_positions
        if not n:
            return torch.arange(length, device=self.embed.W_E.device)
        if length > n:
            raise ProbeError(f"a sequence of {length} tokens needs more than random_positions={n} positions")
        return torch.randperm(n, generator=generator)[:length].sort().values.to(self.embed.W_E.device)

    def _positions(self, length: int, given: torch.Tensor | None) -> torch.Tensor:
        """[length] the positions of a pass over ``length`` tokens, cached ones included: ``given``,
        else random ones while training with ``random_positions``, else 0 .. length - 1."""
        device = self.embed.W_E.device
        if given is None:
            if self.config.random_positions and self.training:
                return self.sample_positions(length)
            # one tensor per length, so the PE recognises the last pass's positions by identity: no
            # comparison of contents (a host sync), nothing rebuilt between training steps
            key = (length, device)
            if key not in self._aranges:
                self._aranges[key] = torch.arange(length, device=device)
            return self._aranges[key]
        if given.shape != (length,):
            raise ProbeError(
                f"positions must give one per token, cached ones included ({length}); got shape {tuple(given.shape)}"
            )
        return given.to(device)

    def load_state_dict(  # type: ignore[override]
        self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False
    ) -> Any:
        """``nn.Module.load_state_dict``, reading checkpoints written on TransformerLens 3.x too: those
        also hold its causal masks and rotary tables, which nothing reads now."""
        state_dict = {k: v for k, v in state_dict.items() if not k.endswith(_LEGACY_BUFFERS)}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def process_weights_(
        self,
        fold_ln: bool = True,
        center_writing_weights: bool = True,
        center_unembed: bool = True,
        fold_value_biases: bool = True,
    ) -> PETransformer:
        """TransformerLens' ``process_weights_``, in place (:mod:`probe.models.weight_processing`): norms folded,
        writing weights and the unembedding centred, value biases in the output bias; the same function."""
        from probe.models.weight_processing import process_weights_

        return process_weights_(self, fold_ln, center_writing_weights, center_unembed, fold_value_biases)

    def fold_layer_norm(self, center_weights: bool = True) -> PETransformer:
        """TransformerLens' ``fold_layer_norm``, in place (:func:`probe.models.weight_processing.fold_layer_norm`)."""
        from probe.models.weight_processing import fold_layer_norm

        return fold_layer_norm(self, center_weights)

    def set_fast_attention(self, enabled: bool) -> None:
        """Allow (default) or forbid the fused attention route in every layer (probe.models.attention)."""
        for block in self.blocks:
            block.attn.fast_path = enabled

    @contextmanager
    def reference_route(self) -> Iterator[PETransformer]:
        """Every layer on the reference attention route within the block, where every hook fires."""
        before = [block.attn.fast_path for block in self.blocks]
        self.set_fast_attention(False)
        try:
            yield self
        finally:
            for block, fast in zip(self.blocks, before):
                block.attn.fast_path = fast

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[Any, ActivationCache]:
        """TransformerLens' ``run_with_cache``, on the reference route: a cache holds what every hook saw."""
        with self.reference_route():
            return super().run_with_cache(*model_args, **kwargs)

    def reset_hooks(
        self,
        clear_contexts: bool = True,
        direction: str = "both",
        including_permanent: bool = False,
        level: int | None = None,
    ) -> None:
        """TransformerLens' ``reset_hooks``; ``including_permanent`` also takes off an attached intervention
        (probe.models.attach), which stays on like a permanent hook until then."""
        from probe.models.attach import detach

        super().reset_hooks(clear_contexts, direction, including_permanent, level)
        if including_permanent:
            detach(self)


def _cached_mask(cache, attention_mask: torch.Tensor | None, batch: int, new: int, offset: int):
    """[batch, key] the mask of every key ``cache`` holds once this pass's ``new`` are appended (``attention_mask``
    [batch, new], all kept if None), or None for a decoding step's lone query where nothing cached is padding:
    it sees every key, and no layer need build a mask for it."""
    given = attention_mask if attention_mask is not None else torch.ones(batch, new, dtype=torch.long)
    mask = cache.append_attention_mask(given)
    return None if new == 1 and offset and not getattr(cache, "padded", True) else mask


def build_model(
    pe: str,
    *,
    vocab_size: int,
    preset: str = "tiny",
    seed: int = 0,
    device: str | torch.device = "cpu",
    **overrides: Any,
) -> PETransformer:
    """A fresh model: ``build_model("t5", vocab_size=40, preset="tiny", n_layers=1)``.

    ``preset`` names a size of ``probe.presets.PRESETS``; any field of ``ModelConfig`` can be
    overridden. The same seed gives the same weights.
    """
    from probe.models.model_config import resolve_config

    config = resolve_config(pe, vocab_size=vocab_size, preset=preset, seed=seed, **overrides)
    return PETransformer(config, device=device)
