"""The walk of docs/getting-started.md, run on the main job's runs: every command after `probe train` as a
newcomer types it, and what it shows, per seed, so the page quotes measured numbers with their spread.

    python bench/getting_started.py --checkpoints checkpoints --docs

Reads the main job's runs (``probe.presets.MAIN_JOB``: every paper PE at ``--seeds``, NoPE at the next seed
for NoPE') under ``--checkpoints`` (train the extra seeds with ``probe train --seed 1 --seed 2``) and runs, as
subprocesses of this Python, ``probe compare nope``, ``probe distances`` and ``probe positions`` at each seed,
``probe theorem``, ``probe extrapolate`` on the seed-0 runs, and ``probe positions --intervene`` on them
(attention's entropy under a temperature and log-length), each with ``--json``. Writes
``bench/results/getting_started_walk_cpu.json`` (the numbers and each command's wall time); ``--docs`` writes
the walk's tables into docs/getting-started.md and those of these runs into docs/positions.md and
docs/extrapolation.md (bench/docs_pages.py renders them); ``--reuse`` renders from the results file without
computing; ``--keep DIR`` keeps each command's JSON there, so an interrupted run picks up where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, fill_block, write_json  # noqa: E402
from docs_pages import DOCS, distraction_block, extrapolation_block, positions_block  # noqa: E402

from probe.models.registry import FIGURE_ORDER, PAPER_PES, PE_LABELS  # noqa: E402
from probe.presets import MAIN_JOB  # noqa: E402
from probe.runs.folders import run_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting-started.md"
PES = [pe for pe in FIGURE_ORDER if pe in PAPER_PES]


def probe_json(args: list[str], timings: dict[str, float], keep: Path | None, name: str) -> dict[str, Any]:
    """``probe ARGS --json`` in a child process: its JSON (stdout), its wall time kept under its command. With
    ``keep``, the JSON and its time are kept there as ``name``.json, and a rerun reads them instead of running."""
    saved = keep / f"{name}.json" if keep else None
    clock = args[0] + (" --intervene" if "--intervene" in args else "")
    if saved and saved.is_file():
        kept = json.loads(saved.read_text())
        timings[clock] = timings.get(clock, 0.0) + kept["wall_seconds"]
        return kept["report"]
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "probe.cli", *args, "--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - began
    timings[clock] = timings.get(clock, 0.0) + seconds
    if done.returncode not in (0, 1):  # theorem exits 1 when a claim fails: a result, not a crash
        sys.exit(f"probe {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if saved:
        saved.write_text(json.dumps({"wall_seconds": seconds, "report": report}))
    return report


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


DISTRACTION = ("temperature=0.8", "log-length", "temperature=0.6")
"""The interventions docs/extrapolation.md reads attention's entropy under (`probe positions --intervene`)."""


def walk(root: Path, seeds: list[int], scratch: Path, keep: Path | None = None) -> dict[str, Any]:
    """Each command's numbers per PE, over ``seeds`` (extrapolation and entropy under interventions: seed 0)."""
    timings: dict[str, float] = {}
    on = ["--checkpoints", str(root)]
    compare: dict[str, list[float]] = {}
    distances: dict[str, list[float]] = {}
    positions: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        args = ["compare", "nope", "--seed", str(seed), *on, "--out", str(scratch / f"c{seed}")]
        report = probe_json(args, timings, keep, f"compare-seed{seed}")
        for c in report["comparisons"]:
            compare.setdefault(c["b"]["pe"], []).append(c["overall"]["average"]["mean"])
        if report.get("baseline"):  # NoPE against NoPE': NoPE's row
            compare.setdefault("nope", []).append(report["baseline"]["overall"]["average"]["mean"])
        args = ["distances", "--seed", str(seed), *on, "--out", str(scratch / f"d{seed}")]
        report = probe_json(args, timings, keep, f"distances-seed{seed}")
        for run in report["runs"]:
            distances.setdefault(run["run"]["pe"], []).append(run["weightings"]["argmax"]["bimodality"])
        args = ["positions", "--seed", str(seed), *on, "--out", str(scratch / f"p{seed}")]
        for model in probe_json(args, timings, keep, f"positions-seed{seed}")["models"]:
            positions.setdefault(model["run"]["pe"], []).append(positions_model(model))
    theorem = probe_json(["theorem"], timings, keep, "theorem")
    extrapolation = extrapolate_seed0(root, scratch, keep, timings)
    distraction = {"untouched": {pe: runs[0]["entropy"] for pe, runs in positions.items()}}
    for spec in DISTRACTION:
        args = ["positions", "--seed", "0", *on, "--out", str(scratch / f"p0+{spec}"), "--intervene", spec]
        report = probe_json(args, timings, keep, f"positions-seed0+{spec}")
        distraction[spec] = {model["run"]["pe"]: positions_model(model)["entropy"] for model in report["models"]}
    return {
        "seeds": seeds,
        "compare_d_nope": {label: spread(v) for label, v in compare.items()},
        "distances_bimodality": {pe: spread(v) for pe, v in distances.items()},
        "positions_heldout_r2": {
            pe: spread([m["summary"]["best_probe"]["heldout"]["r2"] for m in v]) for pe, v in positions.items()
        },
        "positions": positions,
        "theorem": theorem,
        **extrapolation,
        "distraction": distraction,
        "wall_seconds": timings,
    }


def extrapolate_seed0(root: Path, scratch: Path, keep: Path | None, timings: dict[str, float]) -> dict[str, Any]:
    """`probe extrapolate` on the seed-0 runs: the result file's ``extrapolate`` and ``extrapolate_runs``."""
    seed0 = [str(run_dir(root, MAIN_JOB["task"], pe, 0, MAIN_JOB["options"])) for pe in PES]
    args = ["extrapolate", *seed0, "--checkpoints", str(root), "--out", str(scratch / "x")]
    report = probe_json(args, timings, keep, "extrapolate-seed0")
    return {
        "extrapolate": _extrapolation(report),
        "extrapolate_runs": [extrapolation_run(run) for run in report["runs"]],
    }


def positions_model(model: dict[str, Any]) -> dict[str, Any]:
    """What the docs read of one run's `probe positions` JSON: every probe's scores, the heads' shares and
    kinds, the first token's share, the variance slopes, the mean attention entropy beside uniform's."""
    keys = ("r2", "mae", "accuracy")
    scored = [p for p in model["probes"] if p["set"] != "fit"]
    return {
        "n_layers": model["n_layers"],
        "n_heads": model["n_heads"],
        "n_inputs": model["n_inputs"],
        "probes": {f"{p['target']}/{p['set']}/{p['stream']}": {k: p[k] for k in keys} for p in scored},
        "summary": model["summary"],
        "sinks": [{k: s[k] for k in ("lengths", "first", "layer", "share", "uniform")} for s in model["sinks"]],
        "variance_slope": model["variance"]["slope"],
        "entropy": {w: {k: model["entropy"][w][k] for k in ("mean", "uniform")} for w in ("seen", "unseen")},
    }


def extrapolation_run(run: dict[str, Any]) -> dict[str, Any]:
    """What the docs read of one run in `probe extrapolate`'s JSON: L, the validation slice, what was skipped,
    each intervention as printed with its IID, its OOD and interval, and what its tuning tried."""
    keys = ("shown", "family", "kind", "iid", "iid_change", "iid_dropped", "test", "tuning", "valid")
    return {
        **{k: run[k] for k in ("label", "pe", "seed", "trained_length", "validation", "skipped", "best")},
        "outcomes": [{k: o.get(k) for k in keys} for o in run["outcomes"]],
    }


def _extrapolation(report: dict[str, Any]) -> dict[str, Any]:
    """Per run: untouched OOD, and the best intervention that keeps IID (the report's own choice, made on the
    validation slice)."""
    out = {}
    for run in report["runs"]:
        best = next((o for o in run["outcomes"] if run["best"] and o["shown"] == run["best"]), None)
        out[run["pe"]] = {
            "untouched": run["outcomes"][0]["test"]["mean"],
            "best": run["best"],
            "best_ood": None if best is None else best["test"]["mean"],
        }
    return out


def _cell(s: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    if s["n"] == 1:
        return f"{scale * s['mean']:.{digits}f}"
    return f"{scale * s['mean']:.{digits}f} [{scale * s['min']:.{digits}f}, {scale * s['max']:.{digits}f}]"


def _theorem_line(theorem: dict[str, Any]) -> str:
    claims = theorem["claims"]
    held = sum(c["passed"] for c in claims)
    worst = max(c["max_error"] / c["tolerance"] for c in claims if c["tolerance"]) if claims else 0.0
    return (
        f"{held} of {len(claims)} checks hold (every claim of Theorems 1 and 2, float32 and float64, lengths up to "
        f"{theorem['max_length']}); the largest error is {worst:.2g} of its tolerance; exit status "
        f"{0 if theorem['passed'] else 1}."
    )


def docs_block(result: dict[str, Any]) -> str:
    seeds = ", ".join(map(str, result["seeds"]))
    times = result["wall_seconds"]
    rows = ["| PE | D(NoPE, PE), all lengths | bimodality of attended distance | position probe R², held out |"]
    rows += ["|---|---|---|---|"]
    label_of = {pe: PE_LABELS.get(pe, pe) for pe in PES}
    for pe in PES:
        d = result["compare_d_nope"].get(pe)
        cells = [_cell(d, digits=4) if d else "–", _cell(result["distances_bimodality"][pe], digits=2)]
        cells.append(_cell(result["positions_heldout_r2"][pe], digits=2))
        rows.append(f"| {label_of[pe]} | " + " | ".join(cells) + " |")
    x = result["extrapolate"]
    xrows = ["| PE | OOD untouched (%) | best on validation that keeps IID | its OOD (%) |", "|---|---|---|---|"]
    for key, v in x.items():
        best = v["best"] or "none"
        ood = "–" if v["best_ood"] is None else f"{100 * v['best_ood']:.1f}"
        xrows.append(f"| {PE_LABELS.get(key, key)} | {100 * v['untouched']:.1f} | {best} | {ood} |")
    return "\n".join(
        [
            f"Mean [lowest, highest] over seeds {seeds} of the main job's runs, measured by "
            "`python bench/getting_started.py` (NoPE's row of D is NoPE against NoPE', the seed baseline; "
            "bimodality 5/9 = uniform, higher = near and far; R² of the best stream's linear probe on held-out "
            f"seen-length examples). Wall time on a 2-core CPU: compare {times['compare']:.0f} s, distances "
            f"{times['distances']:.0f} s, positions {times['positions']:.0f} s for the "
            f"{len(result['seeds'])} seeds; theorem {times['theorem']:.0f} s; extrapolate {times['extrapolate']:.0f} s "
            "on seed 0.",
            "",
            *rows,
            "",
            f"`probe theorem`: {_theorem_line(result['theorem'])}",
            "",
            "`probe extrapolate` on the seed-0 runs (OOD exact match on unseen lengths, teacher forced):",
            "",
            *xrows,
            "",
        ]
    )


def blocks(result: dict[str, Any]) -> list[tuple[Path, str, str]]:
    """(page, block name, its text) of every block of measured numbers the docs hold."""
    return [
        (PAGE, "walk", docs_block(result)),
        (DOCS / "positions.md", "positions", positions_block(result)),
        (DOCS / "extrapolation.md", "extrapolate-default", extrapolation_block(result)),
        (DOCS / "extrapolation.md", "distraction", distraction_block(result)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", default="checkpoints", help="where the main job's runs are")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the first is the one analysed alone")
    parser.add_argument("--docs", action="store_true", help="write the measured blocks into the docs' pages")
    parser.add_argument("--reuse", action="store_true", help="the tables from the last results file, run nothing")
    parser.add_argument("--keep", metavar="DIR", help="keep each command's JSON in DIR; a rerun reads it from there")
    parser.add_argument(
        "--only-extrapolate", action="store_true", help="run `probe extrapolate` again; the rest from the results file"
    )
    args = parser.parse_args()
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    if args.reuse or args.only_extrapolate:
        result = json.loads((RESULTS / "getting_started_walk_cpu.json").read_text())
    if args.only_extrapolate:
        timings: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as scratch:
            result |= extrapolate_seed0(Path(args.checkpoints), Path(scratch), keep, timings)
        result["wall_seconds"]["extrapolate"] = timings["extrapolate"]
        write_json("getting_started_walk", "cpu", result)
    elif not args.reuse:
        with tempfile.TemporaryDirectory() as scratch:
            result = walk(Path(args.checkpoints), args.seeds, Path(scratch), keep)
        write_json("getting_started_walk", "cpu", result)
    for page, name, text in blocks(result):
        print(text)
        if args.docs:
            fill_block(page, name, text)
            print(f"wrote {name} into {page}")


if __name__ == "__main__":
    main()
