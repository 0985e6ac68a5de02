"""Percentile bootstrap confidence interval for a mean over examples."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from probe.errors import ProbeError


class BootstrapCI(NamedTuple):
    mean: Tensor  # [...]
    low: Tensor  # [...]
    high: Tensor  # [...]


def bootstrap_ci(values: Tensor, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> BootstrapCI:
    """Mean over examples (dim 0) and its percentile bootstrap interval, for every other entry at once.

    values: [example, ...]. Each resample draws len(values) examples with replacement; the
    draws come from a CPU generator seeded with `seed`, so the same seed gives the same
    interval on any device. Resampled means are one matrix product: counts [resample,
    example] @ values [example, rest].

    Over as few examples as a study's seeds, the interval is their range: with n ≤ 3, one value
    drawn n times has probability n^-n ≥ 1/27, more than a 95% interval's 2.5% tail, so the
    interval runs from the lowest value to the highest (in all but a sliver of resample draws).
    Two intervals apart then say one's lowest seed is above the other's highest, not a 95%
    confidence about their means.
    """
    if values.shape[0] < 1:
        raise ProbeError("bootstrap needs at least one example")
    if not 0 < confidence < 1:
        raise ProbeError(f"confidence must lie in (0, 1), got {confidence}")
    values = values if values.dtype.is_floating_point else values.double()
    n = values.shape[0]
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(n, (n_resamples, n), generator=generator)  # [resample, draw]
    counts = torch.zeros(n_resamples, n).scatter_add_(1, draws, torch.ones(n_resamples, n))
    counts = counts.to(device=values.device, dtype=values.dtype)  # [resample, example]
    means = (counts @ values.reshape(n, -1)) / n  # [resample, rest]
    tail = (1 - confidence) / 2
    q = torch.tensor([tail, 1 - tail], device=values.device, dtype=values.dtype)
    low, high = torch.quantile(means, q, dim=0).reshape(2, *values.shape[1:])
    return BootstrapCI(values.mean(0), low, high)
