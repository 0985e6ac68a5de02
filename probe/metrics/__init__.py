"""The paper's measurements as pure tensor functions: batched, vectorised, CPU or GPU, float32 or float64.

Each implements the paper's definition; the released code's variants are named options
(``metric="reference-code"``, ``normalization="reference-code"``, ``*_reference_code``).
"""

from probe.metrics.attended import AttendedDistances, Histogram, attended_distances, bimodality_coefficient, histogram
from probe.metrics.bootstrap import BootstrapCI, bootstrap_ci
from probe.metrics.jsd import METRICS, Metric, jsd
from probe.metrics.ranking import (
    average_ranks,
    mean_rank,
    mean_reciprocal_rank_over_seeds,
    mean_reciprocal_rank_reference_code,
    reciprocal_ranks_reference_code,
    reciprocal_ranks_shared,
)
from probe.metrics.similarity import LayerDistances, head_distance, layer_distances

__all__ = [
    "AttendedDistances",
    "BootstrapCI",
    "Histogram",
    "LayerDistances",
    "METRICS",
    "Metric",
    "attended_distances",
    "average_ranks",
    "bimodality_coefficient",
    "bootstrap_ci",
    "head_distance",
    "histogram",
    "jsd",
    "layer_distances",
    "mean_rank",
    "mean_reciprocal_rank_over_seeds",
    "mean_reciprocal_rank_reference_code",
    "reciprocal_ranks_reference_code",
    "reciprocal_ranks_shared",
]
