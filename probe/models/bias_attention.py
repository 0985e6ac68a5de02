"""Causal attention with a learned additive bias, on CPU, without the quadratic math path.

``scaled_dot_product_attention`` with an ``attn_mask`` that requires grad (T5's bias, KERPLE's,
FIRE's) falls back on CPU to its math path: it computes all T^2 logits where the causal half
would do, and materialises each intermediate. At T = 512 that made T5's training step 1.8x
NoPE's (``bench/pe_overhead.py``). Here the forward is the fused CPU flash kernel, with the bias
as its mask and causal skipping on; the backward recomputes the probabilities block by block
from the kernel's log-sum-exp, over the causal part only, and gets the gradients of the queries,
keys, values and of the bias from the same blocks (dS = P (dP - rowsum(dO O)), summed over the
batch for the bias, which has none).
"""

from __future__ import annotations

import torch

BLOCK = 48  # query rows per backward block: large enough for the matmuls, small enough to skip most causal zeros


def usable(q: torch.Tensor, bias: torch.Tensor) -> bool:
    """Whether ``biased_causal_attention`` applies and pays: CPU, float32/64, a bias that needs its
    gradient, and more than one backward block of queries (q [batch, pos, head, d_head]): a single
    block skips no causal zeros, and there SDPA's math path is as fast with fewer operators."""
    return (q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64) and q.size(1) > BLOCK
            and bias.requires_grad and torch.is_grad_enabled())


def biased_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                            scale: float) -> torch.Tensor:
    """softmax(scale q k^T + bias, causal) v: q, k, v [batch, head, pos, d_head], bias [head, pos, pos]
    in q's dtype -> [batch, head, pos, d_head]. Query t attends to keys 0..t (no cache, no padding)."""
    return _BiasedCausalAttention.apply(q, k, v, bias.contiguous(), scale)


class _BiasedCausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale):  # type: ignore[override]
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, True, attn_mask=bias[None], scale=scale)  # [batch, head, pos, d_head], [batch, head, pos]
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, bias, out, lse = ctx.saved_tensors
        scale = ctx.scale
        pos = q.size(2)
        q, k, v, grad_out = (t.contiguous() for t in (q, k, v, grad_out))  # one copy each, not one per block
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros_like(k)
        grad_v = torch.zeros_like(v)
        grad_bias = torch.zeros_like(bias)  # [head, query, key]; stays 0 above the diagonal
        delta = (grad_out * out).sum(-1, keepdim=True)  # [batch, head, pos, 1]: rowsum(dO O) = rowsum(P dP)
        q_scaled, k_scaled = q * scale, k * scale  # the logits' scale, applied to d_head columns, not to blocks
        k_t, v_t = k_scaled.transpose(-1, -2), v.transpose(-1, -2)  # [batch, head, d_head, pos]
        above = torch.ones(pos, pos, dtype=torch.bool, device=q.device).triu_(1)  # [query, key]: keys after the query
        masked_bias = bias.masked_fill(above, float("-inf"))  # [head, query, key]: + causal mask
        for start in range(0, pos, BLOCK):
            end = min(start + BLOCK, pos)  # queries start..end-1 see keys 0..end-1
            rows, keys = slice(start, end), slice(0, end)
            logits = torch.matmul(q[:, :, rows], k_t[..., keys]).add_(masked_bias[:, rows, keys])
            probs = logits.sub_(lse[:, :, rows, None]).exp_()  # [batch, head, block, end]
            grad_v[:, :, keys] += torch.matmul(probs.transpose(-1, -2), grad_out[:, :, rows])
            grad_logits = torch.matmul(grad_out[:, :, rows], v_t[..., keys]).sub_(delta[:, :, rows]).mul_(probs)
            grad_bias[:, rows, keys] = grad_logits.sum(0)
            grad_q[:, :, rows] = torch.matmul(grad_logits, k_scaled[:, :, keys])
            grad_k[:, :, keys] += torch.matmul(grad_logits.transpose(-1, -2), q_scaled[:, :, rows])
        return grad_q, grad_k, grad_v, grad_bias, None

