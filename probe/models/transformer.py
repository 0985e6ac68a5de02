"""``PETransformer``: a ``transformer_lens.HookedTransformer`` whose positional encoding is chosen by name.

Everything TransformerLens users rely on keeps working (``run_with_cache``, ``run_with_hooks``,
``blocks.{l}.attn.hook_pattern`` [batch, head, query, key], ``hook_attn_scores``, the W_Q ... W_U
properties). What changes: TransformerLens' learned position table is removed; ``model.pe``
holds the PE (``probe.models.positional``); every block is a ``PEBlock`` (``ln1`` computed once for
Q, K and V) and its attention a ``PEAttention``; APE's
vectors pass through ``hook_pos_embed``; with ``tie_embeddings`` the unembedding is W_E^T applied
to the final residual scaled by d_model^-0.5 (T5, and the paper's released code).

Positions are computed once per forward pass and handed to the PE: the indices 0 .. T-1 of the
token tensor (cached tokens included), or ``model(tokens, positions=...)`` [T] to choose them.
Batch with right padding (causal attention never lets a real position see the padding after it).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.components import Embed, TransformerBlock
from transformer_lens.hook_points import HookPoint
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

from probe.errors import ProbeError
from probe.models.attention import PEAttention, _global_hooks, _hooked
from probe.models.config import ModelConfig
from probe.models.registry import make_positional_encoding


class PEEmbed(Embed):
    """TransformerLens' embedding, looked up with ``F.embedding``. Its ``W_E[tokens]`` backward
    accumulates repeated tokens in a thread-dependent order, so two runs of one seed on more than
    one CPU thread ended with different weights; ``F.embedding``'s backward is deterministic and,
    on one thread, bit-identical to it."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [batch, pos] -> [batch, pos, d_model]
        embedded = F.embedding(tokens, self.W_E)
        return self.ln(embedded) if self.cfg.post_embedding_ln else embedded


class TiedUnembed(nn.Module):
    """logits = (d_model^-0.5 * residual) @ W_E^T: T5's tied output layer."""

    def __init__(self, embed: nn.Module, d_model: int, d_vocab: int):
        super().__init__()
        object.__setattr__(self, "_embed", embed)  # the embedding owns W_E; not registered twice
        self.scale = d_model**-0.5
        self.register_buffer("b_U", torch.zeros(d_vocab), persistent=False)

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, d_vocab]
        return self.scale * self._embed.W_E.T

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        return residual @ self.W_U  # [batch, pos, d_vocab]


class PEBlock(TransformerBlock):
    """TransformerLens' pre-norm block, with the residual normalised once for Q, K and V.

    TransformerLens applies ``ln1`` to the same residual three times (once each for the query,
    key and value inputs) and adds 0.0 to two of them: a fifth of a training step's operators at
    ``tiny``. Here ``ln1`` runs once and feeds all three. Same values, same hook points firing in
    the same order; whenever the difference could be seen (a hook on ``ln1``'s hook points, which
    ``run_with_cache`` adds too, a global hook, or a config that splits the attention inputs),
    TransformerLens' own forward runs instead.
    """

    def streamlined(self, shortformer_pos_embed: torch.Tensor | None) -> bool:
        cfg = self.cfg
        return (
            shortformer_pos_embed is None
            and not (cfg.use_attn_in or cfg.use_split_qkv_input or cfg.use_normalization_before_and_after
                     or cfg.attn_only or cfg.parallel_attn_mlp or cfg.use_hook_mlp_in)
            and cfg.original_architecture not in POST_NORM_ARCHITECTURES
            and not any(_hooked(point) for point in self.ln1.modules() if isinstance(point, HookPoint))
            and not _global_hooks()
        )

    def forward(self, resid_pre, shortformer_pos_embed=None, past_kv_cache_entry=None, attention_mask=None):
        if not self.streamlined(shortformer_pos_embed):
            return super().forward(resid_pre, shortformer_pos_embed, past_kv_cache_entry, attention_mask)
        resid_pre = self.hook_resid_pre(resid_pre)  # [batch, pos, d_model]
        normalized = self.ln1(resid_pre)
        attn_out = self.hook_attn_out(self.attn(
            query_input=normalized, key_input=normalized, value_input=normalized,
            past_kv_cache_entry=past_kv_cache_entry, attention_mask=attention_mask,
        ))  # [batch, pos, d_model]
        if resid_pre.device != attn_out.device:
            resid_pre = resid_pre.to(attn_out.device)
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)  # [batch, pos, d_model]
        return self.hook_resid_post(resid_mid + self.apply_mlp(self.ln2(resid_mid)))  # [batch, pos, d_model]


def hooked_config(config: ModelConfig) -> HookedTransformerConfig:
    return HookedTransformerConfig(
        n_layers=config.n_layers,
        d_model=config.d_model,
        n_ctx=config.n_ctx,
        d_head=config.d_head,
        n_heads=config.n_heads,
        d_mlp=config.d_mlp,
        d_vocab=config.d_vocab,
        d_vocab_out=config.d_vocab,
        act_fn=config.act_fn,
        normalization_type=config.normalization,
        positional_embedding_type=config.pe,  # TransformerLens' rotary tables are dropped: the PE rotates
        rotary_dim=round(config.pe_options["fraction"] * config.d_head) if config.pe == "rotary" else None,
        use_attn_scale=config.attn_scale,
        default_prepend_bos=False,
        init_weights=False,
        seed=None,
        device="cpu",
        model_name=f"probe-{config.pe}",
    )


class PETransformer(HookedTransformer):
    """A decoder-only transformer with one positional encoding; see the module docstring."""

    def __init__(self, config: ModelConfig, device: str | torch.device = "cpu"):
        with warnings.catch_warnings():  # TransformerLens 3.x flags HookedTransformer for 4.0
            warnings.simplefilter("ignore", DeprecationWarning)
            super().__init__(hooked_config(config), move_to_device=False)
        self.config = config
        self._given_positions: torch.Tensor | None = None
        self._in_forward = False  # get_residual outside forward: TransformerLens' generate
        if hasattr(self, "pos_embed"):
            del self.pos_embed  # TransformerLens' learned table: never part of our PEs
        self.pe = make_positional_encoding(config)
        if hasattr(self, "hook_pos_embed") and not self.pe.adds_embedding:
            del self.hook_pos_embed
        self.embed = PEEmbed(self.cfg)
        self.blocks = nn.ModuleList(PEBlock(self.cfg, layer) for layer in range(config.n_layers))
        for layer, block in enumerate(self.blocks):
            block.attn = PEAttention(self.cfg, layer, self.pe)
        if config.tie_embeddings:
            self.unembed = TiedUnembed(self.embed, config.d_model, config.d_vocab)
        self._initialise()
        if not config.bias:
            for name, param in self.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("b_"):
                    param.requires_grad_(False)
        self.setup()
        if torch.device(device).type != "cpu":
            self.to(device, print_details=False)

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

    # TransformerLens hands the embedding to get_residual; the PE decides what to add.
    def get_residual(self, embed, pos_offset, prepend_bos=None, attention_mask=None, tokens=None,
                     return_shortformer_pos_embed=True, device=None):
        if not self._in_forward:  # generate() starts here, with every token's embedding, cached ones too
            pos_offset = 0
        self.pe.begin_forward(self._positions(pos_offset + embed.size(1), self._given_positions))
        residual = embed
        if self.pe.adds_embedding:
            positions = self.pe.positions[pos_offset:pos_offset + embed.size(1)]  # [pos]
            pos_embed = self.pe.embedding(positions, embed.dtype).expand(embed.size(0), -1, -1)
            residual = embed + self.hook_pos_embed(pos_embed)  # [batch, pos, d_model]
        return (residual, None) if return_shortformer_pos_embed else residual

    def move_model_modules_to_device(self):
        nn.Module.to(self, self.cfg.device)

    def forward(self, input: Any, *args: Any, positions: torch.Tensor | None = None, **kwargs: Any):  # type: ignore[override]
        """TransformerLens' forward, after checking the length against ``n_ctx``; ``positions``
        [offset + T] (cached tokens first) replaces the default 0, 1, ... for this pass."""
        if isinstance(input, torch.Tensor):  # tokens [batch, pos] or [pos], or a residual [batch, pos, d_model]
            past = kwargs.get("past_kv_cache", args[9] if len(args) > 9 else None)
            offset = past[0].past_keys.size(1) if past is not None else 0
            new = input.shape[0] if input.dim() == 1 else input.shape[1]
            if offset + new > self.cfg.n_ctx:
                raise ProbeError(
                    f"sequence of {offset + new} positions is longer than this model's context "
                    f"(n_ctx={self.cfg.n_ctx}); rebuild it with n_ctx={offset + new} or more"
                )
            positions = self._positions(offset + new, positions)  # drawn once: get_residual reuses them
            self.pe.begin_forward(positions)  # start_at_layer skips get_residual
        self._given_positions, self._in_forward = positions, True
        try:
            return super().forward(input, *args, **kwargs)
        finally:
            self._given_positions, self._in_forward = None, False

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
            return self.sample_positions(length) if self.training else torch.arange(length, device=device)
        if given.shape != (length,):
            raise ProbeError(f"positions must give one per token, cached ones included ({length}); "
                             f"got shape {tuple(given.shape)}")
        return given.to(device)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):  # type: ignore[override]
        """``nn.Module.load_state_dict``, reading checkpoints from before the PE rotated: those also
        hold TransformerLens' rotary tables, which nothing uses now."""
        state_dict = {k: v for k, v in state_dict.items() if not k.endswith((".attn.rotary_sin", ".attn.rotary_cos"))}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def set_fast_attention(self, enabled: bool) -> None:
        """Allow (default) or forbid the scaled_dot_product_attention path in every layer."""
        for block in self.blocks:
            block.attn.fast_path = enabled


def build_model(pe: str, *, vocab_size: int, preset: str = "tiny", seed: int = 0,
                device: str | torch.device = "cpu", **overrides: Any) -> PETransformer:
    """A fresh model: ``build_model("t5", vocab_size=40, preset="tiny", n_layers=1)``.

    ``preset`` is ``tiny``, ``small`` or ``base`` (``probe.models.config.PRESETS``); any field of
    ``ModelConfig`` can be overridden. The same seed gives the same weights.
    """
    from probe.models.config import resolve_config

    config = resolve_config(pe, vocab_size=vocab_size, preset=preset, seed=seed, **overrides)
    return PETransformer(config, device=device)
