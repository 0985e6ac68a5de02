"""The layers of a probe model besides attention: embedding, norms, feed-forward, block, unembedding.

Parameter and hook names are TransformerLens' (``embed.W_E``, ``blocks.{l}.ln1.w``,
``blocks.{l}.mlp.W_in``, ``hook_resid_pre``, ``ln1.hook_scale``, ``mlp.hook_post``, ...), so every
checkpoint written on TransformerLens 3.x loads as it was, and every hook name users know fires.
The arithmetic is TransformerLens 3.x's, operation for operation, so the same weights give the
same logits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

if TYPE_CHECKING:
    from probe.models.kv_cache import CacheEntry

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


class Embed(nn.Module):
    """``W_E`` [d_vocab, d_model], looked up with ``F.embedding``: its backward is deterministic
    on several CPU threads, where ``W_E[tokens]``'s accumulates repeated tokens in a
    thread-dependent order (same values on one thread)."""

    def __init__(self, d_vocab: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(d_vocab, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [batch, pos] -> [batch, pos, d_model]
        return F.embedding(tokens, self.W_E)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w (T5LayerNorm, no bias), computed in float32 or wider and
    returned in the weights' dtype; ``hook_normalized`` before ``w``, as TransformerLens' RMSNorm."""

    centred = False

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d_model))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, pos, d_model] -> x (centred, for LN) / its scale (``hook_scale``), in float32 or wider."""
        if x.dtype not in (torch.float32, torch.float64):
            x = x.float()
        if self.centred:
            x = x - x.mean(-1, keepdim=True)
        return x / self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(self.normalise(x)).to(self.w.dtype) * self.w  # [batch, pos, d_model]


class LayerNorm(RMSNorm):
    """(x - mean) / sqrt(var + eps) * w + b: RMSNorm of the centred input, plus a bias; ``hook_normalized``
    after ``w`` and ``b``, as TransformerLens' LayerNorm."""

    centred = True

    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model, eps)
        self.b = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(self.normalise(x).to(self.w.dtype) * self.w + self.b)  # [batch, pos, d_model]


def make_norm(kind: str | None, d_model: int, eps: float) -> nn.Module:
    """``RMS``, ``LN`` or None (identity)."""
    if kind == "RMS":
        return RMSNorm(d_model, eps)
    if kind == "LN":
        return LayerNorm(d_model, eps)
    return nn.Identity()


def _addmm(bias: torch.Tensor, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x @ weight + bias as one fused addmm over the flattened leading dimensions."""
    return torch.addmm(bias, x.reshape(-1, x.size(-1)), weight).view(*x.shape[:-1], weight.size(-1))


class MLP(nn.Module):
    """The feed-forward layer: act(x W_in + b_in) W_out + b_out (ReLU, as T5's)."""

    def __init__(self, d_model: int, d_mlp: int, act_fn: str):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(d_model, d_mlp))
        self.b_in = nn.Parameter(torch.zeros(d_mlp))
        self.W_out = nn.Parameter(torch.empty(d_mlp, d_model))
        self.b_out = nn.Parameter(torch.zeros(d_model))
        self.act_fn = ACTIVATIONS[act_fn]
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_model]
        post = self.hook_post(self.act_fn(self.hook_pre(_addmm(self.b_in, self.W_in, x))))
        return _addmm(self.b_out, self.W_out, post)


class Block(nn.Module):
    """A pre-norm block: resid_mid = resid_pre + attn(ln1(resid_pre)); resid_post = resid_mid +
    mlp(ln2(resid_mid)). ``ln1`` runs once and feeds the query, key and value inputs alike."""

    def __init__(self, norm: str | None, d_model: int, d_mlp: int, act_fn: str, eps: float, attn: nn.Module):
        super().__init__()
        self.ln1 = make_norm(norm, d_model, eps)
        self.ln2 = make_norm(norm, d_model, eps)
        self.attn = attn
        self.mlp = MLP(d_model, d_mlp, act_fn)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(
        self,
        resid_pre: torch.Tensor,
        past_kv_cache_entry: CacheEntry | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        resid_pre = self.hook_resid_pre(resid_pre)  # [batch, pos, d_model]
        attn_out = self.hook_attn_out(self.attn(self.ln1(resid_pre), past_kv_cache_entry, attention_mask))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)  # [batch, pos, d_model]
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(resid_mid)))
        return self.hook_resid_post(resid_mid + mlp_out)  # [batch, pos, d_model]


class Unembed(nn.Module):
    """logits = residual @ W_U + b_U."""

    def __init__(self, d_model: int, d_vocab: int):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(d_model, d_vocab))
        self.b_U = nn.Parameter(torch.zeros(d_vocab))

    def forward(self, residual: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_model] -> [batch, pos, d_vocab]
        return F.linear(residual, self.W_U.T.contiguous(), self.b_U)


class TiedUnembed(nn.Module):
    """logits = (d_model^-0.5 * residual) @ W_E^T: T5's tied output layer."""

    def __init__(self, embed: Embed, d_model: int, d_vocab: int):
        super().__init__()
        object.__setattr__(self, "_embed", embed)  # the embedding owns W_E; not registered twice
        self.scale = d_model**-0.5
        self.register_buffer("b_U", torch.zeros(d_vocab), persistent=False)

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, d_vocab]
        return self.scale * self._embed.W_E.T

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        return residual @ self.W_U  # [batch, pos, d_vocab]
