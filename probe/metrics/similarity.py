"""Distances between two models' attention heads and layers (Section 5.2, Eq. similarity).

D_AT(P, Q) = 1/T · Σ_t JSD(P_t ‖ Q_t) compares two heads over a sequence; D^(l)(A, B) is the
minimum of D_AT over all head pairs (P, Q) ∈ A_l × B_l of layer l.

Aggregation over examples, as the paper does it (its released code, then its figure):
D^(l) is computed per example — each example its own minimum over head pairs — and the
figure averages that over the examples of a length bucket (and over layers for the
"average over layers" panel). `layer_distances` returns the per-example values; average
(and bootstrap, `probe.metrics.bootstrap_ci`) over the example dimension.

Both functions take whole causal maps: entries above the diagonal (keys after the query) are
zero and add nothing, so each row's JSD runs over keys ≤ t as the definition asks.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.metrics.jsd import Metric, check_metric, jsd, kl_terms


class LayerDistances(NamedTuple):
    """D^(l)(A, B) per layer, the head pair attaining it, and D_AT for every head pair."""

    per_layer: Tensor  # [..., layer]
    head_pairs: Tensor  # [..., layer, 2]: (head of A, head of B), int64
    pairwise: Tensor  # [..., layer, head_A, head_B]


def _query_weights(
    lengths: Tensor | None, batch_shape: torch.Size, n_positions: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """Weight of each query position in the mean over positions: 1/length on real tokens, 0 on padding.

    `lengths` (true lengths of right-padded sequences) has the shape of a leading part of
    `batch_shape`; the result broadcasts against [*batch_shape, n_positions].
    """
    positions = torch.arange(n_positions, device=device)  # [query]
    if lengths is None:
        return torch.full((n_positions,), 1.0 / n_positions, device=device, dtype=dtype)
    lengths = torch.as_tensor(lengths, device=device)
    if tuple(lengths.shape) != tuple(batch_shape[: lengths.dim()]):
        raise ProbeError(
            f"lengths has shape {tuple(lengths.shape)}; expected the leading "
            f"dimensions of the patterns' batch shape {tuple(batch_shape)}"
        )
    if lengths.numel() and (lengths.min() < 1 or lengths.max() > n_positions):
        raise ProbeError(f"lengths must lie in [1, {n_positions}] (the padded sequence length)")
    lengths = lengths.reshape(*lengths.shape, *[1] * (len(batch_shape) - lengths.dim()), 1)
    return (positions < lengths).to(dtype) / lengths.to(dtype)  # [*lengths.shape, 1.., query]


def head_distance(P: Tensor, Q: Tensor, lengths: Tensor | None = None, metric: Metric = "jsd") -> Tensor:
    """D_AT(P, Q): mean over query positions t of JSD(P_t ‖ Q_t), keys ≤ t (Section 5.2).

    P, Q: [..., query, key] causal patterns (broadcasting). With `lengths` (true lengths of
    right-padded sequences, shaped like the leading batch dimensions) the mean runs over each
    sequence's real positions only. metric="reference-code": see `probe.metrics.jsd`.
    """
    rows = jsd(P, Q, dim=-1, metric=metric)  # [..., query]
    weights = _query_weights(lengths, rows.shape[:-1], rows.shape[-1], rows.device, rows.dtype)
    return torch.where(weights > 0, rows * weights, 0.0).sum(-1)


def layer_distances(
    A: Tensor, B: Tensor, lengths: Tensor | None = None, metric: Metric = "jsd", chunk_elements: int | None = None
) -> LayerDistances:
    """D^(l)(A, B) = min over all head pairs (P, Q) ∈ A_l × B_l of D_AT(P, Q) (Eq. similarity).

    A: [..., layer, head_A, query, key] and B: [..., layer, head_B, query, key], the same leading
    (example) dimensions, layers and length; lengths: true lengths of right-padded examples,
    shaped like the leading dimensions. Work runs in blocks of about `chunk_elements` pair
    entries (default 2^18 on CPU, cache-sized; 2^26 elsewhere): memory stays bounded at any T.
    In float32 the JSD values agree with float64 to ~1e-6 (T ≤ 1024).

    metric="reference-code" reproduces the paper's released code (`attention_kl_analyzer.py`):
    its ½·(KL(M‖P) + KL(M‖Q)) form, and only the head pairs that code visits,
    `itertools.combinations(range(n_heads), 2)` as (head of the compared model, head of NoPE),
    i.e. head_B < head_A with A the NoPE model. `pairwise` still holds every pair.
    """
    dtype = _check_patterns(A, B, metric)
    heads_a, heads_b, n_positions = A.shape[-3], B.shape[-3], A.shape[-1]
    rows, cols = torch.tril_indices(n_positions, n_positions, device=A.device)  # row-major: query by query
    a = A.to(dtype)[..., rows, cols]  # [..., layer, head_A, entry]: the causal entries (key ≤ query)
    b = B.to(dtype)[..., rows, cols]  # [..., layer, head_B, entry]
    batch_shape = A.shape[:-3]  # [..., layer]
    weights = _query_weights(lengths, batch_shape, n_positions, A.device, dtype)  # [..lengths.., 1.., query]
    if lengths is not None:  # padded query rows may hold anything: zero them, so they add nothing
        a = a.masked_fill(weights[..., None, rows] == 0, 0.0)
        b = b.masked_fill(weights[..., None, rows] == 0, 0.0)
    scale = weights.amax(-1).expand(batch_shape)  # [..., layer]: 1/length, each real query's weight

    budget = chunk_elements or (2**18 if A.device.type == "cpu" else 2**26)
    pairwise = _pair_sums(
        a.reshape(-1, heads_a, a.shape[-1]), b.reshape(-1, heads_b, b.shape[-1]), metric, budget
    ).reshape(*batch_shape, heads_a, heads_b)
    if metric == "jsd":
        # JSD = ½Σp·log p + ½Σq·log q − Σm·log m, and with s = p + q,
        # Σm·log m = ½Σs·log s − ½·ln 2·Σs: only Σ s·log s needs both heads at once
        # (`_pair_sums`); the rest is summed once per head.
        own_a = (0.5 * torch.xlogy(a, a) + 0.5 * math.log(2.0) * a).sum(-1)  # [..., layer, head_A]
        own_b = (0.5 * torch.xlogy(b, b) + 0.5 * math.log(2.0) * b).sum(-1)  # [..., layer, head_B]
        pairwise = (own_a[..., :, None] + own_b[..., None, :] - 0.5 * pairwise).clamp_min(0.0)
    pairwise = pairwise * scale[..., None, None]  # [..., layer, head_A, head_B]

    visited = pairwise
    if metric == "reference-code":
        below = torch.ones(heads_a, heads_b, dtype=torch.bool, device=A.device).tril(-1)
        visited = pairwise.masked_fill(~below, math.inf)
    per_layer, flat = visited.flatten(-2).min(-1)  # [..., layer]
    head_pairs = torch.stack([flat // heads_b, flat % heads_b], dim=-1)
    return LayerDistances(per_layer, head_pairs, pairwise)


def _check_patterns(A: Tensor, B: Tensor, metric: Metric) -> torch.dtype:
    """Refuse patterns :func:`layer_distances` cannot compare (shapes, depth, length, heads for the
    reference code's pairs, integer maps) with a line saying why; returns the dtype both are read in."""
    check_metric(metric)
    if A.dim() < 4 or B.dim() != A.dim():
        raise ProbeError(
            f"patterns must be [..., layer, head, query, key] with the same number of "
            f"dimensions; got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    if A.shape[:-3] != B.shape[:-3]:
        raise ProbeError(
            f"A has {A.shape[-4]} layers and B has {B.shape[-4]} (batch "
            f"{tuple(A.shape[:-4])} vs {tuple(B.shape[:-4])}): the layerwise distance "
            f"needs the same examples and models of the same depth"
        )
    if A.shape[-2:] != B.shape[-2:] or A.shape[-1] != A.shape[-2]:
        raise ProbeError(
            f"patterns must be square [query, key] maps of the same length; got "
            f"{tuple(A.shape[-2:])} and {tuple(B.shape[-2:])}"
        )
    if metric == "reference-code" and A.shape[-3] < 2:
        raise ProbeError("metric 'reference-code' visits head pairs head_B < head_A only: it needs at least 2 heads")
    dtype = torch.promote_types(A.dtype, B.dtype)
    if not dtype.is_floating_point:
        raise ProbeError(f"attention patterns must be floating point, got {dtype}")
    return dtype


def _pair_sums(a: Tensor, b: Tensor, metric: Metric, budget: int) -> Tensor:
    """Σ over entries of the pair term, every head pair, block by block: s·log s (s = p + q) for
    the JSD, the whole ½·(KL(M‖P) + KL(M‖Q)) summand for the reference code.

    a: [n, head_A, entry], b: [n, head_B, entry]; returns [n, head_A, head_B]. The JSD path reuses
    two block-sized buffers, so on CPU a block stays in cache through add, log, multiply and sum.
    """
    n, heads_a, entries = a.shape
    heads_b = b.shape[1]
    blocks = _blocks(n, heads_a, heads_b * entries, budget)
    size = max((n1 - n0) * (a1 - a0) for n0, n1, a0, a1 in blocks) * heads_b * entries
    if metric == "jsd":  # entries ≥ the smallest normal number: s > 0, and s·log s is 0 to ~1e-36
        tiny = torch.finfo(a.dtype).tiny
        a, b = a.clamp_min(tiny), b.clamp_min(tiny)
        sums, logs = a.new_empty(size), a.new_empty(size)
    out = a.new_empty(n, heads_a, heads_b)  # [n, head_A, head_B]
    for n0, n1, a0, a1 in blocks:
        p = a[n0:n1, a0:a1, None, :]  # [block, head_A', 1, entry]
        q = b[n0:n1, None, :, :]  # [block, 1, head_B, entry]
        shape = (n1 - n0, a1 - a0, heads_b, entries)
        if metric == "jsd":
            s = torch.add(p, q, out=sums[: math.prod(shape)].view(shape))
            terms = torch.log(s, out=logs[: s.numel()].view(shape)).mul_(s)
        else:
            m = 0.5 * (p + q)
            terms = 0.5 * (kl_terms(m, p) + kl_terms(m, q))
        out[n0:n1, a0:a1] = terms.sum(-1)  # pairwise (cascade) summation: accurate in float32
    return out


def _blocks(n: int, heads_a: int, pair_entries: int, budget: int) -> list[tuple[int, int, int, int]]:
    """(n0, n1, a0, a1) slices of [n, head_A] whose pairs with every head of B hold ≤ budget entries."""
    if heads_a * pair_entries <= budget:
        step = budget // (heads_a * pair_entries)
        return [(n0, min(n0 + step, n), 0, heads_a) for n0 in range(0, n, step)]
    step = max(1, budget // pair_entries)
    return [(i, i + 1, a0, min(a0 + step, heads_a)) for i in range(n) for a0 in range(0, heads_a, step)]
