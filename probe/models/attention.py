"""The attention layer every PE model uses: causal multi-head attention with the PE's own term.

TransformerLens' parameters (``W_Q``, ``W_K``, ``W_V`` [head, d_model, d_head], ``W_O`` [head,
d_head, d_model], ``b_Q`` ... ``b_O``) and hook points (``hook_q``, ``hook_k``, ``hook_v``,
``hook_attn_scores``, ``hook_pattern``, ``hook_z``, ``hook_result``), plus the PE's own:
``hook_pos_bias`` [head, query, key] for PEs that add a term to the logits (T5, ALiBi),
``hook_rot_q`` / ``hook_rot_k`` [batch, pos, head, d_head] for rotating ones, and
``hook_pos_scores`` [batch, head, query, key] for a query-dependent term (CoPE), so each can be
read and patched. ``hook_attn_scores`` holds the logits after the PE's terms, the causal mask and the
layer's edit, as in TransformerLens.

A layer may hold an edit (:class:`probe.models.attention_edit.Edit`: a factor per head and query, hidden keys,
a cap on distance), which :func:`probe.models.attach.attach` compiles from an intervention. It attends by one
of two routes, which give the same result: the *reference* route, TransformerLens' recipe with every hook
firing and the edit applied to the scores; and the *fused* route, which hands q, k, v, the bias and the edit to
a kernel (:mod:`probe.models.fused_attention`). The fused route runs unless a row of :data:`REFERENCE_ONLY`
holds. As in x-transformers' ``Attend``, what the layer's configuration rules out is settled when the layer is
built (CoPE's query-dependent term has no kernel: such a layer is on the reference route for good); what a call
brings is asked per pass: a caller who observes the scores or the pattern asks for the reference route
(``run_with_cache`` does, by name; a hook on those points does by being there), a cache, dropout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.config import TransformerLensConfig
from transformer_lens.hook_points import HookPoint

from probe.compat import global_hooks, hook_count
from probe.models.attention_edit import Edit, capped_bias, edited_scores
from probe.models.fused_attention import additive_mask, causal_mask, fused_attention
from probe.models.kv_cache import CacheEntry
from probe.models.positional import PositionalEncoding


def is_hooked(point: HookPoint) -> bool:
    """Whether anything (a user's hook, ``run_with_cache``'s) is registered on ``point``."""
    return hook_count(point) > 0


def hook_may_edit(point: HookPoint) -> bool:
    """Whether a hook may get what ``point`` is handed, and edit it in place: one on ``point``, or a module-global
    one. A tensor that serves more than the hooked site (one layer's pass) is copied for it only then, so a pass
    with no hooks (training) copies nothing."""
    return is_hooked(point) or global_hooks()


def _project_in(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[batch, pos, d_model] through ``w`` [head, d_model, d_head] + ``b`` [head, d_head] ->
    [batch, pos, head, d_head], as one linear layer (TransformerLens' ``simple_attn_linear``)."""
    heads, d_model, d_head = w.shape
    out = F.linear(x, w.transpose(1, 2).reshape(heads * d_head, d_model), b.reshape(-1))
    return out.reshape(x.size(0), x.size(1), heads, d_head)


class PEAttention(nn.Module):
    """Causal multi-head attention whose logits get the positional term of ``pe``."""

    fast_path: bool = True  # False: the reference route, asked for by name
    reference_only: str | None = None  # why this layer can never fuse (a row of REFERENCE_ONLY read when built)
    attn_dropout: float = 0.0  # dropout on the probabilities while training (probe.training.dropout sets it)
    edit: Edit | None = None  # what probe.models.attach.attach compiled for this layer

    def __init__(
        self,
        n_heads: int,
        d_model: int,
        d_head: int,
        attn_scale: bool,
        layer: int,
        pe: PositionalEncoding,
        cfg: TransformerLensConfig,
    ):
        super().__init__()
        self.n_heads, self.d_head, self.layer_id = n_heads, d_head, layer
        self.cfg = cfg  # the model's: its use_attn_result is read on every pass, as TransformerLens does
        # TransformerLens 3.x's order, which the seeded initialisation follows (same seed, same weights)
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.b_Q = nn.Parameter(torch.zeros(n_heads, d_head))
        self.b_O = nn.Parameter(torch.zeros(d_model))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.b_K = nn.Parameter(torch.zeros(n_heads, d_head))
        self.b_V = nn.Parameter(torch.zeros(n_heads, d_head))
        self.attn_scale = math.sqrt(d_head) if attn_scale else 1.0
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()  # [batch, key, head, d_head]
        self.hook_v = HookPoint()  # [batch, key, head, d_head]
        self.hook_attn_scores = HookPoint()  # [batch, head, query, key]
        self.hook_pattern = HookPoint()  # [batch, head, query, key]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]
        self.hook_result = HookPoint()  # [batch, pos, head, d_model]
        object.__setattr__(self, "_pe", pe)  # shared with the model; not a submodule of this layer
        self.rotates = pe.rotates and pe.rotates_layer(layer)
        if self.rotates:
            self.hook_rot_q = HookPoint()  # [batch, pos, head, d_head]
            self.hook_rot_k = HookPoint()
        if pe.adds_bias:
            self.hook_pos_bias = HookPoint()  # [head, query, key]
        if pe.scores_term:
            self.hook_pos_scores = HookPoint()  # [batch, head, query, key]
        self.reference_only = next(
            (why for why, holds in REFERENCE_ONLY if isinstance(holds, WhenBuilt) and holds.test(pe, layer)), None
        )

    def route(self, key_len: int = 0, offset: int = 0, dropout: float = 0.0) -> str:
        """``"reference"`` where a row of :data:`REFERENCE_ONLY` holds (those read when the layer was built, or
        the others for a pass of ``key_len`` keys from ``offset``, ``dropout`` on its probabilities), else
        ``"fused"``."""
        if self.reference_only is not None:
            return "reference"
        per_call = (holds for _, holds in REFERENCE_ONLY if not isinstance(holds, WhenBuilt))
        return "reference" if any(holds(self, key_len, offset, dropout) for holds in per_call) else "fused"

    def uses_fast_path(self) -> bool:
        """Whether a plain pass takes the fused route."""
        return self.route() == "fused"

    def turn(self, x: torch.Tensor, at: int) -> torch.Tensor:
        """``x`` [batch, pos, head, d_head] as this layer turns it at positions ``at``, ``at + 1``, ..."""
        return self._pe.rotate(self.layer_id, x, at)

    def forward(
        self, x: torch.Tensor, past_kv_cache_entry: CacheEntry | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[batch, pos, d_model] (normalised) -> [batch, pos, d_model]; ``attention_mask`` [batch, key]
        (or [batch, query, key] for packed rows, :meth:`PETransformer.forward`'s ``segments``)
        marks padding keys with 0, ``past_kv_cache_entry`` holds this layer's earlier keys and values."""
        q = self.hook_q(_project_in(x, self.W_Q, self.b_Q))  # [batch, pos, head, d_head]
        k = self.hook_k(_project_in(x, self.W_K, self.b_K))
        v = self.hook_v(_project_in(x, self.W_V, self.b_V))
        offset, turned = 0, None
        if past_kv_cache_entry is not None:
            offset = past_kv_cache_entry.past_keys.size(1)
            if self._caches_turned_keys(past_kv_cache_entry):  # each key turned once, at its own position
                k, v = past_kv_cache_entry.append(k, v, self._pe.rotate_keys(self.layer_id, k, offset))
                turned = past_kv_cache_entry.past_turned  # [batch, key, head, d_head]
            else:
                k, v = past_kv_cache_entry.append(k, v)
        unturned = (q, k)  # a capped rotation scores far keys from these
        if self.rotates:
            q = self.hook_rot_q(self.turn(q, offset))
            if turned is not None and hook_may_edit(self.hook_rot_k):  # the cache's buffer: a hook edits a copy
                turned = turned.clone()
            k = self.hook_rot_k(turned if turned is not None else self._pe.rotate_keys(self.layer_id, k, 0))
        bias = self._bias(q.size(1), k.size(1)) if self._pe.adds_bias else None  # [head, query, key]
        drop = self.attn_dropout if self.training else 0.0
        attend = self._reference if self.route(k.size(1), offset, drop) == "reference" else self._fused
        return self._project(self.hook_z(attend(q, k, v, bias, unturned, offset, attention_mask, drop)))

    def _caches_turned_keys(self, entry) -> bool:
        """Whether this layer's keys can be cached turned: it turns them, by position alone (not by the pass's
        length, as a dynamic scaling does), under no capped rotation (whose far keys are scored unturned), and the
        cache keeps them (probe's; TransformerLens' does not)."""
        edit_turns = self.edit is not None and bool(self.edit.turns)
        keeps = isinstance(entry, CacheEntry)
        return self.rotates and keeps and not self._pe.depends_on_length and not edit_turns

    def _bias(self, query_len: int, key_len: int) -> torch.Tensor:
        """[head, query, key] the PE's bias, each distance past the edit's cap read as the cap; the PE computes it
        once per pass for every layer, so a hook that may edit it in place gets this layer's own copy."""
        bias = self._pe.bias(self.layer_id, query_len, key_len)
        if self.edit is not None and self.edit.cap is not None:
            bias = capped_bias(bias, self.edit.cap)
        elif hook_may_edit(self.hook_pos_bias):
            bias = bias.clone()
        return self.hook_pos_bias(bias)

    def _fused(self, q, k, v, bias, unturned, offset, attention_mask, drop) -> torch.Tensor:
        """[batch, query, head, d_head] by :func:`probe.models.fused_attention.fused_attention`."""
        edit, scale = self.edit, self.attn_scale
        return fused_attention(q, k, v, bias, edit, scale, offset, attention_mask, drop, unturned, self.turn)

    def _reference(self, q, k, v, bias, unturned, offset, attention_mask, drop) -> torch.Tensor:
        """[batch, query, head, d_head] by TransformerLens' recipe: every hook fires, the edit changes the scores."""
        k, v = k.contiguous(), v.contiguous()  # a cache's views laid out as before it: the same sums' order
        scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / self.attn_scale  # [batch, head, query, key]
        mask = additive_mask(q, k.size(1), offset, bias, attention_mask)
        if mask is None:
            mask = causal_mask(q.size(1), k.size(1), offset, q.device, scores.dtype)
        scores = scores + mask
        if self._pe.scores_term:
            scores = scores + self.hook_pos_scores(self._pe.score_term(self.layer_id, q, k, scores))
        if self.edit is not None:
            scores = edited_scores(scores, self.edit, *unturned, self.turn, self.attn_scale)
        scores = self.hook_attn_scores(scores)
        pattern = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # rows with every key masked: 0
        pattern = self.hook_pattern(pattern)  # [batch, head, query, key]
        if drop:
            pattern = F.dropout(pattern, drop)
        return (pattern.to(v.dtype) @ v.transpose(1, 2)).transpose(1, 2)  # [batch, query, head, d_head]

    def _project(self, z: torch.Tensor) -> torch.Tensor:
        """[batch, pos, head, d_head] -> [batch, pos, d_model] through W_O (per head with ``cfg.use_attn_result``)."""
        if self.cfg.use_attn_result:
            result = self.hook_result(torch.einsum("bphd,hdm->bphm", z, self.W_O))  # [batch, pos, head, d_model]
            return result.sum(dim=2) + self.b_O
        batch, pos = z.shape[:2]
        w = self.W_O.reshape(self.n_heads * self.d_head, -1)
        return z.reshape(batch, pos, -1) @ w + self.b_O


def _observed(attn: PEAttention) -> bool:
    return is_hooked(attn.hook_attn_scores) or is_hooked(attn.hook_pattern) or global_hooks()


def _far_keys_need_one_pass(attn: PEAttention, key_len: int, offset: int, dropout: float) -> bool:
    edit = attn.edit
    return edit is not None and edit.turns and key_len - 1 > edit.cap and bool(offset or dropout)


class WhenBuilt(NamedTuple):
    """A row of :data:`REFERENCE_ONLY` known from the layer's configuration: read once, when the layer is built."""

    test: Callable[[PositionalEncoding, int], bool]  # (the layer's PE, its index) -> it can never fuse


# The compatibility table: why a pass cannot take the fused route. A row that holds sends it to the reference route;
# no other place decides. (why, holds): a WhenBuilt row is read when the layer is built (PEAttention.reference_only),
# every other row on each pass, as holds(layer, key_len, offset, dropout).
REFERENCE_ONLY: tuple[tuple[str, WhenBuilt | Callable[[PEAttention, int, int, float], bool]], ...] = (
    ("a query-dependent term (CoPE) has no kernel", WhenBuilt(lambda pe, _: pe.scores_term)),
    ("asked for by name: set_fast_attention(False), reference_route()", lambda a, *_: not a.fast_path),
    (
        "a hook observes the scores or the pattern, or a module-global hook expects every step",
        lambda a, *_: _observed(a),
    ),
    ("a capped rotation's far keys against a cache (refused there) or under dropout", _far_keys_need_one_pass),
)
