"""The numbers docs/positions.md and docs/extrapolation.md quote for the main job's runs, rendered from what
bench/getting_started.py measured (``bench/results/getting_started_walk_cpu.json``): each page's marked blocks
(``<!-- name:begin -->`` ... ``<!-- name:end -->``) are these functions' output, never typed by hand;
tests/test_docs.py holds them equal.

Layers and streams are numbered from 0, as every command prints them: stream 0 is the embedding, stream s the
residual stream after layer s - 1.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from probe.models.registry import FIGURE_ORDER, PAPER_PES, PE_LABELS

DOCS = Path(__file__).resolve().parent.parent / "docs"
PES = [pe for pe in FIGURE_ORDER if pe in PAPER_PES]
Model = dict[str, Any]  # one run's compact `probe positions` result (getting_started.positions_model)


def _spread(values: list[float], digits: int, scale: float = 1.0) -> str:
    """Mean [lowest, highest] over the seeds; one number where they agree to the digits shown."""
    mean, low, high = (f"{scale * v:.{digits}f}" for v in (statistics.fmean(values), min(values), max(values)))
    return mean if low == high else f"{mean} [{low}, {high}]"


def _probe(model: Model, target: str, where: str, stream: int, measure: str = "r2") -> float:
    return model["probes"][f"{target}/{where}/{stream}"][measure]


def _beyond(model: Model) -> float:
    """Exact accuracy past the largest fitted position, on the stream that reads it best."""
    streams = range(model["n_layers"] + 1)
    return max(_probe(model, "position", "beyond", s, "accuracy") for s in streams)


def _sink(model: Model, lengths: str, layer: int, key: str = "share") -> float:
    return next(s[key] for s in model["sinks"] if s["lengths"] == lengths and s["first"] == 1 and s["layer"] == layer)


def _stream(s: int) -> str:
    return "embedding" if s == 0 else f"after layer {s - 1}"


Row = tuple[str, Callable[[list[Model]], str]]  # a label, and its cell from one PE's runs (one per seed)


def _over_seeds(measure: Callable[..., float], *args: Any, digits: int = 3, scale: float = 1.0) -> Callable:
    return lambda runs: _spread([measure(m, *args) for m in runs], digits, scale)


def _position_rows(every: list[Model]) -> list[Row]:
    """The positions table's rows, layers and streams from 0; ``every``: all runs (the rows' uniform shares)."""
    n_layers = every[0]["n_layers"]
    rows: list[Row] = []
    for where, name in (("heldout", "held out"), ("unseen", "unseen lengths")):
        for s in range(n_layers + 1):
            rows.append((f"position probe R², {name}: {_stream(s)}", _over_seeds(_probe, "position", where, s)))
    rows += [
        ("after layer 0: MAE held out (positions)", _over_seeds(_probe, "position", "heldout", 1, "mae", digits=2)),
        (
            "after layer 0: exact accuracy held out (%)",
            _over_seeds(_probe, "position", "heldout", 1, "accuracy", digits=1, scale=100),
        ),
        ("exact accuracy beyond the fitted positions, best stream (%)", _over_seeds(_beyond, digits=1, scale=100)),
        ("distance to `<sep>`, after layer 0: R² held out", _over_seeds(_probe, "landmark_distance", "heldout", 1)),
        ("distance to `<sep>`, after layer 0: R² unseen", _over_seeds(_probe, "landmark_distance", "unseen", 1)),
    ]
    rows += [
        (f"head logits, mean share: {k}", _over_seeds(_share, k, digits=2)) for k in ("relative", "absolute", "content")
    ]
    rows.append((f"heads relative / absolute / content (of {n_layers * every[0]['n_heads']}), per seed", _kinds))
    for lengths in ("seen", "unseen"):
        uniform = _range([_sink(m, lengths, 0, "uniform") for m in every], 3)
        for layer in range(n_layers):
            label = f"first-token share, layer {layer}, {lengths} (uniform {uniform})"
            rows.append((label, _over_seeds(_sink, lengths, layer)))
    for layer in range(n_layers):
        label = f"attention-output variance, slope of log Var / log t, layer {layer}"
        rows.append((label, _over_seeds(_slope, layer, digits=2)))
    return rows


def _share(model: Model, share: str) -> float:
    return model["summary"]["shares"][share]


def _slope(model: Model, layer: int) -> float:
    return model["variance_slope"][layer]


def _kinds(models: list[Model]) -> str:
    """Heads relative / absolute / content at each seed (one triple where every seed agrees)."""
    triples = [" / ".join(str(m["summary"]["kinds"][k]) for k in ("relative", "absolute", "content")) for m in models]
    return triples[0] if len(set(triples)) == 1 else ", ".join(triples)


def _range(values: list[float], digits: int) -> str:
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def positions_block(result: dict[str, Any]) -> str:
    """docs/positions.md's table: `probe positions` on the main job's runs, mean [lowest, highest] over seeds."""
    runs = result["positions"]
    every = [m for pe in PES for m in runs[pe]]
    seeds = ", ".join(map(str, result["seeds"]))
    lines = [
        f"Mean [lowest, highest] over seeds {seeds} of the main job's runs (`tiny`: {every[0]['n_layers']} layers × "
        f"{every[0]['n_heads']} heads), one number where the seeds agree to its digits; "
        f"{_range([m['n_inputs']['seen'] for m in every], 0)} seen-length and "
        f"{_range([m['n_inputs']['unseen'] for m in every], 0)} unseen-length examples a run, 10 per length bucket; "
        "measured by `python bench/getting_started.py` (`probe positions --seed N` at each seed).",
        "",
        "| | " + " | ".join(PE_LABELS.get(pe, pe) for pe in PES) + " |",
        "|---|" + "---|" * len(PES),
    ]
    for label, cell in _position_rows(every):
        lines.append(f"| {label} | " + " | ".join(cell(runs[pe]) for pe in PES) + " |")
    return "\n".join(lines) + "\n"


def _entropy(e: dict[str, Any], share: bool = False) -> str:
    """Seen → unseen: the mean entropy (nats), or its share of uniform causal attention's."""
    if share:
        return f"{e['seen']['mean'] / e['seen']['uniform']:.2f} → {e['unseen']['mean'] / e['unseen']['uniform']:.2f}"
    return f"{e['seen']['mean']:.3f} → {e['unseen']['mean']:.3f}"


def distraction_block(result: dict[str, Any]) -> str:
    """docs/extrapolation.md's entropy table: the seed-0 runs untouched and under each intervention."""
    runs = result["distraction"]
    specs = [s for s in runs if s != "untouched"]
    uniform = runs["untouched"][PES[0]]
    lines = [
        "Mean attention-row entropy (nats, over queries, heads and layers) of the seed-0 runs, seen → unseen "
        "lengths, and as a share of uniform causal attention's ("
        f"{uniform['seen']['uniform']:.3f} → {uniform['unseen']['uniform']:.3f} nats); `probe positions --seed 0`, "
        "untouched and `--intervene` each of " + ", ".join(f"`{s}`" for s in specs) + ":",
        "",
        "| run | entropy | share of uniform | " + " | ".join(f"under {s}" for s in specs) + " |",
        "|---|---|---|" + "---|" * len(specs),
    ]
    for pe in PES:
        cells = [_entropy(runs["untouched"][pe]), _entropy(runs["untouched"][pe], share=True)]
        cells += [_entropy(runs[s][pe]) for s in specs]
        lines.append(f"| {PE_LABELS.get(pe, pe)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


FAMILIES = (
    ("none", "untouched"),
    ("log-length", "log-length"),
    ("cap", "cap"),
    ("rope", "RoPE scaling"),
    ("temperature", "temperature (tuned)"),
    ("window", "window (tuned)"),
    ("head-temperature", "per-head temperature (tuned)"),
)
"""The table's columns: a family of interventions, and its heading."""


def _outcome_cell(run: dict[str, Any], outcome: dict[str, Any] | None, named: bool) -> str:
    """``OOD [interval] (IID)`` in %, bold where it is the run's best on validation that keeps IID; the value
    where the column's heading does not say it."""
    if outcome is None:
        return "–"
    test = outcome["test"]
    iid = f"{100 * outcome['iid']:.1f}" + (", dropped" if outcome["iid_dropped"] else "")
    cell = f"{100 * test['mean']:.1f} [{100 * test['low']:.1f}, {100 * test['high']:.1f}] ({iid})"
    if outcome["kind"] != "none" and run["best"] == outcome["shown"]:
        cell = f"**{cell}**"
    return cell if named else f"{cell}: `{outcome['shown']}`"


def extrapolation_block(result: dict[str, Any]) -> str:
    """docs/extrapolation.md's table of `probe extrapolate` on the main job's seed-0 runs: per run and family of
    interventions, OOD exact match with its interval and IID, the run's best (on validation) that keeps IID in bold."""
    runs = result["extrapolate_runs"]
    by_family = [{o["family"]: o for o in run["outcomes"]} for run in runs]
    columns = [(f, h) for f, h in FAMILIES if any(f in outcomes for outcomes in by_family)]
    headings, named = [], {}
    for family, heading in columns:  # log-length and cap, the same on every run, are named in their heading
        shown = {outcomes[family]["shown"] for outcomes in by_family if family in outcomes}
        named[family] = family == "none" or (family in ("log-length", "cap") and len(shown) == 1)
        headings.append(f"`{shown.pop()}`" if named[family] and family != "none" else heading)
    first = runs[0]
    base = first["outcomes"][0]["test"]
    lines = [
        "`probe extrapolate` on the main job's seed-0 runs (copy's count variant, `tiny`; "
        f"L = {first['trained_length']} tokens; tuned on {first['validation']}), measured by "
        "`python bench/getting_started.py`. OOD exact match in % "
        f"on the {base['n']:,} unseen-length test examples the validation slice leaves out, [95% bootstrap interval], "
        "(IID exact match in %; dropped: more than 5 points below untouched); in bold the run's best that keeps IID, "
        "chosen on the validation slice:",
        "",
        "| run | " + " | ".join(headings) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for run, outcomes in zip(runs, by_family):
        cells = [_outcome_cell(run, outcomes.get(f), named[f]) for f, _ in columns]
        lines.append(f"| {run['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
