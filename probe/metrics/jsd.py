"""Jensen–Shannon divergence between attention distributions (Section 5.2, D_JSD)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from probe.errors import ProbeError

Metric = Literal["jsd", "reference-code"]
METRICS: tuple[str, ...] = ("jsd", "reference-code")


def check_metric(metric: str) -> None:
    """One clear line for an unknown metric name."""
    if metric not in METRICS:
        raise ProbeError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")


def kl_terms(x: Tensor, y: Tensor) -> Tensor:
    """Elementwise x·log(x/y) with 0·log(0/y) = 0 (and x·log(x/0) = inf for x > 0)."""
    return torch.where(x > 0, x * torch.log(x / y), 0.0)


def jsd(p: Tensor, q: Tensor, dim: int = -1, metric: Metric = "jsd") -> Tensor:
    """Jensen–Shannon divergence along `dim`, natural log, 0·log 0 = 0, broadcasting p against q.

    metric="jsd" (default) is the definition: ½·KL(P‖M) + ½·KL(Q‖M), M = (P + Q)/2, which lies
    in [0, ln 2] and equals ``scipy.spatial.distance.jensenshannon(p, q) ** 2``.

    metric="reference-code" is what the paper's released code computes under that name
    (McGill-NLP/length-generalization, ``torch_compute_jensen_shannon_divergence``):
    ½·(KL(M‖P) + KL(M‖Q)) — the KL arguments reversed. It is zero only when P = Q, like the
    JSD, but it is unbounded: it is +inf as soon as M puts mass where P or Q has none.
    """
    check_metric(metric)
    m = 0.5 * (p + q)
    if metric == "jsd":
        return 0.5 * (kl_terms(p, m) + kl_terms(q, m)).sum(dim)
    return 0.5 * (kl_terms(m, p) + kl_terms(m, q)).sum(dim)
