"""What is analysed, and what it reads: a name (PE, run folder, imported run, ``hf:`` model) resolved once
into a :class:`~probe.subjects.subject.Subject` (:mod:`~probe.subjects.resolve`, the one module that asks
which kind it has), and the :class:`~probe.subjects.inputs.Inputs` its reading gives: a task's length
buckets (:mod:`~probe.subjects.examples`), or windows of held-out code at 1x and 2x a model's context
(:mod:`~probe.subjects.windows`), in batches sized by what an analysis may hold at once
(:mod:`~probe.subjects.memory`), as one :class:`~probe.subjects.settings.ReadSettings` says every measure reads
them. :mod:`~probe.subjects.run_info` is what an analysis reports about a run.
"""

from probe.subjects.examples import Bucket, sample_buckets
from probe.subjects.resolve import resolve, resolve_all
from probe.subjects.run_info import (
    Lengths,
    OnBroken,
    Progress,
    RunInfo,
    check_comparable,
    check_same_corpus,
    is_code_run,
    paired_layers,
    task_runs,
    training_context,
)
from probe.subjects.settings import ReadSettings
from probe.subjects.subject import Loaded, Subject
from probe.subjects.windows import (
    MULTIPLES,
    ContextWindows,
    choose_windows,
    context_sizes,
    run_windows,
)

__all__ = [
    "MULTIPLES",
    "Bucket",
    "ContextWindows",
    "Lengths",
    "Loaded",
    "OnBroken",
    "Progress",
    "ReadSettings",
    "RunInfo",
    "Subject",
    "check_comparable",
    "check_same_corpus",
    "choose_windows",
    "context_sizes",
    "is_code_run",
    "paired_layers",
    "resolve",
    "resolve_all",
    "run_windows",
    "sample_buckets",
    "task_runs",
    "training_context",
]
