"""`probe distances`: the normalized attended distance d̄ of output queries, pooled over layers, heads and
inputs into one histogram per subject (Section 6.1, Figure attended_distance).

Written once for every subject (:mod:`probe.subjects.resolve`): a task run's output queries over its length
buckets give one result; a code model's windows give one result per context size (``<model> @1x``, ``@2x``),
every query of a window counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.analysis.patterns import read_layers
from probe.analysis.results import AttendedReport, AttendedResult, attended_stats, query_key_weights
from probe.atomic import atomic_write_json
from probe.errors import ProbeError
from probe.metrics.attended import Normalization, Queries, Weighting
from probe.runs.folders import Run
from probe.subjects.inputs import Inputs, TokenBatch
from probe.subjects.memory import WORKING_BYTES, keep_freed_memory, memory_budget
from probe.subjects.resolve import file_stem, home, readings, relabelled, resolve_all, task_folder
from probe.subjects.run_info import Progress, within
from probe.subjects.settings import ReadSettings
from probe.subjects.subject import Loaded

BATCH_SIZE = 16  # inputs per batch unless the settings say
ATTENDED = "attended.json"
"""A study run's attended distances at the paper's settings, written beside its eval.json as its scenario lands,
so that the study's summary carries Figure attended_distance after the checkpoint is gone."""


def attended_results(
    loaded: Loaded,
    inputs: Inputs,
    *,
    weightings: Sequence[str],
    normalization: str,
    bins: int,
    device: torch.device,
    batch_size: int,
    queries: Queries = "output",
    progress: Progress | None = None,
) -> list[AttendedResult]:
    """One result per group of ``inputs``: the d̄ of every query ``queries`` names (every output token, or a
    scratchpad's answer alone: :data:`~probe.metrics.attended.Queries`) per weighting, pooled over layers, heads
    and inputs into a (query, key) grid as each layer's maps are made (one layer alive at a time), then a
    histogram and Sarle's bimodality coefficient."""
    model, results = loaded.model, []
    budget = memory_budget()
    for group in inputs.groups:
        grids = {w: torch.zeros(group.width, group.width, dtype=torch.float64, device=device) for w in weightings}
        per_cell = model.cfg.n_heads * WORKING_BYTES  # one layer's maps at a time
        cells_per_query = model.cfg.n_layers * model.cfg.n_heads
        done = 0
        for batch in group.token_batches(per_cell, batch_size, budget):
            if progress:
                progress(f"{group.label or ''} inputs {done + 1}-{done + len(batch.tokens)}", done, len(group.sizes()))
            read_layers(model, batch.tokens.to(device), _into(grids, batch, device, queries))
            done += len(batch.tokens)
        stats = {w: attended_stats(grid, w, normalization, bins) for w, grid in grids.items()}
        results.append(
            AttendedResult(
                relabelled(loaded.info, group.label),
                inputs.task,
                inputs.task_options,
                sum(b.count for b in group.buckets),
                (group.answer_queries if queries == "answer" else group.queries) * cells_per_query,
                inputs.skipped if not results else 0,
                [b.length for b in group.buckets],
                stats,
            )
        )
    return results


def _into(
    grids: dict[str, Tensor], batch: TokenBatch, device: torch.device, queries: Queries
) -> Callable[[int, Tensor], None]:
    """What each layer's maps of ``batch`` add to the (query, key) grid of every weighting, its ``queries`` rows
    counted."""
    n, width = batch.tokens.shape
    starts = batch.answer_start if queries == "answer" and batch.answer_start is not None else batch.output_start
    starts = torch.zeros(n, dtype=torch.long) if starts is None else starts
    ends = torch.full((n,), width) if batch.lengths is None else batch.lengths
    starts, ends = starts.to(device), ends.to(device)

    def fold(layer: int, maps: Tensor) -> None:  # [batch, head, query, key]
        for w, grid in grids.items():
            grid[:width, :width] += query_key_weights(maps[:, None], starts, ends, w)

    return fold


def _weightings(
    weighting: Weighting | Sequence[Weighting], normalization: str, bins: int, queries: str
) -> list[Weighting]:
    """The weightings asked for, as a list; a bad weighting, normalization, bin count or choice of queries stops
    the report before any model is loaded."""
    weightings = [weighting] if isinstance(weighting, str) else list(weighting)
    for w in weightings:
        if w not in ("argmax", "attention"):
            raise ProbeError(f"unknown weighting {w!r}; accepted: argmax, attention")
    if normalization not in ("text", "reference-code"):
        raise ProbeError(f"unknown normalization {normalization!r}; accepted: text, reference-code")
    if bins < 1:
        raise ProbeError(f"--bins must be at least 1, got {bins}")
    if queries not in ("output", "answer"):
        raise ProbeError(f"unknown queries {queries!r}; accepted: output, answer")
    return weightings


def attended_distance_report(
    runs: Sequence[str | Path | Run],
    settings: ReadSettings | None = None,
    *,
    weighting: Weighting | Sequence[Weighting] = ("argmax", "attention"),
    normalization: Normalization = "text",
    bins: int = 20,
    queries: Queries = "output",
    root: str | Path = "checkpoints",
) -> AttendedReport:
    """Normalized attended distance d̄ of every output query over all layers and heads (Section 6.1); with
    ``queries="answer"``, of a scratchpad's answer alone, as the released notebook's figure counts them
    (:data:`~probe.metrics.attended.Queries`).

    Per task run: up to ``settings.n_per_bucket`` examples per length bucket (``settings.lengths`` default
    "unseen", as the released notebook; "all" or "seen" too), gold input + output; d̄ pooled into one
    distribution per weighting ("argmax": the attended key, as the paper; "attention": every key weighted by its
    probability), with its histogram and Sarle's bimodality coefficient. Inputs longer than a model reads are left
    out and counted in ``skipped``. A code model (a code run, an imported run, an ``hf:`` model, whose
    ``settings.options`` name the corpus) gives one result per context size (``settings.multiples`` of its
    training context, default 1x and 2x; ``lengths`` default "all"; seen: 1x, unseen: 2x), every query of a
    window counted. ``settings`` (:class:`~probe.subjects.settings.ReadSettings`; ``batch_size`` default 16):
    ``dtype`` (``bfloat16``), the models' weights and forward passes in that precision; ``intervention``, every
    model read under it; ``pe_options`` are not read here.
    """
    settings = ReadSettings() if settings is None else settings
    settings.refuse("probe distances", "pe_options")
    keep_freed_memory()
    weightings = _weightings(weighting, normalization, bins, queries)
    subjects = resolve_all(list(runs), intervention=settings.intervention)
    batch_size = settings.batch_size or BATCH_SIZE
    read = dict(weightings=weightings, normalization=normalization, bins=bins, device=settings.device, queries=queries)
    results, chosen = [], []
    for done, (subject, reading) in enumerate(zip(subjects, readings(subjects, settings.options))):
        loaded = subject.load(settings.device, dtype=settings.dtype)
        chosen.append(settings.lengths or reading.default_lengths)
        inputs = settings.inputs(reading, loaded, [loaded], chosen[-1])
        step = within(settings.progress, loaded.info.label, done, len(subjects))
        results += attended_results(loaded, inputs, **read, batch_size=batch_size, progress=step)
        del loaded
    return AttendedReport(
        results,
        normalization,
        ", ".join(dict.fromkeys(chosen)) or settings.lengths or "unseen",
        settings.n_per_bucket,
        settings.seed,
        bins,
        task_folder(subjects, root, settings.options),
        home(subjects, root, settings.options),
        file_stem(subjects),
        queries,
    )


def attend_run(path: str | Path, settings: ReadSettings) -> dict[str, Any]:
    """The attended distances of one run folder as `probe distances` reads them by default (unseen lengths,
    arg-max and attention-weighted, d̄ as the text writes it, 20 bins), written to :data:`ATTENDED` there."""
    data = attended_distance_report([path], settings).to_json()
    atomic_write_json(Path(path) / ATTENDED, data)
    return data


def read_attended(path: str | Path) -> dict[str, Any] | None:
    """The run's :data:`ATTENDED` (an :meth:`AttendedReport.to_json` of the run alone), or None where it has none."""
    file = Path(path) / ATTENDED
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text())
    except ValueError:
        raise ProbeError(f"{file}: not readable JSON; delete it to read the run's attended distances again") from None
