"""Causal attention under a capped rotation (ReRoPE; Su 2023), as two attentions merged by their
log-sum-exp, so no [query, key] logits are held and the work stays about one causal attention's.

A key more than ``cap`` behind its query is scored as if it sat ``cap`` behind: the query turned to position
``cap`` against the key turned to 0. With ``c = cap + 1``, query ``i`` splits its keys in two:

- near, ``i - cap .. i``: the layer's own turned queries and keys, causal, the far keys masked;
- far, ``0 .. i - c``: queries ``c ..`` turned to ``cap`` against keys ``.. T - c`` turned to 0, which is a causal
  attention of ``T - c`` queries on ``T - c`` keys (query ``i`` is row ``i - c``), with no mask of its own.

Each gives its rows' output ``o`` and log-sum-exp ``l``; the softmax over both sets of keys is
``o_near + sigmoid(l_far - l_near) (o_far - o_near)``. On CPU both are the fused flash kernel, which returns
``l``; elsewhere the formula itself. Long sequences go in blocks of queries, each reading the keys it can see,
so a mask never spans more than a block's rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from probe.compat import cpu_flash_attention


def capped_causal_attention(
    near_q: Tensor,
    near_k: Tensor,
    far_q: Tensor,
    far_k: Tensor,
    v: Tensor,
    cap: int,
    scale: float,
    hidden: Tensor | None = None,
    block: int | None = None,
) -> Tensor:
    """[batch, head, pos, d_head] attention of one pass of ``pos`` tokens from position 0 (no cache).

    ``near_q``, ``near_k``: queries and keys as the layer turns them, ``v``: values, [batch, head, pos, d_head];
    ``far_q``: the last ``pos - cap - 1`` queries turned to ``cap``, ``far_k``: the first ``pos - cap - 1`` keys
    turned to 0, [batch, head, pos - cap - 1, d_head]; one dtype. ``hidden`` [batch or 1, head or 1, pos or 1,
    pos] marks keys a query must not see besides the future (a window, padding). ``block``: queries per block
    (None: all at once)."""
    length = near_q.size(2)
    if hidden is not None:
        hidden = hidden.expand(*hidden.shape[:2], length, length)
    step = length if block is None else block
    blocks = [
        _block(near_q, near_k, far_q, far_k, v, cap, scale, hidden, start, min(start + step, length))
        for start in range(0, length, step)
    ]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)


def _block(near_q, near_k, far_q, far_k, v, cap: int, scale: float, hidden, start: int, end: int) -> Tensor:
    """[batch, head, end - start, d_head]: the rows ``start .. end - 1`` of :func:`capped_causal_attention`."""
    c = cap + 1
    device = near_q.device
    rows = torch.arange(start, end, device=device)
    low = max(0, start - cap)  # the first key a row of this block sees from near
    behind = rows[:, None] - torch.arange(low, end, device=device)[None, :]  # [row, key]
    near_hidden = (behind > cap) if start == 0 else (behind > cap) | (behind < 0)  # from 0, the kernel is causal
    if hidden is not None:
        near_hidden = near_hidden | hidden[..., start:end, low:end]
    out, lse_near = _attend(
        near_q[:, :, start:end], near_k[:, :, low:end], v[:, :, low:end], near_hidden, scale, start == 0
    )
    first = max(start, c)  # the block's first row with far keys
    if first >= end:
        return out
    # far rows first .. end - 1 (far_q rows first - c ..) see keys 0 .. row - c: causal from row c on
    far_rows = rows[first - start :]
    far_hidden = None
    if first != c:
        far_hidden = far_rows[:, None] - c < torch.arange(end - c, device=device)[None, :]
    if hidden is not None:
        seen = hidden[..., first:end, : end - c]
        far_hidden = seen if far_hidden is None else far_hidden | seen
    far, lse_far = _attend(
        far_q[:, :, first - c : end - c], far_k[:, :, : end - c], v[:, :, : end - c], far_hidden, scale, first == c
    )
    share = torch.sigmoid(lse_far - lse_near[..., first - start :])  # [batch, head, row]: the far keys' share
    if hidden is not None:  # a row that sees no far key (or no near one) takes all from the other
        sees_far = _sees_a_key(far_hidden, first - c)
        sees_near = _sees_a_key(near_hidden, start - low)[..., first - start :]
        share = share.where(sees_far, 0.0).where(sees_near, 1.0)
    blended = torch.lerp(out[:, :, first - start :], far, share[..., None].to(out.dtype))
    if out.requires_grad:  # the kernel's backward reads its output: leave it whole
        return torch.cat([out[:, :, : first - start], blended], dim=2)
    out[:, :, first - start :] = blended
    return out


def _sees_a_key(hidden: Tensor, shift: int) -> Tensor:
    """[..., row] whether row ``r`` sees any key at or before ``r + shift`` that ``hidden`` [..., row, key]
    leaves in."""
    rows, keys = hidden.shape[-2:]
    future = (
        torch.arange(keys, device=hidden.device)[None, :] > torch.arange(rows, device=hidden.device)[:, None] + shift
    )
    return ~(hidden | future).all(-1)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, hidden: Tensor | None, scale: float, causal: bool
) -> tuple[Tensor, Tensor]:
    """(softmax(scale q k^T, ``hidden`` keys left out, and with ``causal`` row r seeing keys 0 .. r) v
    [batch, head, row, d_head], its rows' log-sum-exp [batch, head, row]). A row that sees no key gives 0 for
    both (the CPU kernel's convention)."""
    fused = _fused(q)
    dtype = q.dtype if fused or q.dtype == torch.float64 else torch.float32  # the formula's logits: float32 at least
    mask = None
    if hidden is not None:
        hidden = hidden if hidden.dim() == 4 else hidden[None, None]  # [batch or 1, head or 1, row, key]
        mask = torch.zeros(hidden.shape, dtype=dtype, device=q.device).masked_fill_(hidden, float("-inf"))
    if fused:
        return cpu_flash_attention(q, k, v, causal, mask, scale)
    logits = (q @ k.transpose(-1, -2)).to(dtype) * scale  # [batch, head, row, key]
    if causal:
        rows, keys = logits.shape[-2:]
        future = torch.ones(rows, keys, dtype=torch.bool, device=q.device).triu_(1)
        logits = logits.masked_fill(future, float("-inf"))
    if mask is not None:
        logits = logits + mask
    lse = torch.logsumexp(logits, dim=-1)  # [batch, head, row]
    lse = lse.where(torch.isfinite(lse), 0.0)
    probs = torch.exp(logits - lse[..., None])
    return probs.to(v.dtype) @ v, lse


def _fused(q: Tensor) -> bool:
    """Whether the CPU flash kernel, which returns the log-sum-exp, serves ``q``."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64, torch.bfloat16)
