"""The paper's analyses, each written once against one subject type: the library calls behind `probe eval`,
`probe compare`, `probe distances`, `probe positions`, `probe perplexity` and the explorer.

- :mod:`~probe.analysis.subjects`: a name (PE, run folder, imported run, ``hf:`` model) resolved once into a
  :class:`~probe.analysis.subjects.Subject`, and what subjects read (:class:`~probe.analysis.inputs.Inputs`):
  a task's length buckets, or windows of held-out code at 1x and 2x a model's context.
- :func:`compare_report` / :func:`compare_runs`: Section 4.2, Eq. similarity, Figure similarity_per_layer.
  Both models read the same inputs; D^(l) is computed per input (its own minimum over head pairs) and
  averaged over a bucket, with a bootstrap interval; the average over layers likewise. NoPE vs NoPE'
  (another seed) is the baseline. Models of different depth are compared at the same relative depth.
- :func:`attended_distance_report`: Section 5.1, Figure attended_distance: the normalized attended distance
  of every output query, pooled over layers, heads and inputs, arg-max and attention-weighted, with a
  bimodality coefficient.
- :func:`~probe.analysis.positions.positions_report`, :func:`~probe.analysis.perplexity.perplexity_report`,
  :func:`~probe.analysis.evaluation.evaluate_run` (Section 3's exact match, :mod:`~probe.analysis.eval_report`).

Results are objects whose methods answer the next question (``.to_json()``, ``.to_rows()``, ``.curves()``).
Everything is deterministic given ``seed`` (inputs, and the bootstrap resamples).
"""

from probe.analysis.compare import compare_report, compare_runs
from probe.analysis.distances import attended_distance_report
from probe.analysis.examples import Bucket, sample_buckets
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
from probe.analysis.run_info import (
    Lengths,
    Progress,
    RunInfo,
    check_comparable,
    check_same_corpus,
    is_code_run,
    paired_layers,
    task_runs,
    training_context,
)
from probe.analysis.subjects import Loaded, Subject, resolve, resolve_all
from probe.analysis.windows import (
    MULTIPLES,
    ContextWindows,
    choose_windows,
    context_sizes,
    run_windows,
)
from probe.corpus.prepared import run_corpus

__all__ = [
    "CONFIDENCE",
    "MULTIPLES",
    "N_RESAMPLES",
    "AttendedReport",
    "AttendedResult",
    "AttendedStats",
    "Bucket",
    "CompareReport",
    "CompareResult",
    "ContextWindows",
    "DistanceStats",
    "Lengths",
    "Loaded",
    "Progress",
    "RunInfo",
    "Subject",
    "attended_distance_report",
    "check_comparable",
    "check_same_corpus",
    "choose_windows",
    "compare_report",
    "compare_runs",
    "context_sizes",
    "is_code_run",
    "paired_layers",
    "resolve",
    "resolve_all",
    "run_corpus",
    "run_windows",
    "sample_buckets",
    "task_runs",
    "training_context",
]
