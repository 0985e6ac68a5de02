"""`probe compare`: D^(l)(A, B) per layer and length bucket (Section 4.2, Eq. similarity), on the same inputs for
both models, with A vs A' (another seed of A; NoPE vs NoPE') as the baseline.

Written once for every subject (:mod:`probe.subjects.resolve`): a task run's length buckets, a code model's
windows at 1x and 2x its context (a context size standing for a length bucket), models of different depth
compared layer by layer at the same relative depth (:func:`probe.subjects.run_info.paired_layers`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.analysis.layerwise import group_distances
from probe.analysis.results import CompareReport, CompareResult, distance_stats
from probe.device import resolve_dtype
from probe.metrics import Metric
from probe.metrics.jsd import check_metric
from probe.models.interventions import Intervention
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
    task_folder,
)
from probe.subjects.run_info import Lengths, Progress, RunInfo, paired_layers, within
from probe.subjects.subject import Loaded, Subject


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
    settings: dict[str, Any],
    timings: dict[str, float],
    pe_options: Mapping[str, Any] | None,
    label: str | None = None,
    progress: Progress | None = None,
) -> CompareResult:
    """Load B, check it reads A's tokens, cut A's inputs to what both read, and compare."""
    device = settings["device"]
    start = time.perf_counter()
    b = b_subject.load(device, pe_options, label, settings["dtype"])
    timings["load"] = timings.get("load", 0.0) + time.perf_counter() - start
    reading.check_pair(a, b)
    inputs = reading.inputs(
        a,
        [a, b],
        n_per_bucket=settings["n_per_bucket"],
        seed=settings["seed"],
        lengths=settings["lengths"],
        multiples=settings["multiples"],
    )
    return compare_loaded(
        a,
        b,
        inputs,
        timings=timings,
        progress=progress,
        **{k: v for k, v in settings.items() if k not in ("lengths", "multiples", "dtype")},
    )


def compare_runs(
    run_a: str | Path | Run,
    run_b: str | Path | Run,
    *,
    n_per_bucket: int = 10,
    metric: Metric = "jsd",
    seed: int = 0,
    device: str | torch.device = "cpu",
    baseline: str | Path | Run | None = None,
    batch_size: int = 16,
    lengths: Lengths = "all",
    multiples: Sequence[float] | None = None,
    pe_options: Mapping[str, Any] | None = None,
    dtype: str | torch.dtype | None = None,
    intervention: Intervention | None = None,
) -> CompareResult:
    """D^(l)(A, B) per length bucket and layer (Eq. similarity), on the same inputs for both.

    ``run_a``, ``run_b``: run folders (or ``hf:`` models). With ``baseline`` (another run of A's kind, e.g.
    NoPE seed 1) ``result.baseline`` holds D^(l)(A, baseline) on the same inputs. Runs of different tasks or
    vocabularies raise ProbeError; of different depth, each layer of A is compared with the layer of B at the
    same relative depth (``result.layers_b``). ``metric="reference-code"``: see
    ``probe.metrics.layer_distances``. Code runs: one bucket per context size, ``multiples`` of the training
    context (default 1x, 2x). ``pe_options`` (RoPE ``scaling``, ``factor`` ...) apply at inference to the
    runs whose PE has them. ``dtype`` (``bfloat16``): the models' weights and forward passes in that
    precision (distances are float64 whatever it is).
    ``intervention``: every model read under it (:mod:`probe.models.interventions`).
    """
    keep_freed_memory()
    check_metric(metric)
    subjects = resolve_all([r for r in (run_a, run_b, baseline) if r is not None], intervention=intervention)
    check_together(subjects[0], subjects[1:])
    timings: dict[str, float] = {}
    settings = _settings(n_per_bucket, metric, seed, torch.device(device), batch_size, lengths, multiples, dtype)
    reading = reading_of(subjects)
    start = time.perf_counter()
    a = subjects[0].load(settings["device"], pe_options, dtype=settings["dtype"])
    timings["load"] = time.perf_counter() - start
    result = _compare_with(a, subjects[1], reading, settings, timings, pe_options)
    if baseline is not None:
        result.baseline = _compare_with(a, subjects[2], reading, settings, timings, pe_options, f"{a.info.label}'")
    return result


def _settings(n_per_bucket, metric, seed, device, batch_size, lengths, multiples, dtype) -> dict[str, Any]:
    return dict(
        dtype=resolve_dtype(dtype),
        n_per_bucket=n_per_bucket,
        metric=metric,
        seed=seed,
        device=device,
        batch_size=batch_size,
        lengths=lengths,
        multiples=multiples,
    )


def compare_report(
    pe_a: str,
    pe_b_list: Sequence[str] = (),
    *,
    root: str | Path = "checkpoints",
    task: str = "scan",
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    n_per_bucket: int = 10,
    metric: Metric = "jsd",
    device: str | torch.device = "cpu",
    baseline: bool = True,
    batch_size: int = 16,
    lengths: Lengths = "all",
    multiples: Sequence[float] | None = None,
    pe_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    dtype: str | torch.dtype | None = None,
    intervention: Intervention | None = None,
) -> CompareReport:
    """``probe compare A [B ...]``: A and each B are PE names (runs of ``task`` and ``seed`` under ``root``),
    run folders or ``hf:`` models (then the task is code and ``options`` name the corpus); no B compares A with
    every other PE found. With ``baseline``, adds A vs A' (another seed of A's run, NoPE' for NoPE) when one
    exists. Everything is checked (subjects exist, read the same inputs) before any model is loaded.
    ``multiples``, ``pe_options``, ``dtype``, ``intervention``: see :func:`compare_runs`."""
    keep_freed_memory()
    check_metric(metric)
    options = dict(options or {})
    found = dict(root=root, task=task, seed=seed, options=options)
    subjects = resolve_all([pe_a, *pe_b_list], **found, intervention=intervention)
    a = subjects[0]
    others = subjects[1:] or others_than(a, root, task, options, seed)
    reading = reading_of([a, *others], options)
    base = a.other_seed() if baseline and reading.seed_baseline else None
    check_together(a, [*others, *([base] if base else [])])
    timings: dict[str, float] = {}
    settings = _settings(n_per_bucket, metric, seed, torch.device(device), batch_size, lengths, multiples, dtype)
    start = time.perf_counter()
    loaded_a = a.load(settings["device"], pe_options, dtype=settings["dtype"])
    timings["load"] = time.perf_counter() - start
    comparisons, result_base = _compare_each(
        a, loaded_a, others, base, reading, settings, timings, pe_options, progress
    )
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
    settings: dict[str, Any],
    timings: dict[str, float],
    pe_options: Mapping[str, Any] | None,
    progress: Progress | None,
) -> tuple[list[CompareResult], CompareResult | None]:
    """A (``loaded_a``, loaded once) against each other subject, then against its seed baseline where there
    is one, the progress counted over all of them."""
    comparisons = []
    total = len(others) + (base is not None)
    for b in others:
        what = f"{loaded_a.info.label} vs {b.info.label}"
        step = within(progress, what, len(comparisons), total)
        comparisons.append(_compare_with(loaded_a, b, reading, settings, timings, pe_options, progress=step))
    result_base = None
    if base is not None:
        label = baseline_label(a)
        step = within(progress, f"{loaded_a.info.label} vs {label} (baseline)", len(comparisons), total)
        result_base = _compare_with(loaded_a, base, reading, settings, timings, pe_options, label, step)
    return comparisons, result_base


def _stem(subject: Subject, info: RunInfo) -> str:
    """How a subject is named in output files: ``nope``, ``nope1`` (seed 1), ``rotary+factor=2+scaling=yarn``
    (options applied at inference), ``hf-gpt2``."""
    return file_stem([subject]) or info.pe_name + ("" if info.seed == 0 else f"{info.seed}")


__all__ = ["compare_loaded", "compare_report", "compare_runs", "resolve"]
