"""The fused route of probe's attention layer: queries, keys, values, the PE's bias and the layer's edit handed
to a kernel, no [query, key] scores exposed to hooks.

The edit is folded in before the kernel: the logits times a factor per head and query is the queries (and
the bias) times it, and hidden keys are -inf in the bias, the same product the reference route takes on the
scores. The kernel is chosen here, by what the pass needs:

- a capped rotation with far keys (ReRoPE): two causal attentions merged by their log-sum-exp
  (:mod:`probe.models.capped_attention`), one pass from position 0, without dropout;
- a bias on CPU, one pass from position 0, no dropout: the flash kernel with the bias (and padding or packed
  rows' other examples as -inf) and causal skipping together (:mod:`probe.models.bias_attention`);
- anything else: ``scaled_dot_product_attention``, the bias and the causal mask one additive mask (the flash
  kernel where there is neither bias nor padding).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.models import bias_attention
from probe.models.attention_edit import Edit, Turn, far_pair
from probe.models.capped_attention import capped_causal_attention


def causal_mask(query_len: int, key_len: int, offset: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """[query, key] 0 where query ``offset + i`` may see the key, -inf after it."""
    query = torch.arange(offset, offset + query_len, device=device)[:, None]
    key = torch.arange(key_len, device=device)[None, :]
    # filled on the device: no host tensor copied in, so a captured step can hold it
    mask = torch.zeros(query_len, key_len, device=device, dtype=dtype)
    return mask.masked_fill_(key > query, float("-inf"))


def keys_kept(attention_mask: Tensor, device: torch.device) -> Tensor:
    """[batch, 1, 1 or query, key] True for the keys a query may see: ``attention_mask`` is [batch, key] (0 marks
    padding) or [batch, query, key] (packed rows' allowed pairs)."""
    keep = attention_mask.to(device).bool()
    return keep[:, None] if keep.dim() == 3 else keep[:, None, None, :]


def keys_apart(attention_mask: Tensor, q: Tensor) -> Tensor:
    """[batch, query, key] in q's dtype: 0 where a query may see the key by ``attention_mask`` ([batch, key], 0
    marking padding, or packed rows' [batch, query, key]), -inf where not; the causal mask not in it."""
    keep = keys_kept(attention_mask, q.device)[:, 0]  # [batch, 1 or query, key]
    apart = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill_(~keep, float("-inf"))
    return apart.expand(-1, q.size(1), -1)


def additive_mask(
    q: Tensor, key_len: int, offset: int, bias: Tensor | None, attention_mask: Tensor | None
) -> Tensor | None:
    """[batch or 1, head or 1, query, key] ``bias`` [head, query, key] + causal mask + padding, or None for a
    plain causal layer; float32 (float64 for a float64 model): a bf16 bias would round ALiBi's slope x distance."""
    if bias is None and attention_mask is None:
        return None
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    mask = causal_mask(q.size(1), key_len, offset, q.device, dtype)[None, None]
    if bias is not None:
        mask = mask + bias.to(dtype)[None]
    if attention_mask is not None:
        mask = mask.masked_fill(~keys_kept(attention_mask, q.device), float("-inf"))
    return mask


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    edit: Edit | None,
    scale: float,
    offset: int = 0,
    attention_mask: Tensor | None = None,
    dropout: float = 0.0,
    unturned: tuple[Tensor, Tensor] | None = None,
    turn: Turn | None = None,
) -> Tensor:
    """[batch, query, head, d_head] attention of q [batch, query, head, d_head] on k, v [batch, key, head,
    d_head] (queries the last of the keys), logits ``q k / scale + bias`` under ``edit``; ``unturned`` (q, k)
    and the layer's ``turn`` serve a capped rotation."""
    if edit is not None and edit.turns and k.size(1) - 1 > edit.cap:
        return _capped(q, k, v, edit, scale, attention_mask, unturned, turn)
    if edit is not None:
        q, bias = _folded(q, bias, edit, k.size(1))
    if bias is not None and not offset and not dropout and bias_attention.usable(q):
        apart = None if attention_mask is None else keys_apart(attention_mask, q)
        z = bias_attention.biased_causal_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), bias.to(q.dtype), 1 / scale, apart
        )
        return z.transpose(1, 2)
    mask = additive_mask(q, k.size(1), offset, bias, attention_mask)
    # SDPA wants the mask in q's dtype; under bf16 autocast that would round the bias (ALiBi's slope x distance
    # loses adjacent keys' differences), so a masked layer attends in the mask's float32 instead, as the reference
    # route's float32 scores do, with autocast off: SDPA is on its lower-precision list, which would cast the
    # float32 mask to bf16 all the same.
    inputs = (q, k, v) if mask is None else (q.to(mask.dtype), k.to(mask.dtype), v.to(mask.dtype))
    with torch.autocast(q.device.type, enabled=False) if mask is not None else nullcontext():
        z = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in inputs),
            attn_mask=mask,
            is_causal=mask is None and q.size(1) > 1,
            dropout_p=dropout,
            scale=1.0 / scale,
        )  # [batch, head, query, d_head]
    return z.transpose(1, 2).to(q.dtype)


def _folded(q: Tensor, bias: Tensor | None, edit: Edit, key_len: int) -> tuple[Tensor, Tensor | None]:
    """(q, bias) with the edit applied: q [batch, query, head, d_head] times each (head, query) factor, the bias
    [head or 1, query, key] times it and -inf on hidden keys, expanded to every head."""
    query_len = q.size(1)
    factor = edit.factor(query_len, key_len, q.dtype, q.device)  # [head or 1, query, 1]
    hidden = edit.hidden(query_len, key_len, q.device)  # [query, key]
    if factor is not None:
        q = q * factor.permute(1, 0, 2)[None]  # [1, query, head or 1, 1]
        bias = None if bias is None else bias * factor.to(bias.dtype)
    if hidden is not None:
        base = bias if bias is not None else torch.zeros(1, query_len, key_len, device=q.device, dtype=q.dtype)
        bias = base.masked_fill(hidden, float("-inf"))
    if bias is not None and bias.size(0) != q.size(2):
        bias = bias.expand(q.size(2), -1, -1)
    return q, bias


def _capped(q, k, v, edit: Edit, scale: float, attention_mask, unturned, turn: Turn) -> Tensor:
    """[batch, query, head, d_head] attention of one pass from position 0 under a capped rotation: the queries
    with far keys turned to the cap against the keys turned to 0 (:func:`probe.models.attention_edit.far_pair`);
    the edit's factor and hidden keys apply to both."""
    length, cap = q.size(1), edit.cap
    at_cap, at_zero = far_pair(*unturned, cap, turn, far=length - cap - 1)  # [batch, far, head, d_head]
    factor = edit.factor(length, length, q.dtype, q.device)  # [head or 1, query, 1]
    if factor is not None:
        q = q * factor.permute(1, 0, 2)[None]
        at_cap = at_cap * factor[:, cap + 1 :].permute(1, 0, 2)[None]
    hidden = edit.hidden(length, length, q.device)
    hidden = None if hidden is None else hidden[None, None]  # [1, 1, query, key]
    if attention_mask is not None:  # [batch, key] or [batch, query, key]: 0 marks keys left out
        left_out = ~keys_kept(attention_mask, q.device)
        hidden = left_out if hidden is None else hidden | left_out
    z = capped_causal_attention(*(t.transpose(1, 2) for t in (q, k, at_cap, at_zero, v)), cap, 1.0 / scale, hidden)
    return z.transpose(1, 2)  # [batch, query, head, d_head]
