"""The paper's attention analyses on trained runs: the library calls behind `probe compare`,
`probe distances` and the explorer.

- :func:`compare_runs` / :func:`compare_report`: Section 4.2, Eq. similarity, Figure
  similarity_per_layer. Both models read the same examples (gold input + output), up to
  ``n_per_bucket`` per length bucket; D^(l) is computed per example (its own minimum over head
  pairs) and averaged over the examples of a bucket, with a bootstrap interval; the average over
  layers likewise. NoPE vs NoPE' (another seed) is the baseline.
- :func:`attended_distance_report`: Section 5.1, Figure attended_distance: the normalized
  attended distance of every output query, pooled over layers, heads and examples, one
  histogram per run, arg-max and attention-weighted, with a bimodality coefficient.

Runs of pretrained code models (task "code") read windows of held-out files at 1x and 2x their
training context instead of length buckets (:mod:`probe.analysis.windows`); their results have
the same types, a context size standing for a length bucket. Any model TransformerLens loads from
Hugging Face files (``hf:ID``, ``hf:FOLDER``) is read the same way, with its own tokenizer, alone
or beside code runs (:mod:`probe.analysis.subjects`, which also holds its perplexity). Models of
different depth are compared layer by layer at the same relative depth (``runs.paired_layers``).

Modules, each importing only those listed before it: ``runs`` (which runs, comparable or not),
``results`` (result types, from per-example values), ``layerwise`` (D^(l) batch by batch, timed),
``examples`` (a task's length buckets),
``windows`` (a code corpus's windows, and the analyses on them), ``external`` (``hf:`` models),
``compare``, ``distances``.

Everything is deterministic given ``seed`` (examples, and the bootstrap resamples).
"""

from probe.analysis.compare import compare_report, compare_runs, write_compare_report
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
from probe.analysis.subjects import (
    external_attended_report,
    external_compare_report,
    external_perplexity_report,
    load_subject,
)
from probe.analysis.windows import (
    MULTIPLES,
    ContextWindows,
    attended_windows,
    choose_windows,
    compare_windows,
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
    "Progress",
    "RunInfo",
    "attended_distance_report",
    "attended_windows",
    "check_comparable",
    "check_same_corpus",
    "choose_windows",
    "compare_report",
    "compare_runs",
    "compare_windows",
    "context_sizes",
    "external_attended_report",
    "external_compare_report",
    "external_perplexity_report",
    "is_code_run",
    "load_subject",
    "paired_layers",
    "run_corpus",
    "run_windows",
    "sample_buckets",
    "task_runs",
    "training_context",
    "write_compare_report",
]
