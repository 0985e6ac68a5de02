"""Normalized attended distance and its histogram (Section 6.1, Figure attended_distance).

The figure pools every layer, head and output query of the sampled examples into one
histogram per PE (the released notebook keeps the unseen lengths, > 8 with the scratchpad, and of a
scratchpad's target only the answer after it: :data:`Queries`; which examples and queries to pass is the
caller's choice). The notebook takes the arg-max over pre-softmax scores, which is the same key as over the
probabilities.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

from probe.errors import ProbeError

Weighting = Literal["argmax", "attention"]
Normalization = Literal["text", "reference-code"]
Queries = Literal["output", "answer"]
"""Which queries count: "output", every target token (a scratchpad's and its answer's), as the paper's text reads
("for tokens in the output sequence"); "answer", only those after the scratchpad's end marker, as the released
notebook's figure counts them (``query_region == "output"``, the region its tokenization labels after the
scratchpad). Without a scratchpad the two are the same."""


class AttendedDistances(NamedTuple):
    """Flat values for a histogram: one per (example, layer, head, output query[, key])."""

    distance: Tensor  # [value]: normalized distance d̄
    weight: Tensor  # [value]: 1 for the arg-max key, the attention probability for "attention"
    layer: Tensor  # [value]: layer of the head it comes from
    head: Tensor  # [value]


class Histogram(NamedTuple):
    mass: Tensor  # [bin]: fraction of the in-range weight in each bin (sums to 1)
    edges: Tensor  # [bin + 1]


def attended_distances(
    patterns: Tensor,
    output_start: Tensor | int,
    lengths: Tensor | int,
    weighting: Weighting = "argmax",
    normalization: Normalization = "text",
) -> AttendedDistances:
    """d̄ between each output-token query q_t and the key k_n it attends to, over all layers and heads.

    patterns: [example, layer, head, query, key] causal maps (or [layer, head, query, key] for one
    example); output_start: [example] index of each example's first output token; lengths:
    [example] true lengths (positions ≥ length are padding and ignored). Queries are the output
    tokens, output_start ≤ index < length, as in the paper ("for tokens in the output sequence").

    With 1-based query position t and key position n, normalized by the length t of the
    sequence at that step: normalization="text" is the paper's d̄ = (t − n + 1)/t ∈ (0, 1]
    (the query itself gives 1/t, the first token 1); "reference-code" is the released
    notebook's (t − n)/t ∈ [0, 1). weighting="argmax" counts the arg-max key of each query
    (the paper's "attended key"; ties go to the earliest key, like torch's and the released
    code's argmax); "attention" counts every key n ≤ t weighted by its probability. Either
    way each (query, head) carries total weight 1.
    """
    patterns, output_start, lengths = _checked(patterns, output_start, lengths, weighting, normalization)
    _, n_layers, n_heads, n_positions, _ = patterns.shape
    device, dtype = patterns.device, patterns.dtype
    positions = torch.arange(n_positions, device=device)  # [query] (0-based; t = index + 1)
    steps = (positions + 1).to(dtype)  # [query]: length of the sequence at query t
    offset = 1 if normalization == "text" else 0
    queries = (positions >= output_start[:, None]) & (positions < lengths[:, None])  # [example, query]
    if weighting == "argmax":
        key = patterns.argmax(-1)  # [example, layer, head, query]
        distance = (positions - key + offset).to(dtype) / steps
        weight = torch.ones_like(distance)
        keep = queries[:, None, None, :].expand(key.shape)
    else:
        distance = (positions[:, None] - positions + offset).to(dtype) / steps[:, None]  # [query, key]
        distance, weight = distance.expand(patterns.shape), patterns
        causal = positions <= positions[:, None]  # [query, key]
        keep = (queries[:, None, None, :, None] & causal).expand(patterns.shape)
    trailing = [1] * (keep.dim() - 3)
    layer = torch.arange(n_layers, device=device).view(1, -1, 1, *trailing).expand(keep.shape)
    head = torch.arange(n_heads, device=device).view(1, 1, -1, *trailing).expand(keep.shape)
    return AttendedDistances(distance[keep], weight[keep], layer[keep], head[keep])


def _checked(
    patterns: Tensor, output_start: Tensor | int, lengths: Tensor | int, weighting: str, normalization: str
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`attended_distances`' inputs checked, with a line saying what was wrong: patterns as
    [example, layer, head, query, key], output starts and lengths as one value per example."""
    if patterns.dim() == 4:
        patterns = patterns[None]
    if patterns.dim() != 5 or patterns.shape[-1] != patterns.shape[-2]:
        raise ProbeError(
            f"patterns must be [example, layer, head, query, key] with square maps; got {tuple(patterns.shape)}"
        )
    if weighting not in ("argmax", "attention"):
        raise ProbeError(f"unknown weighting {weighting!r}; accepted: argmax, attention")
    if normalization not in ("text", "reference-code"):
        raise ProbeError(f"unknown normalization {normalization!r}; accepted: text, reference-code")
    n_examples, n_positions = patterns.shape[0], patterns.shape[-1]
    output_start = torch.as_tensor(output_start, device=patterns.device).reshape(-1)
    lengths = torch.as_tensor(lengths, device=patterns.device).reshape(-1)
    if output_start.shape != (n_examples,) or lengths.shape != (n_examples,):
        raise ProbeError(
            f"output_start and lengths need one value per example ({n_examples}); got "
            f"{tuple(output_start.shape)} and {tuple(lengths.shape)}"
        )
    if (lengths > n_positions).any() or (output_start < 0).any():
        raise ProbeError(f"need 0 ≤ output_start and lengths ≤ {n_positions} (the padded length)")
    return patterns, output_start, lengths


def histogram(
    values: Tensor, weights: Tensor | None = None, bins: int = 20, range: tuple[float, float] = (0.0, 1.0)
) -> Histogram:
    """Weighted histogram on any device: bins [e_i, e_i+1), the last one closed (numpy's rule);
    values outside `range` are dropped; `mass` is normalized to sum to 1."""
    weights = torch.ones_like(values) if weights is None else weights.to(values.dtype)
    # lo + (hi - lo) * i / bins rounds each edge once (linspace's can land just past k/bins, which
    # would drop a distance of exactly k/bins into the bin below).
    steps = torch.arange(bins + 1, device=values.device, dtype=values.dtype)
    edges = range[0] + (range[1] - range[0]) * steps / bins
    index = (torch.bucketize(values, edges, right=True) - 1).clamp_max(bins - 1)  # value == hi: last bin
    inside = (values >= range[0]) & (values <= range[1])
    mass = torch.zeros(bins, device=values.device, dtype=values.dtype)
    mass.index_add_(0, index[inside], weights[inside])
    return Histogram(mass / mass.sum(), edges)


def bimodality_coefficient(values: Tensor, weights: Tensor | None = None) -> Tensor:
    """Sarle's bimodality coefficient b = (γ² + 1)/β of the (weighted) distribution of `values`.

    γ is the skewness and β the (non-excess) kurtosis, from weighted population moments. Why
    this one: it needs no bins and no threshold on "near" or "far", takes the attention
    weights as they are, and has fixed reference points: 5/9 for a uniform distribution
    (APE / Rotary-like spreading), 1 for mass split between two points, so b > 5/9 reads as
    bimodal (NoPE / T5-like "near and far"). Limits: b is 1 for any two-point split however
    uneven, and strongly skewed one-sided distributions (ALiBi-like) can also exceed 5/9; read
    it beside the histogram. Sarle's finite-sample correction is left out (thousands of values,
    and it is undefined for attention weights). NaN when all values are equal.
    """
    values = values.double()
    weights = torch.ones_like(values) if weights is None else weights.double()
    weights = weights / weights.sum()
    centred = values - (weights * values).sum()
    m2, m3, m4 = ((weights * centred**k).sum() for k in (2, 3, 4))
    return (m3**2 + m2**3) / (m2 * m4)
