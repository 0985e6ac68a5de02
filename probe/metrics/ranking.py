"""Mean rank of methods across scenarios (Section 3, Figures teaser and mrr-per-category).

The paper ranks the positional encodings "for all tasks and scenarios" and averages, after
HELM. A scenario is a column of scores: in the released notebook, one (task, split, seed,
scratchpad format) with its overall test accuracy.
"""

from __future__ import annotations

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.metrics.bootstrap import BootstrapCI, bootstrap_ci


def average_ranks(scores: Tensor, higher_is_better: bool = True) -> Tensor:
    """Rank of each method within each scenario, 1 = best, tied methods sharing the mean of their ranks.

    scores: [..., method] → ranks [..., method] (float).
    """
    if torch.isnan(scores).any():
        raise ProbeError("scores contain NaN: every method needs a score in every scenario")
    s = scores if higher_is_better else -scores
    beaten_by = (s[..., None, :] > s[..., :, None]).sum(-1)  # [..., method]: methods strictly better
    tied = (s[..., None, :] == s[..., :, None]).sum(-1)  # [..., method]: itself included
    return beaten_by + (tied + 1) / 2


def mean_rank(scores: Tensor, higher_is_better: bool = True) -> Tensor:
    """Mean over scenarios of each method's average rank (lower is better).

    scores: [scenario, method] (any number of leading scenario dimensions) → [method].
    """
    ranks = average_ranks(scores, higher_is_better)
    return ranks.reshape(-1, ranks.shape[-1]).mean(0)


def reciprocal_ranks_reference_code(scores: Tensor, higher_is_better: bool = True) -> Tensor:
    """1/rank of each method within each scenario as the released notebook ranks
    (`compute_mean_reciprocal_rank`): ties broken by method order (pandas' method="first").

    scores: [..., method] → [..., method] (1 = first).
    """
    if torch.isnan(scores).any():
        raise ProbeError("scores contain NaN: every method needs a score in every scenario")
    s = scores if higher_is_better else -scores
    order = torch.arange(s.shape[-1], device=s.device)
    ahead = (s[..., None, :] > s[..., :, None]) | (
        (s[..., None, :] == s[..., :, None]) & (order < order[:, None])
    )  # [..., method, other]
    return 1.0 / (ahead.sum(-1) + 1).to(torch.float64)  # 1/3 as float64 writes it, not float32's 0.33333334


def reciprocal_ranks_shared(scores: Tensor, higher_is_better: bool = True) -> Tensor:
    """1/rank of each method within each scenario, tied methods sharing the mean of the reciprocal ranks of
    the places they span: each one's expected 1/rank when the tie is broken uniformly at random. Where
    most scores tie (formats that all stay at 0% on unseen lengths), this keeps the tie from ranking
    them by their order in a table, as pandas' method="first" would.

    scores: [..., method] → [..., method] (1 = first, alone).
    """
    if torch.isnan(scores).any():
        raise ProbeError("scores contain NaN: every method needs a score in every scenario")
    s = scores if higher_is_better else -scores
    beaten_by = (s[..., None, :] > s[..., :, None]).sum(-1)  # [..., method]: methods strictly better
    tied = (s[..., None, :] == s[..., :, None]).sum(-1)  # [..., method]: itself included
    places = torch.arange(1, s.shape[-1] + 1, dtype=torch.float64, device=s.device)
    harmonic = torch.cat([places.new_zeros(1), (1.0 / places).cumsum(0)])  # [method + 1]: H(0..n)
    return (harmonic[beaten_by + tied] - harmonic[beaten_by]) / tied  # mean of 1/r over the places spanned


def mean_reciprocal_rank_reference_code(scores: Tensor, higher_is_better: bool = True) -> Tensor:
    """What the released notebook plots under the label "Mean Rank": the mean over scenarios of
    :func:`reciprocal_ranks_reference_code`, so higher is better. scores: [scenario, method] → [method].
    """
    reciprocal = reciprocal_ranks_reference_code(scores, higher_is_better)  # [..., method]
    return reciprocal.reshape(-1, scores.shape[-1]).mean(0)


def mean_reciprocal_rank_over_seeds(
    scores: Tensor, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0, ties: str = "first"
) -> BootstrapCI:
    """The mean reciprocal rank with a percentile bootstrap interval over seeds: each resample draws
    as many seeds as there are, with replacement, and ranks every scenario of each drawn seed. With
    every seed holding every scenario, that is the bootstrap of the per-seed mean over scenarios.
    ``ties``: "first" breaks them by method order (:func:`reciprocal_ranks_reference_code`), "shared"
    splits them (:func:`reciprocal_ranks_shared`).

    scores: [seed, scenario, method] → mean, low, high: [method].
    """
    rank = {"first": reciprocal_ranks_reference_code, "shared": reciprocal_ranks_shared}
    if ties not in rank:
        raise ProbeError(f"unknown tie rule {ties!r}; choose one of {', '.join(rank)}")
    per_seed = rank[ties](scores).mean(1)  # [seed, method]
    return bootstrap_ci(per_seed, n_resamples=n_resamples, confidence=confidence, seed=seed)
