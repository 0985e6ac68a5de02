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
training context instead of length buckets: :mod:`probe.code_analysis`.

Everything is deterministic given ``seed`` (examples, and the bootstrap resamples).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import torch
from torch import Tensor

from probe.attention import collect_patterns
from probe.errors import ProbeError
from probe.metrics import (BootstrapCI, Histogram, Metric, attended_distances, bimodality_coefficient,
                           bootstrap_ci, histogram, layer_distances)
from probe.metrics.attended import Normalization, Weighting
from probe.metrics.jsd import check_metric
from probe.models.checkpoint import read_checkpoint_config
from probe.models.registry import FIGURE_ORDER, PE_LABELS
from probe.runs import Run, beside, find_runs, resolve_run, task_folder_name, train_command
from probe.tasks import Example, Task, Tokenizer, get as get_task

Lengths = Literal["all", "seen", "unseen"]
Progress = Callable[[str, int, int], None]  # (what, done so far, total)
N_RESAMPLES = 1000
CONFIDENCE = 0.95


def _pe_name(pe: str) -> str:
    return PE_LABELS.get(pe, pe)


# -- runs ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """Which run a result is about."""

    path: str
    pe: str
    seed: int
    label: str
    pe_options: Mapping[str, Any] = field(default_factory=dict)  # as given at training (-p)
    inference_options: Mapping[str, Any] = field(default_factory=dict)  # applied at loading (RoPE scaling)

    @property
    def pe_name(self) -> str:
        """``rotary``, ``rotary+base=500``: the PE with the options it was trained with and any applied
        at inference (``rotary+factor=4+scaling=yarn``)."""
        from probe.models.registry import pe_folder_name

        return pe_folder_name(self.pe, {**self.pe_options, **self.inference_options})

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "pe": self.pe, "pe_options": dict(self.pe_options), "seed": self.seed,
                "label": self.label, "inference_options": dict(self.inference_options)}


def _run_path(run: str | Path | Run) -> Path:
    return run.path if isinstance(run, Run) else Path(run)


def _info(path: Path, config: Mapping[str, Any], label: str | None = None,
          inference: Mapping[str, Any] | None = None) -> RunInfo:
    from probe.models.registry import pe_folder_name

    run = Run(Path(path), dict(config))
    given = pe_folder_name(run.pe, {**run.pe_options, **(inference or {})})[len(run.pe):]  # "+base=500"
    return RunInfo(str(path), run.pe, run.seed, label or (_pe_name(run.pe) + given + ("" if run.seed == 0 else f" (seed {run.seed})")),
                   run.pe_options, dict(inference or {}))


def _describe(config: Mapping[str, Any], where: str = "the checkpoint") -> tuple[dict[str, Any], dict[str, Any], int]:
    """(task, tokenizer, n_layers) of a checkpoint's config, or a clear error if it has none."""
    if "task" not in config or "tokenizer" not in config:
        raise ProbeError(f"{where} has no task or tokenizer in its config.json (not a `probe train` run)")
    return config["task"], config["tokenizer"], int(config["model"]["n_layers"])


def check_comparable(a: RunInfo, config_a: Mapping[str, Any], b: RunInfo, config_b: Mapping[str, Any]) -> None:
    """Same task (and options), same vocabulary, same depth: else one line saying which differs.
    Code runs: the same corpus, tokenizer and training context (``check_same_corpus``)."""
    from probe.code_analysis import check_same_corpus, is_code_run

    if is_code_run(config_a) or is_code_run(config_b):
        check_same_corpus(a, config_a, b, config_b)
        layers_a, layers_b = (int(config["model"]["n_layers"]) for config in (config_a, config_b))
    else:
        task_a, tok_a, layers_a = _describe(config_a, a.path)
        task_b, tok_b, layers_b = _describe(config_b, b.path)
        if task_a != task_b:
            raise ProbeError(f"cannot compare {a.label} ({task_folder_name(task_a['name'], task_a.get('options'))}) "
                             f"with {b.label} ({task_folder_name(task_b['name'], task_b.get('options'))}): "
                             "the runs were trained on different tasks")
        if tok_a != tok_b:
            raise ProbeError(f"cannot compare {a.label} with {b.label}: their vocabularies differ")
    if layers_a != layers_b:
        raise ProbeError(f"cannot compare {a.label} ({layers_a} layers) with {b.label} ({layers_b} layers): "
                         "the layerwise distance needs models of the same depth")


def _load(run: str | Path | Run, device: torch.device, label: str | None = None,
          pe_options: Mapping[str, Any] | None = None):
    """The run's model, with those of ``pe_options`` its PE has applied at inference."""
    from probe.models import load_checkpoint
    from probe.models.registry import options_for

    path = _run_path(run)
    applied = options_for(read_checkpoint_config(path)["pe"], dict(pe_options or {}))
    model = load_checkpoint(path, device=device, pe_options=applied or None)
    return model, _info(path, model.metadata, label, applied)


def _task_of(config: Mapping[str, Any]) -> tuple[Task, Tokenizer]:
    task, tokenizer, _ = _describe(config)
    return get_task(task["name"], **task.get("options", {})), Tokenizer.from_dict(tokenizer)


def task_runs(root: str | Path, task: str, options: Mapping[str, Any] | None = None, seed: int | None = 0,
              pes: Sequence[str] | None = None) -> list[Run]:
    """Complete runs of a task folder (optionally one seed, some PEs), in the paper's PE order.

    None found: ProbeError with the exact `probe train` command that makes them.
    """
    found, _ = find_runs(root, task, dict(options or {}))
    runs = [r for r in found if r.config.get("training", {}).get("complete", True)
            and (seed is None or r.seed == seed) and (pes is None or r.pe in pes)]
    if not runs:
        folder = task_folder_name(task, dict(options or {}))
        which = "" if pes is None else f" of {', '.join(pes)}"
        raise ProbeError(f"no complete runs{which} of {folder}{'' if seed is None else f' seed {seed}'} under {root} "
                         f"(make them with: {train_command(task, dict(options or {}), root, seed=seed if seed else None)})")
    rank = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    return sorted(runs, key=lambda r: (rank.get(r.pe, len(rank)), r.pe, r.seed))


# -- examples -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bucket:
    """Examples of one length bucket λ, and where they were drawn from."""

    length: int
    seen: bool
    split: str
    examples: tuple[Example, ...]


def sample_buckets(task: Task, n_per_bucket: int = 10, seed: int = 0, lengths: Lengths = "all") -> list[Bucket]:
    """Up to ``n_per_bucket`` examples of every length bucket of the test split, in length order.

    Where the test split has no seen lengths (SCAN, PCFG: their test side is all unseen), the
    seen buckets come from the valid split (IID held-out examples). ``lengths`` keeps all buckets,
    or only the seen or unseen ones. Deterministic given ``seed``.
    """
    if n_per_bucket < 1:
        raise ProbeError(f"--n-per-bucket must be at least 1, got {n_per_bucket}")
    if lengths not in ("all", "seen", "unseen"):
        raise ProbeError(f"unknown lengths {lengths!r}; accepted: all, seen, unseen")
    pools: dict[int, tuple[str, list[Example]]] = {}
    for example in task.examples("test", seed=seed):
        pools.setdefault(example.length, ("test", []))[1].append(example)
    if lengths != "unseen" and not any(task.is_seen(length) for length in pools):
        for example in task.examples("valid", seed=seed):
            pools.setdefault(example.length, ("valid", []))[1].append(example)
    buckets = []
    for length in sorted(pools):
        seen = task.is_seen(length)
        if (lengths == "seen" and not seen) or (lengths == "unseen" and seen):
            continue
        split, pool = pools[length]
        rng = random.Random(f"buckets/{task.name}/{length}/{seed}")
        chosen = rng.sample(pool, min(n_per_bucket, len(pool)))
        buckets.append(Bucket(length, seen, split, tuple(chosen)))
    if not buckets:
        raise ProbeError(f"{task.name} has no {lengths} length buckets to sample")
    return buckets


def _fitting(buckets: list[Bucket], tokenizer: Tokenizer, n_ctx: int) -> tuple[list[Bucket], int]:
    """Drop examples longer than the model's context; returns the buckets left and how many went."""
    kept, skipped = [], 0
    for bucket in buckets:
        fits = tuple(e for e in bucket.examples if len(tokenizer.encode_example(e)[0]) <= n_ctx)
        skipped += len(bucket.examples) - len(fits)
        if fits:
            kept.append(Bucket(bucket.length, bucket.seen, bucket.split, fits))
    if not kept:
        raise ProbeError(f"no sampled example fits the model's context (n_ctx={n_ctx})")
    return kept, skipped


# -- compare ------------------------------------------------------------------------------------
@dataclass
class DistanceStats:
    """D^(l) over a set of examples (one bucket, or all of them): means with bootstrap intervals."""

    length: int | None  # None: every bucket together
    seen: bool | None
    split: str | None
    n_examples: int
    per_layer: BootstrapCI  # [layer] each
    average: BootstrapCI  # scalars: D averaged over layers, per example, then over examples
    head_matrix: Tensor  # [layer, head_A, head_B]: D_AT of every head pair, averaged over examples
    argmin: Tensor  # [layer, 2]: (head of A, head of B) minimising head_matrix

    def to_json(self) -> dict[str, Any]:
        return {
            "length": self.length, "seen": self.seen, "split": self.split, "n_examples": self.n_examples,
            "per_layer": {k: getattr(self.per_layer, k).tolist() for k in ("mean", "low", "high")},
            "average": {k: float(getattr(self.average, k)) for k in ("mean", "low", "high")},
            "head_matrix": self.head_matrix.tolist(),
            "argmin": self.argmin.tolist(),
        }


@dataclass
class CompareResult:
    """D^(l)(A, B) per length bucket and over all buckets (``overall``), from per-example values."""

    a: RunInfo
    b: RunInfo
    task: str
    task_options: dict[str, Any]
    metric: str
    seed: int
    n_per_bucket: int
    buckets: list[DistanceStats]
    overall: DistanceStats
    values: Tensor  # [example, layer]: D^(l) of each example (float64)
    example_lengths: list[int]  # [example]: its length bucket
    skipped: int = 0  # examples longer than the models' context, left out
    baseline: CompareResult | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage; not part of to_json

    @property
    def label(self) -> str:
        return self.b.label

    @property
    def n_layers(self) -> int:
        return int(self.values.shape[1])

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(), "b": self.b.to_json(), "label": self.label, "task": self.task,
            "task_options": self.task_options, "metric": self.metric, "seed": self.seed,
            "n_per_bucket": self.n_per_bucket, "confidence": CONFIDENCE, "n_layers": self.n_layers,
            "skipped": self.skipped, "overall": self.overall.to_json(),
            "buckets": [bucket.to_json() for bucket in self.buckets],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }

    def to_rows(self) -> list[dict[str, Any]]:
        """One CSV row per (bucket or "all", layer or "average"), the baseline's rows after."""
        rows = []
        for stats in [*self.buckets, self.overall]:
            common = {"a": self.a.label, "b": self.b.label, "metric": self.metric,
                      "length": "all" if stats.length is None else stats.length,
                      "seen": "" if stats.seen is None else stats.seen, "n_examples": stats.n_examples}
            for layer in range(self.n_layers):
                rows.append({**common, "layer": layer, "mean": float(stats.per_layer.mean[layer]),
                             "low": float(stats.per_layer.low[layer]), "high": float(stats.per_layer.high[layer]),
                             "argmin_head_a": int(stats.argmin[layer, 0]), "argmin_head_b": int(stats.argmin[layer, 1])})
            rows.append({**common, "layer": "average", "mean": float(stats.average.mean),
                         "low": float(stats.average.low), "high": float(stats.average.high),
                         "argmin_head_a": "", "argmin_head_b": ""})
        return rows + (self.baseline.to_rows() if self.baseline is not None else [])


def _stats(values: Tensor, pairwise: Tensor, metric: str, seed: int, length: int | None = None,
           seen: bool | None = None, split: str | None = None) -> DistanceStats:
    """values: [example, layer]; pairwise: [example, layer, head_A, head_B]."""
    head_matrix = pairwise.mean(0)  # [layer, head_A, head_B]
    visited = head_matrix
    if metric == "reference-code":  # the pairs that code visits: head_B < head_A
        heads_a, heads_b = head_matrix.shape[-2:]
        below = torch.ones(heads_a, heads_b, dtype=torch.bool).tril(-1)
        visited = head_matrix.masked_fill(~below, float("inf"))
    flat = visited.flatten(-2).argmin(-1)  # [layer]
    argmin = torch.stack([flat // head_matrix.shape[-1], flat % head_matrix.shape[-1]], dim=-1)
    return DistanceStats(length, seen, split, int(values.shape[0]),
                         bootstrap_ci(values, N_RESAMPLES, CONFIDENCE, seed),
                         bootstrap_ci(values.mean(1), N_RESAMPLES, CONFIDENCE, seed),
                         head_matrix, argmin)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _distances(model_a, model_b, tokenizer: Tokenizer, examples: Sequence[Example], metric: str,
               device: torch.device, batch_size: int, timings: dict[str, float]) -> tuple[Tensor, Tensor]:
    """Per-example D^(l) [example, layer] and D_AT of every head pair [example, layer, head_A, head_B]."""
    keep_on_device = device.type != "cpu"
    stream_a = collect_patterns(model_a, tokenizer, examples, batch_size=batch_size, device=device, to_cpu=not keep_on_device)
    stream_b = collect_patterns(model_b, tokenizer, examples, batch_size=batch_size, device=device, to_cpu=not keep_on_device)
    values, pairwise = [], []
    while True:
        start = time.perf_counter()
        batch_a, batch_b = next(stream_a, None), next(stream_b, None)
        _sync(device)
        timings["collect"] = timings.get("collect", 0.0) + time.perf_counter() - start
        if batch_a is None:
            break
        start = time.perf_counter()
        result = layer_distances(batch_a.patterns.double(), batch_b.patterns.double(),
                                 lengths=batch_a.lengths.to(batch_a.patterns.device), metric=metric)
        values.append(result.per_layer.cpu())  # [batch, layer]
        pairwise.append(result.pairwise.cpu())  # [batch, layer, head_A, head_B]
        _sync(device)
        timings["metric"] = timings.get("metric", 0.0) + time.perf_counter() - start
    return torch.cat(values), torch.cat(pairwise)


def _compare_loaded(model_a, a: RunInfo, model_b, b: RunInfo, *, n_per_bucket: int, metric: str, seed: int,
                    device: torch.device, batch_size: int, lengths: Lengths, timings: dict[str, float],
                    multiples: Sequence[float] | None = None) -> CompareResult:
    from probe.code_analysis import compare_windows, is_code_run

    if is_code_run(model_a.metadata) or is_code_run(model_b.metadata):
        return compare_windows(model_a, a, model_b, b, n_per_bucket=n_per_bucket, metric=metric, seed=seed, device=device,
                               batch_size=batch_size, lengths=lengths, timings=timings, multiples=multiples)
    check_comparable(a, model_a.metadata, b, model_b.metadata)
    task, tokenizer = _task_of(model_a.metadata)
    n_ctx = min(model_a.cfg.n_ctx, model_b.cfg.n_ctx)
    buckets, skipped = _fitting(sample_buckets(task, n_per_bucket, seed, lengths), tokenizer, n_ctx)
    examples = [e for bucket in buckets for e in bucket.examples]
    values, pairwise = _distances(model_a, model_b, tokenizer, examples, metric, device, batch_size, timings)
    start = time.perf_counter()
    stats, offset = [], 0
    for bucket in buckets:
        part = slice(offset, offset + len(bucket.examples))
        stats.append(_stats(values[part], pairwise[part], metric, seed, bucket.length, bucket.seen, bucket.split))
        offset = part.stop
    overall = _stats(values, pairwise, metric, seed)
    timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - start
    return CompareResult(a, b, task.name, dict(task.options), metric, seed, n_per_bucket, stats, overall,
                         values, [e.length for e in examples], skipped, timings=timings)


def compare_runs(run_a: str | Path | Run, run_b: str | Path | Run, *, n_per_bucket: int = 10,
                 metric: Metric = "jsd", seed: int = 0, device: str | torch.device = "cpu",
                 baseline: str | Path | Run | None = None, batch_size: int = 16,
                 lengths: Lengths = "all", multiples: Sequence[float] | None = None,
                 pe_options: Mapping[str, Any] | None = None) -> CompareResult:
    """D^(l)(A, B) per length bucket and layer (Eq. similarity), on the same examples for both.

    ``run_a``, ``run_b``: run folders. With ``baseline`` (another run of A's kind, e.g. NoPE seed 1)
    ``result.baseline`` holds D^(l)(A, baseline) on the same examples. Runs of different tasks,
    vocabularies or depth raise ProbeError. ``metric="reference-code"``: see
    ``probe.metrics.layer_distances``. Distances are computed in float64. Code runs: one bucket
    per context size, ``multiples`` of the training context (default 1x, 2x; probe.code_analysis).
    ``pe_options`` (RoPE ``scaling``, ``factor`` ...) apply at inference to the runs whose PE has them.
    """
    check_metric(metric)
    device = torch.device(device)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    configs = [read_checkpoint_config(_run_path(r)) for r in (run_a, run_b, baseline) if r is not None]
    infos = [_info(_run_path(r), c) for r, c in zip((run_a, run_b, baseline), configs)]
    for info, config in zip(infos[1:], configs[1:]):
        check_comparable(infos[0], configs[0], info, config)
    model_a, a = _load(run_a, device, pe_options=pe_options)
    model_b, b = _load(run_b, device, pe_options=pe_options)
    timings["load"] = time.perf_counter() - start
    options = dict(n_per_bucket=n_per_bucket, metric=metric, seed=seed, device=device, batch_size=batch_size,
                   lengths=lengths, multiples=multiples)
    result = _compare_loaded(model_a, a, model_b, b, timings=timings, **options)
    if baseline is not None:
        del model_b
        start = time.perf_counter()
        model_c, c = _load(baseline, device, label=f"{a.label}'", pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        result.baseline = _compare_loaded(model_a, a, model_c, c, timings=timings, **options)
    return result


@dataclass
class CompareReport:
    """A against each of several runs, plus A against another seed of itself (NoPE vs NoPE')."""

    a: RunInfo
    comparisons: list[CompareResult]
    baseline: CompareResult | None
    task_folder: str
    folder: Path  # where outputs about these runs belong (probe.runs.beside)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def results(self) -> list[CompareResult]:
        """Every comparison, the baseline last."""
        return self.comparisons + ([self.baseline] if self.baseline is not None else [])

    def to_json(self) -> dict[str, Any]:
        first = self.results[0]
        return {
            "a": self.a.to_json(), "task": first.task, "task_options": first.task_options,
            "task_folder": self.task_folder, "metric": first.metric, "seed": first.seed,
            "n_per_bucket": first.n_per_bucket, "confidence": CONFIDENCE, "n_layers": first.n_layers,
            "comparisons": [result.to_json() for result in self.comparisons],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }

    def to_rows(self) -> list[dict[str, Any]]:
        return [row for result in self.results for row in result.to_rows()]

    def curves(self, length: int | None = None) -> list[dict[str, Any]]:
        """Inputs of ``probe.plots.layer_distance_figure``: one curve per comparison (the baseline
        dashed), over all buckets or for bucket ``length``."""
        curves = []
        for result in self.results:
            stats = result.overall if length is None else next((s for s in result.buckets if s.length == length), None)
            if stats is None:
                continue
            curves.append({"label": result.label, "pe": result.b.pe, "dashed": result is self.baseline,
                           "mean": stats.per_layer.mean.tolist(), "low": stats.per_layer.low.tolist(),
                           "high": stats.per_layer.high.tolist(),
                           "average": [float(stats.average.mean), float(stats.average.low), float(stats.average.high)]})
        return curves


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


def compare_report(pe_a: str, pe_b_list: Sequence[str] = (), *, root: str | Path = "checkpoints", task: str = "scan",
                   seed: int = 0, options: Mapping[str, Any] | None = None, n_per_bucket: int = 10,
                   metric: Metric = "jsd", device: str | torch.device = "cpu", baseline: bool = True,
                   batch_size: int = 16, lengths: Lengths = "all", multiples: Sequence[float] | None = None,
                   pe_options: Mapping[str, Any] | None = None, progress: Progress | None = None) -> CompareReport:
    """``probe compare A [B ...]``: A and each B are PE names (runs of ``task`` and ``seed`` under
    ``root``) or run folders; no B compares A with every other PE found. With ``baseline``, adds
    A vs A' (another seed of A's run, NoPE' for NoPE) when one exists. Everything is checked
    (runs exist, same task and depth) before any model is loaded. ``multiples``, ``pe_options``: see
    :func:`compare_runs`.
    """
    check_metric(metric)
    options = dict(options or {})
    device = torch.device(device)
    path_a = resolve_run(pe_a, root, task, seed, options)
    config_a = read_checkpoint_config(path_a)
    a = _info(path_a, config_a)
    if pe_b_list:
        paths_b = [resolve_run(name, root, task, seed, options) for name in pe_b_list]
    else:
        others = [r for r in task_runs(root, task, options, seed=seed) if r.pe != a.pe]
        if not others:
            raise ProbeError(f"no other PE's run of {task_folder_name(task, options)} seed {seed} under {root} to compare "
                             f"{a.pe} with (make them with: {train_command(task, options, root)})")
        paths_b = [r.path for r in others]
    configs_b = [read_checkpoint_config(p) for p in paths_b]
    infos_b = [_info(p, c) for p, c in zip(paths_b, configs_b)]
    for info, config in zip(infos_b, configs_b):
        check_comparable(a, config_a, info, config)
    path_base = _other_seed(path_a, a.seed) if baseline else None
    if path_base is not None:
        config_base = read_checkpoint_config(path_base)
        check_comparable(a, config_a, _info(path_base, config_base), config_base)

    timings: dict[str, float] = {}
    start = time.perf_counter()
    model_a, a = _load(path_a, device, pe_options=pe_options)
    timings["load"] = time.perf_counter() - start
    settings = dict(n_per_bucket=n_per_bucket, metric=metric, seed=seed, device=device, batch_size=batch_size,
                    lengths=lengths, multiples=multiples, timings=timings)
    comparisons = []
    total = len(paths_b) + (path_base is not None)
    for path, info in zip(paths_b, infos_b):
        if progress:
            progress(f"{a.label} vs {info.label}", len(comparisons), total)
        start = time.perf_counter()
        model_b, b = _load(path, device, pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        comparisons.append(_compare_loaded(model_a, a, model_b, b, **settings))
        del model_b
    result_base = None
    if path_base is not None:
        label = f"{_pe_name(a.pe)}'"
        if progress:
            progress(f"{a.label} vs {label} (baseline)", len(comparisons), total)
        start = time.perf_counter()
        model_base, base = _load(path_base, device, label=label, pe_options=pe_options)
        timings["load"] += time.perf_counter() - start
        result_base = _compare_loaded(model_a, a, model_base, base, **settings)
    runs = [Run(path_a, config_a), *(Run(p, c) for p, c in zip(paths_b, configs_b))]
    return CompareReport(a, comparisons, result_base, runs[0].task_folder, beside(runs), timings)


# -- attended distance --------------------------------------------------------------------------
@dataclass
class AttendedStats:
    """The pooled distribution of d̄ for one weighting: histogram, bimodality, and the exact support."""

    weighting: str
    histogram: Histogram
    bimodality: float
    mean: float
    values: Tensor  # [distinct]: every distinct d̄ that occurred
    weights: Tensor  # [distinct]: its total weight (count of arg-max hits, or attention mass)

    def to_json(self) -> dict[str, Any]:
        return {"weighting": self.weighting, "bimodality": self.bimodality, "mean": self.mean,
                "histogram": {"edges": self.histogram.edges.tolist(), "mass": self.histogram.mass.tolist()}}


@dataclass
class AttendedResult:
    """One run's attended-distance distributions (Figure attended_distance)."""

    run: RunInfo
    task: str
    task_options: dict[str, Any]
    n_examples: int
    n_queries: int  # output queries × layers × heads
    skipped: int
    lengths: list[int]  # the length buckets sampled
    stats: dict[str, AttendedStats]  # by weighting

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run.to_json(), "task": self.task, "task_options": self.task_options,
                "n_examples": self.n_examples, "n_queries": self.n_queries, "skipped": self.skipped,
                "lengths": self.lengths, "weightings": {w: s.to_json() for w, s in self.stats.items()}}


@dataclass
class AttendedReport:
    results: list[AttendedResult]
    normalization: str
    lengths: str
    n_per_bucket: int
    seed: int
    bins: int

    def to_json(self) -> dict[str, Any]:
        return {"normalization": self.normalization, "lengths": self.lengths, "n_per_bucket": self.n_per_bucket,
                "seed": self.seed, "bins": self.bins, "runs": [r.to_json() for r in self.results]}

    def to_rows(self) -> list[dict[str, Any]]:
        """One CSV row per (run, weighting, bin)."""
        rows = []
        for result in self.results:
            for weighting, stats in result.stats.items():
                edges, mass = stats.histogram.edges.tolist(), stats.histogram.mass.tolist()
                for i, m in enumerate(mass):
                    rows.append({"run": result.run.label, "pe": result.run.pe, "seed": result.run.seed,
                                 "weighting": weighting, "bin_low": edges[i], "bin_high": edges[i + 1], "mass": m,
                                 "bimodality": stats.bimodality})
        return rows

    def series(self) -> list[dict[str, Any]]:
        """Inputs of ``probe.plots.attended_distance_figure``."""
        return [{"label": r.run.label, "pe": r.run.pe,
                 "histograms": {w: {"edges": s.histogram.edges.tolist(), "mass": s.histogram.mass.tolist(),
                                    "bimodality": s.bimodality} for w, s in r.stats.items()}}
                for r in self.results]


def _query_key_weights(patterns: Tensor, output_start: Tensor, lengths: Tensor, weighting: str) -> Tensor:
    """[query, key] total weight over examples, layers and heads of output queries attending keys.

    "argmax" counts each (example, layer, head, output query)'s arg-max key (ties to the earliest
    key, as ``attended_distances``); "attention" sums the probabilities. d̄ depends on (query, key)
    only, so this grid holds the whole distribution in T² numbers, whatever the number of maps.
    """
    width = patterns.shape[-1]
    positions = torch.arange(width, device=patterns.device)
    queries = (positions >= output_start[:, None]) & (positions < lengths[:, None])  # [example, query]
    if weighting == "attention":
        return (patterns.double() * queries[:, None, None, :, None]).sum((0, 1, 2))  # [query, key]
    key = patterns.argmax(-1)  # [example, layer, head, query]
    cells = (positions * width + key)[queries[:, None, None, :].expand(key.shape)]
    counts = torch.zeros(width * width, dtype=torch.float64, device=patterns.device)
    return counts.index_add_(0, cells, torch.ones_like(cells, dtype=torch.float64)).view(width, width)


def _distribution(grid: Tensor, normalization: str) -> tuple[Tensor, Tensor]:
    """Distinct d̄ values with their total weight, from a [query, key] weight grid."""
    found = attended_distances(grid[None, None, None], 0, grid.shape[-1], "attention", normalization)
    kept = found.weight > 0
    distinct, index = torch.unique(found.distance[kept], return_inverse=True)
    total = torch.zeros(distinct.shape, dtype=torch.float64, device=grid.device).index_add_(0, index, found.weight[kept])
    return distinct.cpu(), total.cpu()


def _attended_stats(grid: Tensor, weighting: str, normalization: str, bins: int) -> AttendedStats:
    """The distribution of d̄ held by a [query, key] weight grid: histogram, bimodality, mean."""
    distinct, total = _distribution(grid, normalization)
    return AttendedStats(weighting, histogram(distinct, total, bins=bins), float(bimodality_coefficient(distinct, total)),
                         float((distinct * total).sum() / total.sum()), distinct, total)


def _attended_buckets(model, info: RunInfo, *, n_per_bucket: int, weightings: Sequence[str], normalization: str,
                      lengths: Lengths, bins: int, seed: int, device: torch.device, batch_size: int) -> AttendedResult:
    """One task run's distribution over the output queries of its sampled length buckets."""
    task, tokenizer = _task_of(model.metadata)
    buckets, skipped = _fitting(sample_buckets(task, n_per_bucket, seed, lengths), tokenizer, model.cfg.n_ctx)
    examples = [e for bucket in buckets for e in bucket.examples]
    size = max(len(tokenizer.encode_example(e)[0]) for e in examples)
    grids = {w: torch.zeros(size, size, dtype=torch.float64, device=device) for w in weightings}
    for batch in collect_patterns(model, tokenizer, examples, batch_size=batch_size, device=device,
                                  to_cpu=device.type == "cpu"):
        starts, true_lengths = batch.output_start.to(device), batch.lengths.to(device)
        width = batch.patterns.shape[-1]
        for w in weightings:
            grids[w][:width, :width] += _query_key_weights(batch.patterns, starts, true_lengths, w)
    stats = {w: _attended_stats(grid, w, normalization, bins) for w, grid in grids.items()}
    n_queries = sum(len(tokenizer.encode_example(e)[0]) - tokenizer.encode_example(e)[1] for e in examples)
    n_queries *= model.cfg.n_layers * model.cfg.n_heads
    return AttendedResult(info, task.name, dict(task.options), len(examples), n_queries, skipped,
                          [b.length for b in buckets], stats)


def attended_distance_report(runs: Sequence[str | Path | Run], *, n_per_bucket: int = 10,
                             weighting: Weighting | Sequence[Weighting] = ("argmax", "attention"),
                             normalization: Normalization = "text", lengths: Lengths | None = None, bins: int = 20,
                             seed: int = 0, device: str | torch.device = "cpu", batch_size: int = 16,
                             multiples: Sequence[float] | None = None,
                             progress: Progress | None = None) -> AttendedReport:
    """Normalized attended distance d̄ of every output query over all layers and heads (Section 5.1).

    Per run: up to ``n_per_bucket`` examples per length bucket (``lengths`` default "unseen", as
    the released notebook; "all" or "seen" too), gold input + output; d̄ pooled into one
    distribution per weighting ("argmax": the attended key, as the paper; "attention": every
    key weighted by its probability), with its histogram and Sarle's bimodality coefficient.
    Examples longer than a model's context are left out and counted in ``skipped``.
    A code run gives one result per context size (``multiples`` of its training context, default
    1x and 2x; ``lengths`` default "all"; seen: 1x, unseen: 2x), every query of a window counted.
    """
    from probe.code_analysis import attended_windows, is_code_run

    weightings = [weighting] if isinstance(weighting, str) else list(weighting)
    for w in weightings:
        if w not in ("argmax", "attention"):
            raise ProbeError(f"unknown weighting {w!r}; accepted: argmax, attention")
    if normalization not in ("text", "reference-code"):
        raise ProbeError(f"unknown normalization {normalization!r}; accepted: text, reference-code")
    if bins < 1:
        raise ProbeError(f"--bins must be at least 1, got {bins}")
    device = torch.device(device)
    settings = dict(n_per_bucket=n_per_bucket, weightings=weightings, normalization=normalization, bins=bins,
                    seed=seed, device=device, batch_size=batch_size)
    results, chosen = [], []
    for done, run in enumerate(runs):
        model, info = _load(run, device)
        if progress:
            progress(info.label, done, len(runs))
        if is_code_run(model.metadata):
            chosen.append(lengths or "all")
            results += attended_windows(model, info, lengths=chosen[-1], multiples=multiples, **settings)
        else:
            chosen.append(lengths or "unseen")
            results.append(_attended_buckets(model, info, lengths=chosen[-1], **settings))
        del model
    return AttendedReport(results, normalization, ", ".join(dict.fromkeys(chosen)) or lengths or "unseen",
                          n_per_bucket, seed, bins)
