"""Causal attention with an additive bias on CPU: the flash kernel's own causal skipping, and for a
learned bias a backward without the quadratic math path.

``scaled_dot_product_attention`` with an ``attn_mask`` that requires grad (T5's bias, KERPLE's,
FIRE's) falls back on CPU to its math path: it computes all T^2 logits where the causal half
would do, and materialises each intermediate. At T = 512 that made T5's training step 1.8x
NoPE's (``bench/pe_overhead.py``). Here the forward is the fused CPU flash kernel, with the bias
as its mask and causal skipping on; the backward recomputes the probabilities block by block
from the kernel's log-sum-exp, over the causal part only, and gets the gradients of the queries,
keys, values and of the bias from the same blocks (dS = P (dP - rowsum(dO O)), summed over the
batch for the bias, which has none). The probabilities are recomputed in base 2 (exp2 is about
twice as fast as exp on CPU), and the gradients are written in the layout the layer handed in,
so nothing downstream copies them. A fixed bias (ALiBi's, or any bias at evaluation) takes the
same kernel with the kernel's own backward: handing it the bias and ``is_causal`` together spares
building a causal mask and adding the bias to it, a T^2 pass each, in every layer. A learned bias
on a sequence of one block (nothing to skip) takes the formula itself under autograd.

Keys a query may not see besides the later ones (packed rows' other examples, padding) come as ``apart``,
0 or -inf per (query, key) of each row, added to the bias in the forward and to each block's logits in the
backward. Without it a packed batch with a learned bias took SDPA's math path: T5's bias trained Section 6's
scratchpads up to 1.6x as long as NoPE (``bench/packed_steps.py``).
"""

from __future__ import annotations

import torch

from probe.compat import cpu_flash_attention

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x log2(e))
BLOCK = 48  # query rows per backward block: large enough for the matmuls, small enough to skip most causal zeros


def usable(q: torch.Tensor) -> bool:
    """Whether ``biased_causal_attention`` serves this layer (q [batch, pos, head, d_head]): CPU,
    float32 or float64."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)


def biased_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
    apart: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(scale q k^T + bias + apart, causal) v: q, k, v [batch, head, pos, d_head], bias [head, pos, pos]
    and ``apart`` [batch, pos, pos] (0 where a query may see a key, -inf where not; None: every earlier key)
    in q's dtype -> [batch, head, pos, d_head]. Query t attends to keys 0..t (no cache); a query that sees
    no key gives 0.

    A bias without a gradient to give (ALiBi's, or any at evaluation) goes to the flash kernel as
    its mask, with the kernel's own causal skipping and backward (of q, k, v). A learned one gets
    the blocked backward below, or, within one block, where there is nothing to skip, the formula
    itself under autograd: fewer operators than SDPA's math path, which also builds no causal mask."""
    if not (bias.requires_grad and torch.is_grad_enabled()):
        return cpu_flash_attention(q, k, v, True, _kernel_mask(bias, apart), scale)[0]
    if q.size(2) > BLOCK or apart is not None:  # a row that sees no key would be NaN under autograd
        return _BiasedCausalAttention.apply(q, k, v, bias.contiguous(), apart, scale)
    logits = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).add_(_with_causal_mask(bias))
    return torch.matmul(torch.softmax(logits, dim=-1), v)  # [batch, head, pos, d_head]


def _kernel_mask(bias: torch.Tensor, apart: torch.Tensor | None) -> torch.Tensor:
    """[1 or batch, head, query, key] the kernel's additive mask: ``bias`` [head, query, key], plus ``apart``."""
    return bias[None] if apart is None else bias[None] + apart[:, None]


def _with_causal_mask(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` [head, query, key] with -inf on the keys after each query."""
    pos = bias.size(-1)
    above = torch.ones(pos, pos, dtype=torch.bool, device=bias.device).triu_(1)  # [query, key]
    return bias.masked_fill(above, float("-inf"))


class _BiasedCausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, apart, scale):  # type: ignore[override]
        # [batch, head, pos, d_head], [batch, head, pos]
        out, lse = cpu_flash_attention(q, k, v, True, _kernel_mask(bias, apart), scale)
        ctx.save_for_backward(q, k, v, bias, apart, out, lse)  # apart [batch, pos, pos] or None: no gradient
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, bias, apart, out, lse = ctx.saved_tensors
        scale, pos = ctx.scale, q.size(2)
        # Contiguous operands for the block matmuls, each made in one pass. The logits are taken in
        # base 2 (exp2 is about twice as fast as exp on CPU): log2(e) rides on the keys, the lse and
        # the bias, and comes off again where grad_q is written.
        q_scaled = torch.mul(
            q, scale, out=torch.empty(q.shape, dtype=q.dtype, device=q.device)
        )  # [batch, head, pos, d_head]
        k_log2 = torch.mul(k, LOG2E, out=torch.empty(k.shape, dtype=k.dtype, device=k.device))
        values, grad_out = v.contiguous(), grad_out.contiguous()
        lse_log2 = (lse * LOG2E).unsqueeze(-1)  # [batch, head, pos, 1]
        delta = (grad_out * out).sum(-1, keepdim=True)  # [batch, head, pos, 1]: rowsum(dO O) = rowsum(P dP)
        bias_log2 = _with_causal_mask(bias * LOG2E)  # [head, query, key]
        # The gradients in the inputs' own layout (the layer's [batch, pos, head, d_head] seen as
        # [batch, head, pos, d_head]), so what reads them next needs no copy.
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grad_bias = torch.zeros_like(bias)  # [head, query, key]; stays 0 above the diagonal
        for start in range(0, pos, BLOCK):
            rows = min(BLOCK, pos - start)  # queries start..end-1 see keys 0..end-1
            end = start + rows
            q_block, grad_out_block = q_scaled.narrow(2, start, rows), grad_out.narrow(2, start, rows)
            k_seen = k_log2.narrow(2, 0, end)  # [batch, head, end, d_head]
            logits = torch.matmul(q_block, k_seen.transpose(-1, -2))  # [batch, head, rows, end], base 2
            logits.add_(bias_log2[:, start:end, :end])
            if apart is not None:  # -inf stays -inf in base 2
                logits.add_(apart[:, None, start:end, :end])
            probs = logits.sub_(lse_log2.narrow(2, start, rows)).exp2_()
            grad_v.narrow(2, 0, end).add_(torch.matmul(probs.transpose(-1, -2), grad_out_block))
            grad_logits = torch.matmul(grad_out_block, values.narrow(2, 0, end).transpose(-1, -2))
            grad_logits.sub_(delta.narrow(2, start, rows)).mul_(probs)  # dS = P (dP - rowsum(dO O))
            torch.sum(grad_logits, 0, out=grad_bias[:, start:end, :end])
            torch.mul(torch.matmul(grad_logits, k_seen), scale / LOG2E, out=grad_q.narrow(2, start, rows))
            grad_k.narrow(2, 0, end).add_(torch.matmul(grad_logits.transpose(-1, -2), q_block))
        return grad_q, grad_k, grad_v, grad_bias, None, None
