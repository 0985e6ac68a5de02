"""`probe compare`: D^(l)(A, B) per layer and length bucket (Section 5.2, Eq. similarity), on the same inputs for
both models, with A vs A' (another seed of A; NoPE vs NoPE') as the baseline.

Written once for every subject (:mod:`probe.subjects.resolve`): a task run's length buckets, a code model's
windows at 1x and 2x its context (a context size standing for a length bucket), models of different depth
compared layer by layer at the same relative depth (:func:`probe.subjects.run_info.paired_layers`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from probe.analysis.layerwise import group_distances
from probe.analysis.results import CompareReport, CompareResult, distance_stats
from probe.metrics import Metric
from probe.metrics.jsd import check_metric
from probe.presets import main_task
from probe.runs.folders import Run
from probe.subjects.inputs import Inputs
from probe.subjects.memory import keep_freed_memory, memory_budget
from probe.subjects.readings import Reading
from probe.subjects.resolve import (
    baseline_label,
    check_together,
    file_stem,
    home,
    others_than,
    reading_of,
    resolve,
    resolve_all,
    subjects_task,
    task_folder,
)
from probe.subjects.run_info import OnBroken, Progress, RunInfo, paired_layers, within
from probe.subjects.settings import ReadSettings
from probe.subjects.subject import Loaded, Subject

BATCH_SIZE = 16  # inputs per batch unless the settings say


def compare_loaded(
    a: Loaded,
    b: Loaded,
    inputs: Inputs,
    *,
    n_per_bucket: int,
    metric: str,
    seed: int,
    device: torch.device,
    batch_size: int,
    timings: dict[str, float],
    progress: Progress | None = None,
) -> CompareResult:
    """D^(l)(A, B) on ``inputs`` (Eq. similarity): per input, the minimum over head pairs of the mean JSD of
    their attention rows, layer l of A against the layer of B at its relative depth; per bucket and overall,
    the mean with a bootstrap interval. Distances in float64; maps read a block of layers at a time within
    :func:`probe.subjects.memory.memory_budget` (:mod:`probe.analysis.layerwise`)."""
    layers_b = paired_layers(a.model.cfg.n_layers, b.model.cfg.n_layers)
    budget = memory_budget()
    parts = [
        group_distances(a.model, b.model, group, layers_b, metric, device, batch_size, budget, timings, progress)
        for group in inputs.groups
    ]
    start = time.perf_counter()
    stats = []
    for group, (values, pairwise) in zip(inputs.groups, parts):
        offset = 0
        for bucket in group.buckets:
            part = slice(offset, offset + bucket.count)
            stats.append(
                distance_stats(values[part], pairwise[part], metric, seed, bucket.length, bucket.seen, bucket.split)
            )
            offset = part.stop
    values, pairwise = torch.cat([v for v, _ in parts]), torch.cat([p for _, p in parts])
    overall = distance_stats(values, pairwise, metric, seed)
    timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - start
    return CompareResult(
        a.info,
        b.info,
        inputs.task,
        inputs.task_options,
        metric,
        seed,
        n_per_bucket,
        stats,
        overall,
        values,
        [length for group in inputs.groups for length in group.input_lengths()],
        inputs.skipped,
        timings=timings,
        layers_b=layers_b,
    )


def _compare_with(
    a: Loaded,
    b_subject: Subject,
    reading: Reading,
    settings: ReadSettings,
    metric: str,
    timings: dict[str, float],
    label: str | None = None,
    progress: Progress | None = None,
) -> CompareResult:
    """Load B, check it reads A's tokens, cut A's inputs to what both read, and compare."""
    start = time.perf_counter()
    b = b_subject.load(settings.device, settings.pe_options, label, settings.dtype)
    timings["load"] = timings.get("load", 0.0) + time.perf_counter() - start
    reading.check_pair(a, b)
    inputs = settings.inputs(reading, a, [a, b], settings.lengths or "all")
    return compare_loaded(
        a,
        b,
        inputs,
        n_per_bucket=settings.n_per_bucket,
        metric=metric,
        seed=settings.seed,
        device=settings.device,
        batch_size=settings.batch_size or BATCH_SIZE,
        timings=timings,
        progress=progress,
    )


def compare_runs(
    run_a: str | Path | Run,
    run_b: str | Path | Run,
    settings: ReadSettings | None = None,
    *,
    metric: Metric = "jsd",
    baseline: str | Path | Run | None = None,
) -> CompareResult:
    """D^(l)(A, B) per length bucket and layer (Eq. similarity), on the same inputs for both.

    ``run_a``, ``run_b``: run folders (or ``hf:`` models, reading the corpus ``settings.options`` name). With
    ``baseline`` (another run of A's kind, e.g. NoPE seed 1) ``result.baseline`` holds D^(l)(A, baseline) on the
    same inputs. Runs of different tasks or vocabularies raise ProbeError; of different depth, each layer of A is
    compared with the layer of B at the same relative depth (``result.layers_b``). ``metric="reference-code"``:
    see ``probe.metrics.layer_distances``. ``settings`` (:class:`~probe.subjects.settings.ReadSettings`): code
    runs read one bucket per context size, ``multiples`` of the training context (default 1x, 2x); ``lengths``
    default "all", ``batch_size`` 16; ``pe_options`` (RoPE ``scaling``, ``factor`` ...) apply at inference to the
    runs whose PE has them; ``dtype`` (``bfloat16``): the models' weights and forward passes in that precision
    (distances are float64 whatever it is); ``intervention``: every model read under it.
    """
    settings = ReadSettings() if settings is None else settings
    keep_freed_memory()
    check_metric(metric)
    names = [r for r in (run_a, run_b, baseline) if r is not None]
    subjects = resolve_all(names, intervention=settings.intervention)
    check_together(subjects[0], subjects[1:])
    timings: dict[str, float] = {}
    reading = reading_of(subjects, settings.options)
    start = time.perf_counter()
    a = subjects[0].load(settings.device, settings.pe_options, dtype=settings.dtype)
    timings["load"] = time.perf_counter() - start
    total = len(subjects) - 1
    step = within(settings.progress, f"{a.info.label} vs {subjects[1].info.label}", 0, total)
    result = _compare_with(a, subjects[1], reading, settings, metric, timings, progress=step)
    if baseline is not None:
        label = f"{a.info.label}'"
        step = within(settings.progress, f"{a.info.label} vs {label} (baseline)", 1, total)
        result.baseline = _compare_with(a, subjects[2], reading, settings, metric, timings, label, step)
    return result


def compare_report(
    pe_a: str,
    pe_b_list: Sequence[str] = (),
    settings: ReadSettings | None = None,
    *,
    root: str | Path = "checkpoints",
    task: str | None = None,
    metric: Metric = "jsd",
    baseline: bool = True,
    on_broken: OnBroken | None = None,
) -> CompareReport:
    """``probe compare A [B ...]``: A and each B are PE names (runs of ``task`` and ``settings.seed`` under
    ``root``; no ``task``: the main job's, its options under ``settings.options``, as the command reads them),
    run folders or ``hf:`` models (then the task is code and ``settings.options`` name the corpus); no B
    compares A with every other PE found. With ``baseline``, adds A vs A' (another seed of A's run, NoPE' for
    NoPE) when one exists. Everything is checked (subjects exist, read the same inputs) before any model is
    loaded. ``settings``: see :func:`compare_runs`; its ``progress`` hears every comparison; ``on_broken``, each
    run left out of "every other PE" as broken."""
    settings = ReadSettings() if settings is None else settings
    keep_freed_memory()
    check_metric(metric)
    task, options = main_task(subjects_task([str(n) for n in (pe_a, *pe_b_list)], task), dict(settings.options))
    settings = replace(settings, options=options)
    found = dict(root=root, task=task, seed=settings.seed, options=options)
    subjects = resolve_all([pe_a, *pe_b_list], **found, intervention=settings.intervention)
    a = subjects[0]
    others = subjects[1:] or others_than(a, root, task, options, settings.seed, on_broken)
    reading = reading_of([a, *others], options)
    base = a.other_seed() if baseline and reading.seed_baseline else None
    check_together(a, [*others, *([base] if base else [])])
    timings: dict[str, float] = {}
    start = time.perf_counter()
    loaded_a = a.load(settings.device, settings.pe_options, dtype=settings.dtype)
    timings["load"] = time.perf_counter() - start
    comparisons, result_base = _compare_each(a, loaded_a, others, base, reading, settings, metric, timings)
    every = [a, *others]
    return CompareReport(
        loaded_a.info,
        comparisons,
        result_base,
        task_folder(every, root, options),
        home(every, root, options),
        timings,
        stems=[_stem(a, loaded_a.info), *(_stem(s, r.b) for s, r in zip(others, comparisons))],
        seed_baseline=reading.seed_baseline,
    )


def _compare_each(
    a: Subject,
    loaded_a: Loaded,
    others: Sequence[Subject],
    base: Subject | None,
    reading: Reading,
    settings: ReadSettings,
    metric: str,
    timings: dict[str, float],
) -> tuple[list[CompareResult], CompareResult | None]:
    """A (``loaded_a``, loaded once) against each other subject, then against its seed baseline where there
    is one, the progress counted over all of them."""
    comparisons = []
    total = len(others) + (base is not None)
    for b in others:
        what = f"{loaded_a.info.label} vs {b.info.label}"
        step = within(settings.progress, what, len(comparisons), total)
        comparisons.append(_compare_with(loaded_a, b, reading, settings, metric, timings, progress=step))
    result_base = None
    if base is not None:
        label = baseline_label(a)
        step = within(settings.progress, f"{loaded_a.info.label} vs {label} (baseline)", len(comparisons), total)
        result_base = _compare_with(loaded_a, base, reading, settings, metric, timings, label, step)
    return comparisons, result_base


def _stem(subject: Subject, info: RunInfo) -> str:
    """How a subject is named in output files: ``nope``, ``nope1`` (seed 1), ``rotary+factor=2+scaling=yarn``
    (options applied at inference), ``hf-gpt2``."""
    return file_stem([subject]) or info.pe_name + ("" if info.seed == 0 else f"{info.seed}")


__all__ = ["compare_loaded", "compare_report", "compare_runs", "resolve"]
