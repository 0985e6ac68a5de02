"""Sweeps: many ``probe train`` + ``probe eval`` runs from one grid, executed as Ray tasks.

A grid (a TOML file, a named grid shipped in ``probe/studies/grids/``, or command-line flags) expands to
:class:`SweepRun` s. Each run is one Ray task that calls :func:`probe.training.bookkeeping.train_run` and then
:func:`probe.analysis.evaluation.evaluate_run`, exactly what ``probe train`` and ``probe eval`` call, into
the same run folder (``probe.runs.folders.run_dir``), so a sweep never trains differently from
``probe train`` and a rerun skips finished runs and resumes interrupted ones. A manifest (JSON)
records each run's state, attempts, timings, node and error as it happens.

Grid format (TOML). Top-level keys are defaults for every ``[[block]]``; a grid without blocks is
one block; each block needs a ``task`` (its own or the top level's). ``task``, ``pe``, ``seed``,
``scratchpad`` and every value of ``options`` may be lists: a block is the cross product of its lists.
A ``pe`` may name a set of PEs (``paper``: the paper's five; ``pretrain``: its three code models;
:data:`probe.studies.plans.PE_SETS`). Scratchpad formats other than ``none`` apply only to tasks that
have a scratchpad. ``model`` holds model overrides (``n_layers = 1``); the other keys
are :class:`probe.training.train_config.TrainConfig` fields (``preset``, ``steps``, ``lr`` ...) plus ``eval_n``
(test examples evaluated, default the whole test split), ``eval_valid`` (IID examples), ``eval_last``
(false: a selected run is not scored again at its last step) and ``attended`` (true: `probe reproduce` reads
a run's attended distances as its scenario lands and keeps them in the scenario's summary).
Task ``code`` is pretraining on a code corpus (``probe pretrain``; its options are
:class:`probe.corpus.CorpusSpec`'s): its corpus is prepared once before any run starts, and its
runs are validated by held-out perplexity (``probe perplexity`` reads them side by side)::

    name = "mine"
    preset = "tiny"
    pe = ["nope", "t5"]
    seed = [0, 1]

    [[block]]
    task = "copy"
    options = { variant = ["count", "random"] }

    [[block]]
    task = "addition"
    scratchpad = ["none", "full"]
"""

from probe.studies.sweep.cluster import EventLog, check_resources, connect, execute, prepare_corpora, run_one, run_stack
from probe.studies.sweep.console import Launch, dry_run, run_with_progress, show_outcome, show_report
from probe.studies.sweep.cost import (
    EvaluationWork,
    duration,
    estimate_cost,
    evaluation_work,
    mean_batch_tokens,
    measure_decoding_step,
    measure_selection_tokens_per_second,
    measure_tokens_per_second,
    queued_wall_seconds,
    run_state,
    selection_tokens,
    selections_left,
    steps_left,
    wall_seconds,
    why_blocked,
)
from probe.studies.sweep.grid import (
    EVAL_KEYS,
    GRID_DIR,
    LIST_KEYS,
    SweepRun,
    expand_grid,
    grid_from_flags,
    load_grid,
    named_grids,
    pick_runs,
    train_keys,
    with_overrides,
)
from probe.studies.sweep.manifest import STATES, Manifest, find_manifests, manifest_path, read_manifest
from probe.studies.sweep.report import aggregate, manifest_report, report, report_figure_objects, report_figures

__all__ = [
    "EVAL_KEYS",
    "GRID_DIR",
    "LIST_KEYS",
    "STATES",
    "EventLog",
    "Launch",
    "Manifest",
    "SweepRun",
    "aggregate",
    "check_resources",
    "connect",
    "dry_run",
    "duration",
    "estimate_cost",
    "EvaluationWork",
    "evaluation_work",
    "measure_decoding_step",
    "execute",
    "expand_grid",
    "find_manifests",
    "grid_from_flags",
    "load_grid",
    "manifest_path",
    "manifest_report",
    "mean_batch_tokens",
    "measure_selection_tokens_per_second",
    "measure_tokens_per_second",
    "named_grids",
    "pick_runs",
    "prepare_corpora",
    "queued_wall_seconds",
    "read_manifest",
    "report",
    "report_figure_objects",
    "report_figures",
    "run_stack",
    "run_one",
    "run_state",
    "run_with_progress",
    "selection_tokens",
    "selections_left",
    "show_outcome",
    "show_report",
    "steps_left",
    "train_keys",
    "wall_seconds",
    "why_blocked",
    "with_overrides",
]
