"""The attention layer every PE model uses: causal multi-head attention with the PE's own term.

TransformerLens' parameters (``W_Q``, ``W_K``, ``W_V`` [head, d_model, d_head], ``W_O`` [head,
d_head, d_model], ``b_Q`` ... ``b_O``) and hook points (``hook_q``, ``hook_k``, ``hook_v``,
``hook_attn_scores``, ``hook_pattern``, ``hook_z``, ``hook_result``), plus the PE's own:
``hook_pos_bias`` [head, query, key] for PEs that add a term to the logits (T5, ALiBi),
``hook_rot_q`` / ``hook_rot_k`` [batch, pos, head, d_head] for rotating ones, and
``hook_pos_scores`` [batch, head, query, key] for a query-dependent term (CoPE), so each can be
read and patched. ``hook_attn_scores`` holds the logits after the PE's terms and the causal mask,
as in TransformerLens.

Fast path: while nothing hooks ``hook_attn_scores`` or ``hook_pattern``, the layer runs
``torch.nn.functional.scaled_dot_product_attention`` with the bias as an additive mask (the
flash kernel where there is no bias). Any hook on those points, which ``run_with_cache`` adds
too, switches the layer back to the explicit path; both give the same result. One kind of hook on
``hook_attn_scores`` keeps the fast path: an intervention (:mod:`probe.models.intervention_hooks`) whose
algebra the layer can read (``fold``: the logits times a factor per head and query, keys masked), alone
on the point; the layer multiplies its queries and its bias by the factor and masks the keys in the bias,
which is the same product, taken before the kernel instead of on the scores after it; a capped rotation
(ReRoPE) becomes two causal attentions merged by their log-sum-exp (:mod:`probe.models.capped_attention`),
and decoding against a cache goes to the explicit path, whose hook refuses it. A biased layer on
CPU takes ``probe.models.bias_attention`` instead: the flash kernel with the bias and causal
skipping together, where SDPA would need a causal mask added to the bias, and, for a learned bias
(T5, KERPLE, FIRE), would fall back to its quadratic math path to give it its gradient. A PE with a query-dependent term
(CoPE) always takes the explicit path.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from probe.models import bias_attention
from probe.models.capped_attention import capped_causal_attention
from probe.models.intervention_hooks import folds_on
from probe.models.positional import PositionalEncoding


def is_hooked(point: HookPoint) -> bool:
    """Whether anything (a user's hook, ``run_with_cache``'s) is registered on ``point``."""
    return bool(
        point._forward_hooks
        or point._forward_pre_hooks
        or point._backward_hooks
        or getattr(point, "_backward_pre_hooks", None)
    )


def global_hooks() -> bool:
    """Whether a module-global hook is registered: it would expect every module to run."""
    module = torch.nn.modules.module
    return bool(module._global_forward_hooks or module._global_forward_pre_hooks or module._global_backward_hooks)


def _keys_kept(attention_mask: torch.Tensor, device) -> torch.Tensor:
    """[batch, 1, 1 or query, key] True for the keys a query may see: ``attention_mask`` is [batch, key] (0 marks
    padding) or [batch, query, key] (packed rows' allowed pairs)."""
    keep = attention_mask.to(device).bool()
    return keep[:, None] if keep.dim() == 3 else keep[:, None, None, :]


def _project_in(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[batch, pos, d_model] through ``w`` [head, d_model, d_head] + ``b`` [head, d_head] ->
    [batch, pos, head, d_head], as one linear layer (TransformerLens' ``simple_attn_linear``)."""
    heads, d_model, d_head = w.shape
    out = F.linear(x, w.transpose(1, 2).reshape(heads * d_head, d_model), b.reshape(-1))
    return out.reshape(x.size(0), x.size(1), heads, d_head)


class PEAttention(nn.Module):
    """Causal multi-head attention whose logits get the positional term of ``pe``."""

    fast_path: bool = True
    attn_dropout: float = 0.0  # dropout on the probabilities while training (probe.training.dropout sets it)

    def __init__(self, n_heads: int, d_model: int, d_head: int, attn_scale: bool, layer: int, pe: PositionalEncoding):
        super().__init__()
        self.n_heads, self.d_head, self.layer_id = n_heads, d_head, layer
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
        self.use_attn_result = False  # hook_result per head: model.set_use_attn_result(True)
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

    def uses_fast_path(self) -> bool:
        return (
            self.fast_path
            and not self._pe.scores_term
            and (not is_hooked(self.hook_attn_scores) or self._folds() is not None)
            and not is_hooked(self.hook_pattern)
            and not global_hooks()
        )

    def _folds(self) -> list | None:
        """The intervention hooks on ``hook_attn_scores`` when they are all that hooks it (None otherwise)."""
        return folds_on(self.hook_attn_scores)

    def _fold_terms(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device):
        """(factor [head or 1, query, 1] or None, keys hidden [query, key] or None): the folded interventions'
        product of factors and union of windows, for a pass whose queries are the last of ``key_len``."""
        factor = outside = None
        for fold in self._folds() or []:
            f, o = fold.fold(query_len, key_len, dtype, device)
            if f is not None:
                factor = f if factor is None else factor * f
            if o is not None:
                outside = o if outside is None else outside | o
        return factor, outside

    def _folded(self, q: torch.Tensor, bias: torch.Tensor | None, key_len: int):
        """(q, bias) with the folded interventions applied: q [batch, query, head, d_head] times each
        (head, query) factor, the bias [head or 1, query, key] times it and -inf on hidden keys."""
        query_len = q.size(1)
        factor, outside = self._fold_terms(query_len, key_len, q.dtype, q.device)  # [head or 1, query, 1]
        if factor is not None:
            q = q * factor.permute(1, 0, 2)[None]  # [1, query, head or 1, 1]
            bias = None if bias is None else bias * factor.to(bias.dtype)
        if outside is not None:
            base = bias if bias is not None else torch.zeros(1, query_len, key_len, device=q.device, dtype=q.dtype)
            bias = base.masked_fill(outside, float("-inf"))
        if bias is not None and bias.size(0) != self.n_heads:
            bias = bias.expand(self.n_heads, -1, -1)
        return q, bias

    def forward(
        self, x: torch.Tensor, past_kv_cache_entry=None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[batch, pos, d_model] (normalised) -> [batch, pos, d_model]; ``attention_mask`` [batch, key]
        (or [batch, query, key] for packed rows, :meth:`PETransformer.forward`'s ``segments``)
        marks padding keys with 0, ``past_kv_cache_entry`` holds this layer's earlier keys and values."""
        q = self.hook_q(_project_in(x, self.W_Q, self.b_Q))  # [batch, pos, head, d_head]
        k = self.hook_k(_project_in(x, self.W_K, self.b_K))
        v = self.hook_v(_project_in(x, self.W_V, self.b_V))
        offset = 0
        if past_kv_cache_entry is not None:
            offset = past_kv_cache_entry.past_keys.size(1)
            k, v = past_kv_cache_entry.append(k, v)  # [batch, key, head, d_head]
        unturned = (q, k)  # a capped rotation scores far keys from these
        if self.rotates:
            q = self.hook_rot_q(self._pe.rotate(self.layer_id, q, offset))
            k = self.hook_rot_k(self._pe.rotate_keys(self.layer_id, k, 0))
        query_len, key_len = q.size(1), k.size(1)

        bias = self.hook_pos_bias(self._pe.bias(self.layer_id, query_len, key_len)) if self._pe.adds_bias else None
        fast = self.uses_fast_path()
        drop = self.attn_dropout if self.training else 0.0
        if fast and is_hooked(self.hook_attn_scores):
            capped = next((fold for fold in self._folds() if fold.turn is not None), None)
            if capped is not None and key_len - 1 > capped.intervention.cap:  # far keys to score: a rotating layer
                if offset or drop:  # the hook on the explicit path reads it (and refuses a cache)
                    fast = False
                else:
                    z = self._capped_attention(capped, *unturned, q, k, v, attention_mask)
                    return self._project(self.hook_z(z))
            else:
                q, bias = self._folded(q, bias, key_len)
        if (
            fast
            and bias is not None
            and offset == 0
            and attention_mask is None
            and not drop
            and bias_attention.usable(q)
        ):
            z = bias_attention.biased_causal_attention(
                *(t.transpose(1, 2) for t in (q, k, v)), bias.to(q.dtype), 1.0 / self.attn_scale
            )
            return self._project(self.hook_z(z.transpose(1, 2)))  # [batch, query, head, d_head]
        mask = self._additive_mask(query_len, key_len, offset, q, bias, attention_mask)
        if fast:
            # SDPA wants the mask in q's dtype; under bf16 autocast that would round the bias (ALiBi's
            # slope x distance loses adjacent keys' differences), so a biased layer attends in the
            # mask's float32 instead, as the hooked path's float32 scores do, with autocast off: SDPA is
            # on its lower-precision list, which would cast the float32 mask to bf16 all the same.
            inputs = (q, k, v) if mask is None else (q.to(mask.dtype), k.to(mask.dtype), v.to(mask.dtype))
            with torch.autocast(q.device.type, enabled=False) if mask is not None else nullcontext():
                z = F.scaled_dot_product_attention(
                    *(t.transpose(1, 2) for t in inputs),
                    attn_mask=mask,
                    is_causal=mask is None and query_len > 1,
                    dropout_p=drop,
                    scale=1.0 / self.attn_scale,
                )  # [batch, head, query, d_head]
            z = self.hook_z(z.transpose(1, 2).to(q.dtype))  # [batch, query, head, d_head]
        else:
            scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / self.attn_scale  # [batch, head, query, key]
            if mask is None:
                mask = self._causal_mask(query_len, key_len, offset, q.device, scores.dtype)
            scores = scores + mask
            if self._pe.scores_term:
                scores = scores + self.hook_pos_scores(self._pe.score_term(self.layer_id, q, k, scores))
            scores = self.hook_attn_scores(scores)
            pattern = torch.softmax(scores, dim=-1)
            pattern = torch.nan_to_num(pattern, nan=0.0)  # rows with every key masked
            pattern = self.hook_pattern(pattern)  # [batch, head, query, key]
            if drop:
                pattern = F.dropout(pattern, drop)
            z = self.hook_z((pattern.to(v.dtype) @ v.transpose(1, 2)).transpose(1, 2))  # [batch, query, head, d_head]
        return self._project(z)

    def _capped_attention(self, fold, q_raw, k_raw, q, k, v, attention_mask) -> torch.Tensor:
        """[batch, query, head, d_head] attention of one pass from position 0 under a capped rotation
        (:mod:`probe.models.capped_attention`): the queries with far keys (from ``cap + 1`` on) turned to the
        cap (``fold.turn``) against the keys turned to 0; the folded temperatures and window apply to both."""
        length, d_head = q.size(1), q.size(-1)
        cap = fold.intervention.cap
        far = length - cap - 1  # queries with a far key; keys that are far from some query
        fold.stash.clear()  # the hook's copies of the unturned queries and keys: not needed here
        # a turn to one position is linear: x turned is x @ (each unit vector turned), a [d_head, d_head] matrix
        units = torch.eye(d_head, dtype=q.dtype, device=q.device)
        at_cap = q_raw[:, -far:] @ fold.turn(units[:, None, None, :], cap)[:, 0, 0]  # [batch, far, head, d_head]
        to_zero = fold.turn(units[:, None, None, :], 0)[:, 0, 0]
        at_zero = k_raw[:, :far] if torch.equal(to_zero, units) else k_raw[:, :far] @ to_zero
        factor, outside = self._fold_terms(length, length, q.dtype, q.device)
        if factor is not None:  # [head or 1, query, 1]
            q = q * factor.permute(1, 0, 2)[None]
            at_cap = at_cap * factor[:, -far:].permute(1, 0, 2)[None]
        hidden = None if outside is None else outside[None, None]  # [1, 1, query, key]
        if attention_mask is not None:  # [batch, key] or [batch, query, key]: 0 marks keys left out
            left_out = ~_keys_kept(attention_mask, q.device)
            hidden = left_out if hidden is None else hidden | left_out
        z = capped_causal_attention(
            *(t.transpose(1, 2) for t in (q, k, at_cap, at_zero, v)), cap, 1.0 / self.attn_scale, hidden
        )  # [batch, head, query, d_head]
        return z.transpose(1, 2)

    def _causal_mask(self, query_len: int, key_len: int, offset: int, device, dtype) -> torch.Tensor:
        query = torch.arange(offset, offset + query_len, device=device)[:, None]
        key = torch.arange(key_len, device=device)[None, :]
        # filled on the device: no host tensor copied in, so a captured step can hold it
        mask = torch.zeros(query_len, key_len, device=device, dtype=dtype)
        return mask.masked_fill_(key > query, float("-inf"))  # [query, key]

    def _additive_mask(self, query_len, key_len, offset, q, bias, attention_mask):
        """[batch or 1, head or 1, query, key] ``bias`` [head, query, key] + causal mask, or None for a
        plain causal layer."""
        if bias is None and attention_mask is None:
            return None
        # float32 (float64 for a float64 model): a bf16 bias would round ALiBi's slope x distance.
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        mask = self._causal_mask(query_len, key_len, offset, q.device, dtype)[None, None]
        if bias is not None:
            mask = mask + bias.to(dtype)[None]
        if attention_mask is not None:  # [batch, key]: 0 marks padding keys; [batch, query, key]: allowed pairs
            keep = _keys_kept(attention_mask, q.device)
            mask = mask.masked_fill(~keep, float("-inf"))
        return mask

    def _project(self, z: torch.Tensor) -> torch.Tensor:
        """[batch, pos, head, d_head] -> [batch, pos, d_model] through W_O (per head if hooked)."""
        if self.use_attn_result:
            result = self.hook_result(torch.einsum("bphd,hdm->bphm", z, self.W_O))  # [batch, pos, head, d_model]
            return result.sum(dim=2) + self.b_O
        batch, pos = z.shape[:2]
        w = self.W_O.reshape(self.n_heads * self.d_head, -1)
        return z.reshape(batch, pos, -1) @ w + self.b_O
