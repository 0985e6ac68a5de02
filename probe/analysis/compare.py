"""`probe compare`: D^(l)(A, B) per layer and length bucket (Section 4.2, Eq. similarity),
on the same examples for both runs, with NoPE vs NoPE' (another seed) as the baseline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.analysis.examples import fitting_examples, sample_buckets, task_of
from probe.analysis.layerwise import MapPair, timed_layer_distances
from probe.analysis.patterns import collect_patterns
from probe.analysis.results import CompareReport, CompareResult, distance_stats
from probe.analysis.run_info import (
    Lengths,
    Progress,
    RunInfo,
    check_comparable,
    is_code_run,
    load_run_model,
    paired_layers,
    pe_label,
    run_folder,
    run_info,
    task_runs,
)
from probe.analysis.subjects import external_compare_report
from probe.analysis.windows import compare_windows
from probe.errors import ProbeError
from probe.metrics import Metric
from probe.metrics.jsd import check_metric
from probe.models.checkpoint import read_checkpoint_config
from probe.models.hf import is_external
from probe.runs.folders import Run, beside, resolve_run, task_folder_name, train_command
from probe.tasks import Example, Tokenizer


def _pattern_pairs(
    model_a, model_b, tokenizer: Tokenizer, examples: Sequence[Example], device: torch.device, batch_size: int
) -> Iterator[MapPair]:
    """Both models' attention maps on the same batches of examples, with the examples' lengths."""
    keep_on_device = device.type != "cpu"
    stream_a = collect_patterns(
        model_a, tokenizer, examples, batch_size=batch_size, device=device, to_cpu=not keep_on_device
    )
    stream_b = collect_patterns(
        model_b, tokenizer, examples, batch_size=batch_size, device=device, to_cpu=not keep_on_device
    )
    for batch_a, batch_b in zip(stream_a, stream_b):
        yield batch_a.patterns, batch_b.patterns, batch_a.lengths


def _compare_loaded(
    model_a,
    a: RunInfo,
    model_b,
    b: RunInfo,
    *,
    n_per_bucket: int,
    metric: str,
    seed: int,
    device: torch.device,
    batch_size: int,
    lengths: Lengths,
    timings: dict[str, float],
    multiples: Sequence[float] | None = None,
) -> CompareResult:
    if is_code_run(model_a.metadata) or is_code_run(model_b.metadata):
        return compare_windows(
            model_a,
            a,
            model_b,
            b,
            n_per_bucket=n_per_bucket,
            metric=metric,
            seed=seed,
            device=device,
            batch_size=batch_size,
            lengths=lengths,
            timings=timings,
            multiples=multiples,
        )
    check_comparable(a, model_a.metadata, b, model_b.metadata)
    task, tokenizer = task_of(model_a.metadata)
    n_ctx = min(model_a.cfg.n_ctx, model_b.cfg.n_ctx)
    buckets, skipped = fitting_examples(sample_buckets(task, n_per_bucket, seed, lengths), tokenizer, n_ctx)
    examples = [e for bucket in buckets for e in bucket.examples]
    layers_b = paired_layers(model_a.cfg.n_layers, model_b.cfg.n_layers)
    values, pairwise = timed_layer_distances(
        _pattern_pairs(model_a, model_b, tokenizer, examples, device, batch_size), layers_b, metric, device, timings
    )
    start = time.perf_counter()
    stats, offset = [], 0
    for bucket in buckets:
        part = slice(offset, offset + len(bucket.examples))
        stats.append(
            distance_stats(values[part], pairwise[part], metric, seed, bucket.length, bucket.seen, bucket.split)
        )
        offset = part.stop
    overall = distance_stats(values, pairwise, metric, seed)
    timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - start
    return CompareResult(
        a,
        b,
        task.name,
        dict(task.options),
        metric,
        seed,
        n_per_bucket,
        stats,
        overall,
        values,
        [e.length for e in examples],
        skipped,
        timings=timings,
        layers_b=layers_b,
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
) -> CompareResult:
    """D^(l)(A, B) per length bucket and layer (Eq. similarity), on the same examples for both.

    ``run_a``, ``run_b``: run folders. With ``baseline`` (another run of A's kind, e.g. NoPE seed 1)
    ``result.baseline`` holds D^(l)(A, baseline) on the same examples. Runs of different tasks or
    vocabularies raise ProbeError; of different depth, each layer of A is compared with the layer of
    B at the same relative depth (``analysis.runs.paired_layers``; ``result.layers_b``).
    ``metric="reference-code"``: see
    ``probe.metrics.layer_distances``. Distances are computed in float64. Code runs: one bucket
    per context size, ``multiples`` of the training context (default 1x, 2x; probe.analysis.windows).
    ``pe_options`` (RoPE ``scaling``, ``factor`` ...) apply at inference to the runs whose PE has them.
    """
    check_metric(metric)
    device = torch.device(device)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    configs = [read_checkpoint_config(run_folder(r)) for r in (run_a, run_b, baseline) if r is not None]
    infos = [run_info(run_folder(r), c) for r, c in zip((run_a, run_b, baseline), configs)]
    for info, config in zip(infos[1:], configs[1:]):
        check_comparable(infos[0], configs[0], info, config)
    model_a, a = load_run_model(run_a, device, pe_options=pe_options)
    model_b, b = load_run_model(run_b, device, pe_options=pe_options)
    timings["load"] = time.perf_counter() - start
    options = dict(
        n_per_bucket=n_per_bucket,
        metric=metric,
        seed=seed,
        device=device,
        batch_size=batch_size,
        lengths=lengths,
        multiples=multiples,
    )
    result = _compare_loaded(model_a, a, model_b, b, timings=timings, **options)
    if baseline is not None:
        del model_b
        start = time.perf_counter()
        model_c, c = load_run_model(baseline, device, label=f"{a.label}'", pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        result.baseline = _compare_loaded(model_a, a, model_c, c, timings=timings, **options)
    return result


def _other_seed(path: Path, seed: int) -> Path | None:
    """Another complete seed of the run at ``path`` (``<pe>/seed<k>``): seed 1 first, else the lowest."""
    found = []
    for candidate in sorted(path.parent.glob("seed*")):
        if candidate == path or not (candidate / "config.json").is_file():
            continue
        try:
            config = read_checkpoint_config(candidate)
        except ProbeError:
            continue
        other = int(config.get("model", {}).get("seed", -1))
        if other != seed and config.get("training", {}).get("complete", True):
            found.append((other != 1, other, candidate))
    return min(found)[2] if found else None


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
) -> CompareReport:
    """``probe compare A [B ...]``: A and each B are PE names (runs of ``task`` and ``seed`` under
    ``root``) or run folders; no B compares A with every other PE found. With ``baseline``, adds
    A vs A' (another seed of A's run, NoPE' for NoPE) when one exists. Everything is checked
    (runs exist, same task) before any model is loaded. ``multiples``, ``pe_options``: see
    :func:`compare_runs`. Where a model is ``hf:ID`` or ``hf:FOLDER``, the task is code and
    ``options`` name the corpus (:func:`probe.analysis.subjects.external_compare_report`).
    """
    if any(is_external(name) for name in (pe_a, *pe_b_list)):
        return external_compare_report(
            pe_a,
            pe_b_list,
            root=root,
            seed=seed,
            options=options,
            n_per_bucket=n_per_bucket,
            metric=metric,
            device=device,
            batch_size=batch_size,
            lengths=lengths,
            multiples=multiples,
            pe_options=pe_options,
            progress=progress,
        )
    check_metric(metric)
    options = dict(options or {})
    device = torch.device(device)
    path_a = resolve_run(pe_a, root, task, seed, options)
    config_a = read_checkpoint_config(path_a)
    a = run_info(path_a, config_a)
    if pe_b_list:
        paths_b = [resolve_run(name, root, task, seed, options) for name in pe_b_list]
    else:
        others = [r for r in task_runs(root, task, options, seed=seed) if r.pe != a.pe]
        if not others:
            raise ProbeError(
                f"no other PE's run of {task_folder_name(task, options)} seed {seed} under {root} to "
                "compare "
                f"{a.pe} with (make them with: {train_command(task, options, root)})"
            )
        paths_b = [r.path for r in others]
    configs_b = [read_checkpoint_config(p) for p in paths_b]
    infos_b = [run_info(p, c) for p, c in zip(paths_b, configs_b)]
    for info, config in zip(infos_b, configs_b):
        check_comparable(a, config_a, info, config)
    path_base = _other_seed(path_a, a.seed) if baseline else None
    if path_base is not None:
        config_base = read_checkpoint_config(path_base)
        check_comparable(a, config_a, run_info(path_base, config_base), config_base)

    timings: dict[str, float] = {}
    start = time.perf_counter()
    model_a, a = load_run_model(path_a, device, pe_options=pe_options)
    timings["load"] = time.perf_counter() - start
    settings = dict(
        n_per_bucket=n_per_bucket,
        metric=metric,
        seed=seed,
        device=device,
        batch_size=batch_size,
        lengths=lengths,
        multiples=multiples,
        timings=timings,
    )
    comparisons = []
    total = len(paths_b) + (path_base is not None)
    for path, info in zip(paths_b, infos_b):
        if progress:
            progress(f"{a.label} vs {info.label}", len(comparisons), total)
        start = time.perf_counter()
        model_b, b = load_run_model(path, device, pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        comparisons.append(_compare_loaded(model_a, a, model_b, b, **settings))
        del model_b
    result_base = None
    if path_base is not None:
        label = f"{pe_label(a.pe)}'"
        if progress:
            progress(f"{a.label} vs {label} (baseline)", len(comparisons), total)
        start = time.perf_counter()
        model_base, base = load_run_model(path_base, device, label=label, pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        result_base = _compare_loaded(model_a, a, model_base, base, **settings)
    runs = [Run(path_a, config_a), *(Run(p, c) for p, c in zip(paths_b, configs_b))]
    return CompareReport(a, comparisons, result_base, runs[0].task_folder, beside(runs), timings)


def _file_stem(info: RunInfo) -> str:
    from probe.models.hf import file_name

    if is_external(info.path):
        return file_name(info.path)
    return info.pe_name + ("" if info.seed == 0 else f"{info.seed}")


def write_compare_report(report: CompareReport, out_dir: str | Path, metric: str) -> list[str]:
    """JSON, CSV and the per-layer figure of ``report`` under ``out_dir``, named after the runs (``nope_vs_t5``),
    as `probe compare` writes them; returns the paths written."""
    from probe.atomic import write_json_and_csv
    from probe.figures import layer_distance_figure, write_figure

    out_dir = Path(out_dir)
    stem = f"{_file_stem(report.a)}_vs_{'+'.join(_file_stem(r.b) for r in report.comparisons)}"
    stem += "" if metric == "jsd" else f"_{metric}"
    written = write_json_and_csv(out_dir, stem, report.to_json(), report.to_rows())
    label = "D^(l), JSD" if metric == "jsd" else "D^(l), reference code"
    figure = layer_distance_figure(report.curves(), f"{report.a.label} vs other PEs on {report.task_folder}", label)
    written += write_figure(figure, out_dir / f"{stem}_layers")
    return [str(p) for p in written]
