"""The paper's analyses, each written once against one subject type (:mod:`probe.subjects`): the library
calls behind `probe eval`, `probe compare`, `probe distances`, `probe positions`, `probe perplexity` and the
explorer.

- :func:`compare_report` / :func:`compare_runs`: Section 5.2, Eq. similarity, Figure similarity_per_layer.
  Both models read the same inputs; D^(l) is computed per input (its own minimum over head pairs) and
  averaged over a bucket, with a bootstrap interval; the average over layers likewise. NoPE vs NoPE'
  (another seed) is the baseline. Models of different depth are compared at the same relative depth.
- :func:`attended_distance_report`: Section 6.1, Figure attended_distance: the normalized attended distance
  of every output query, pooled over layers, heads and inputs, arg-max and attention-weighted, with a
  bimodality coefficient.
- :func:`~probe.analysis.positions.positions_report`, :func:`~probe.analysis.perplexity.perplexity_report`,
  :func:`~probe.analysis.evaluation.evaluate_run` (Section 3's exact match, :mod:`~probe.analysis.eval_report`).

Each reads its inputs as one :class:`~probe.subjects.settings.ReadSettings` says, beside knobs of its own.
Every report is a :class:`~probe.analysis.report.Report` (``.name``, ``.to_json()``, ``.to_rows()``,
``.write(folder)``), with methods that answer the next question (``.curves()``, ``.series()``). Everything is
deterministic given the settings' ``seed`` (inputs, and the bootstrap resamples).
"""

from probe.analysis.compare import compare_report, compare_runs
from probe.analysis.distances import attended_distance_report
from probe.analysis.report import Report
from probe.analysis.results import (
    CONFIDENCE,
    N_RESAMPLES,
    AttendedReport,
    AttendedResult,
    AttendedStats,
    CompareReport,
    CompareResult,
    DistanceStats,
)

__all__ = [
    "CONFIDENCE",
    "N_RESAMPLES",
    "AttendedReport",
    "AttendedResult",
    "AttendedStats",
    "CompareReport",
    "CompareResult",
    "DistanceStats",
    "Report",
    "attended_distance_report",
    "compare_report",
    "compare_runs",
]
