"""The analyses' results (tables, JSON, CSV rows, figure inputs), and how per-example values
become them: D^(l) means with bootstrap intervals, pooled attended-distance distributions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.metrics import BootstrapCI, Histogram, attended_distances, bimodality_coefficient, bootstrap_ci, histogram
from probe.subjects.run_info import RunInfo

N_RESAMPLES = 1000
CONFIDENCE = 0.95


# -- layerwise distance (probe compare) -------------------------------------------------------
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
            "length": self.length,
            "seen": self.seen,
            "split": self.split,
            "n_examples": self.n_examples,
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
    layers_b: list[int] | None = None  # [layer of A]: the layer of B compared with it (analysis.runs.paired_layers)

    @property
    def label(self) -> str:
        return self.b.label

    @property
    def n_layers(self) -> int:
        """A's layers: D^(l) is indexed by them."""
        return int(self.values.shape[1])

    @property
    def paired(self) -> list[int]:
        """The layer of B each layer of A is compared with (itself when the depths are equal)."""
        return list(range(self.n_layers)) if self.layers_b is None else list(self.layers_b)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "label": self.label,
            "task": self.task,
            "task_options": self.task_options,
            "metric": self.metric,
            "seed": self.seed,
            "n_per_bucket": self.n_per_bucket,
            "confidence": CONFIDENCE,
            "n_layers": self.n_layers,
            "layers_b": self.paired,
            "skipped": self.skipped,
            "overall": self.overall.to_json(),
            "buckets": [bucket.to_json() for bucket in self.buckets],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }

    def to_rows(self) -> list[dict[str, Any]]:
        """One CSV row per (bucket or "all", layer of A or "average"), the baseline's rows after;
        ``layer_b``: the layer of B it was compared with; each side's PE and seed, to join with ``eval.csv``."""
        rows = []
        for stats in [*self.buckets, self.overall]:
            common = {
                "a": self.a.label,
                "b": self.b.label,
                "pe_a": self.a.pe,
                "seed_a": self.a.seed,
                "pe_b": self.b.pe,
                "seed_b": self.b.seed,
                "metric": self.metric,
                "length": "all" if stats.length is None else stats.length,
                "seen": "" if stats.seen is None else stats.seen,
                "n_examples": stats.n_examples,
            }
            for layer, layer_b in enumerate(self.paired):
                rows.append(
                    {
                        **common,
                        "layer": layer,
                        "layer_b": layer_b,
                        "mean": float(stats.per_layer.mean[layer]),
                        "low": float(stats.per_layer.low[layer]),
                        "high": float(stats.per_layer.high[layer]),
                        "argmin_head_a": int(stats.argmin[layer, 0]),
                        "argmin_head_b": int(stats.argmin[layer, 1]),
                    }
                )
            rows.append(
                {
                    **common,
                    "layer": "average",
                    "layer_b": "",
                    "mean": float(stats.average.mean),
                    "low": float(stats.average.low),
                    "high": float(stats.average.high),
                    "argmin_head_a": "",
                    "argmin_head_b": "",
                }
            )
        return rows + (self.baseline.to_rows() if self.baseline is not None else [])


@dataclass
class CompareReport:
    """A against each of several runs, plus A against another seed of itself (NoPE vs NoPE')."""

    a: RunInfo
    comparisons: list[CompareResult]
    baseline: CompareResult | None
    task_folder: str
    folder: Path  # where outputs about these runs belong (probe.runs.folders.beside)
    timings: dict[str, float] = field(default_factory=dict)
    stems: list[str] = field(default_factory=list)  # A, then each B, as output files name them (nope, hf-gpt2)
    seed_baseline: bool = True  # A could have been compared with another seed of itself (not so for hf: models)

    name = "compare"  # its outputs' folder (probe.analysis.report.Report)

    @property
    def context(self) -> int | None:
        """T, the context code models were read at (windows at multiples of it); None for task runs."""
        return self.comparisons[0].task_options.get("context") if self.comparisons else None

    @property
    def results(self) -> list[CompareResult]:
        """Every comparison, the baseline last."""
        return self.comparisons + ([self.baseline] if self.baseline is not None else [])

    def to_json(self) -> dict[str, Any]:
        first = self.results[0]
        return {
            "a": self.a.to_json(),
            "task": first.task,
            "task_options": first.task_options,
            "task_folder": self.task_folder,
            "metric": first.metric,
            "seed": first.seed,
            "n_per_bucket": first.n_per_bucket,
            "confidence": CONFIDENCE,
            "n_layers": first.n_layers,
            "comparisons": [result.to_json() for result in self.comparisons],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }

    def to_rows(self) -> list[dict[str, Any]]:
        return [row for result in self.results for row in result.to_rows()]

    def write(self, out_dir: str | Path) -> list[str]:
        """JSON, CSV and the per-layer figure under ``out_dir`` (default place: ``folder / "compare"``), named
        after the subjects (``nope_vs_t5``, ``..._reference-code``), as `probe compare` writes them; the paths."""
        from probe.analysis.report import write_tables
        from probe.figures import layer_distance_figure, write_figure

        out_dir, metric = Path(out_dir), self.results[0].metric
        stem = f"{self.stems[0]}_vs_{'+'.join(self.stems[1:])}" + ("" if metric == "jsd" else f"_{metric}")
        written = write_tables(self, out_dir, stem)
        label = "D^(l), JSD" if metric == "jsd" else "D^(l), reference code"
        figure = layer_distance_figure(self.curves(), f"{self.a.label} vs other PEs on {self.task_folder}", label)
        written += write_figure(figure, out_dir / f"{stem}_layers")
        return [str(p) for p in written]

    def curves(self, length: int | None = None) -> list[dict[str, Any]]:
        """Inputs of ``probe.figures.layer_distance_figure``: one curve per comparison (the baseline
        dashed), over all buckets or for bucket ``length``."""
        return compare_curves(self.to_json(), length)


def compare_curves(report: dict[str, Any], length: int | None = None) -> list[dict[str, Any]]:
    """:meth:`CompareReport.curves` from its JSON (as `probe compare` saves it, so a saved report draws the same
    figure)."""
    curves = []
    results = [*report["comparisons"], *([report["baseline"]] if report["baseline"] is not None else [])]
    for result in results:
        stats = (
            result["overall"] if length is None else next((s for s in result["buckets"] if s["length"] == length), None)
        )
        if stats is None:
            continue
        curves.append(
            {
                "label": result["label"],
                "pe": result["b"]["pe"],
                "dashed": result is report["baseline"],
                **{k: stats["per_layer"][k] for k in ("mean", "low", "high")},
                "average": [stats["average"][k] for k in ("mean", "low", "high")],
            }
        )
    return curves


def distance_stats(
    values: Tensor,
    pairwise: Tensor,
    metric: str,
    seed: int,
    length: int | None = None,
    seen: bool | None = None,
    split: str | None = None,
) -> DistanceStats:
    """values: [example, layer]; pairwise: [example, layer, head_A, head_B]."""
    head_matrix = pairwise.mean(0)  # [layer, head_A, head_B]
    visited = head_matrix
    if metric == "reference-code":  # the pairs that code visits: head_B < head_A
        heads_a, heads_b = head_matrix.shape[-2:]
        below = torch.ones(heads_a, heads_b, dtype=torch.bool).tril(-1)
        visited = head_matrix.masked_fill(~below, float("inf"))
    flat = visited.flatten(-2).argmin(-1)  # [layer]
    argmin = torch.stack([flat // head_matrix.shape[-1], flat % head_matrix.shape[-1]], dim=-1)
    return DistanceStats(
        length,
        seen,
        split,
        int(values.shape[0]),
        bootstrap_ci(values, N_RESAMPLES, CONFIDENCE, seed),
        bootstrap_ci(values.mean(1), N_RESAMPLES, CONFIDENCE, seed),
        head_matrix,
        argmin,
    )


# -- attended distance (probe distances) ------------------------------------------------------
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
        return {
            "weighting": self.weighting,
            "bimodality": self.bimodality,
            "mean": self.mean,
            "histogram": {"edges": self.histogram.edges.tolist(), "mass": self.histogram.mass.tolist()},
        }


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
        return {
            "run": self.run.to_json(),
            "task": self.task,
            "task_options": self.task_options,
            "n_examples": self.n_examples,
            "n_queries": self.n_queries,
            "skipped": self.skipped,
            "lengths": self.lengths,
            "weightings": {w: s.to_json() for w, s in self.stats.items()},
        }


@dataclass
class AttendedReport:
    """Every subject's attended-distance distributions, and where outputs about them belong."""

    results: list[AttendedResult]
    normalization: str
    lengths: str
    n_per_bucket: int
    seed: int
    bins: int
    task_folder: str = ""
    folder: Path | None = None  # beside the runs (probe.subjects.resolve.home)
    stem: str = ""  # the hf: models among the subjects, for output names (hf-gpt2)
    queries: str = "output"  # which queries count (probe.metrics.attended.Queries)

    name = "distances"  # its outputs' folder (probe.analysis.report.Report)

    @property
    def context(self) -> int | None:
        """T, the context code models were read at (windows at multiples of it); None for task runs."""
        return self.results[0].task_options.get("context") if self.results else None

    def to_json(self) -> dict[str, Any]:
        return {
            "normalization": self.normalization,
            "lengths": self.lengths,
            "n_per_bucket": self.n_per_bucket,
            "seed": self.seed,
            "bins": self.bins,
            "queries": self.queries,
            "runs": [r.to_json() for r in self.results],
        }

    def write(self, out_dir: str | Path) -> list[str]:
        """JSON, CSV and the histogram figure under ``out_dir`` (default place: ``folder / "distances"``), as
        `probe distances` writes them (``attended_distance[_reference-code][_<hf models>]``); the paths."""
        from probe.analysis.report import write_tables
        from probe.figures import attended_distance_figure, write_figure

        out_dir = Path(out_dir)
        stem = "attended_distance" + ("" if self.normalization == "text" else "_reference-code")
        stem += "" if self.queries == "output" else f"_{self.queries}"
        stem += f"_{self.stem}" if self.stem else ""
        written = write_tables(self, out_dir, stem)
        title = f"Normalized attended distance on {self.task_folder}, all layers and heads"
        title += "" if self.queries == "output" else ", the answer's queries (after the scratchpad)"
        written += write_figure(attended_distance_figure(self.series(), title), out_dir / stem)
        return [str(p) for p in written]

    def to_rows(self) -> list[dict[str, Any]]:
        """One CSV row per (run, weighting, bin)."""
        rows = []
        for result in self.results:
            for weighting, stats in result.stats.items():
                edges, mass = stats.histogram.edges.tolist(), stats.histogram.mass.tolist()
                for i, m in enumerate(mass):
                    rows.append(
                        {
                            "run": result.run.label,
                            "pe": result.run.pe,
                            "seed": result.run.seed,
                            "weighting": weighting,
                            "bin_low": edges[i],
                            "bin_high": edges[i + 1],
                            "mass": m,
                            "bimodality": stats.bimodality,
                        }
                    )
        return rows

    def series(self) -> list[dict[str, Any]]:
        """Inputs of ``probe.figures.attended_distance_figure``."""
        return attended_series([r.to_json() for r in self.results])


def attended_series(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inputs of ``probe.figures.attended_distance_figure`` from :meth:`AttendedResult.to_json` of each run (as
    `probe distances` saves them, so a saved report draws the same figure)."""
    return [
        {
            "label": r["run"]["label"],
            "pe": r["run"]["pe"],
            "histograms": {
                w: {"edges": s["histogram"]["edges"], "mass": s["histogram"]["mass"], "bimodality": s["bimodality"]}
                for w, s in r["weightings"].items()
            },
        }
        for r in runs
    ]


def query_key_weights(patterns: Tensor, output_start: Tensor, lengths: Tensor, weighting: str) -> Tensor:
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
    total = torch.zeros(distinct.shape, dtype=torch.float64, device=grid.device).index_add_(
        0, index, found.weight[kept]
    )
    return distinct.cpu(), total.cpu()


def attended_stats(grid: Tensor, weighting: str, normalization: str, bins: int) -> AttendedStats:
    """The distribution of d̄ held by a [query, key] weight grid: histogram, bimodality, mean."""
    distinct, total = _distribution(grid, normalization)
    return AttendedStats(
        weighting,
        histogram(distinct, total, bins=bins),
        float(bimodality_coefficient(distinct, total)),
        float((distinct * total).sum() / total.sum()),
        distinct,
        total,
    )
