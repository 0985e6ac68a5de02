"""A study's `--dry-run` price against the wall time its scenarios then took, scenario by scenario.

    probe reproduce --scale section3 --task all --seeds 3 --dry-run --json > price.json   # before a sitting
    python bench/study_price.py price.json                                               # after it

The dry run's JSON names every run it priced (``todo``: path, steps left, seconds) and each scenario's price
(``scenarios``: its runs side by side, one scenario at a time, as the study trains them). This script reads
those runs' folders once they have trained and been evaluated: a scenario's measured wall runs from its
first run's start (its first log line, less one logging interval) to its last evaluation's file, less every
pause in its training: a span over ``--pause`` seconds (20 by default; its runs log every few seconds) in
which none of them logged, a stopped study or a suspended machine, reported beside it. Only scenarios
priced whole (every run from step 0) and landed whole (every run evaluated) are compared. Writes
``bench/results/study_price_<name>_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.analysis.eval_report import EVAL  # noqa: E402
from probe.training.loop import METRICS  # noqa: E402


def run_times(folder: Path) -> tuple[float, float, list[float]] | None:
    """(start, end of evaluation, every log line's time) of a trained and evaluated run, else None."""
    metrics, evaluation = folder / METRICS, folder / EVAL
    if not metrics.is_file() or not evaluation.is_file():
        return None
    times = [json.loads(line)["time"] for line in metrics.read_text().splitlines() if line.strip()]
    if len(times) < 2:
        return None
    interval = statistics.median(b - a for a, b in zip(times, times[1:]))
    return times[0] - interval, evaluation.stat().st_mtime, times


def scenario_wall(folders: list[Path], pause: float) -> dict[str, float] | None:
    """Measured wall of one scenario's runs: training span, evaluation span, pauses; None until all landed."""
    spans = [run_times(folder) for folder in folders]
    if any(span is None for span in spans):
        return None
    start, trained = min(s[0] for s in spans), max(s[2][-1] for s in spans)
    landed = max(s[1] for s in spans)
    events = sorted({start, *(t for s in spans for t in s[2])})
    paused = sum(gap for a, b in zip(events, events[1:]) if (gap := b - a) > pause)
    return {
        "training_seconds": trained - start - paused,
        "evaluation_seconds": max(0.0, landed - trained),
        "paused_seconds": paused,
        "wall_seconds": landed - start - paused,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("price", help="the JSON `probe reproduce ... --dry-run --json` printed before the sitting")
    parser.add_argument("--name", default="section3", help="the result's name (default section3)")
    parser.add_argument(
        "--pause", type=float, default=20.0, help="a gap in every run's log longer than this is a pause"
    )
    args = parser.parse_args()
    load = os.getloadavg()
    try:
        price = json.loads(Path(args.price).read_text())
        price["todo"], price["scenarios"]  # noqa: B018 (what a price file must hold)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{args.price}: not the JSON of `probe reproduce ... --dry-run --json` ({error!r})") from None
    todo: dict[str, list[dict]] = {}
    for entry in price["todo"]:
        todo.setdefault(Path(entry["path"]).parent.parent.name, []).append(entry)
    rows: dict[str, dict] = {}
    for scenario, entries in todo.items():
        fresh = all(_steps(Path(e["path"])) == e["steps_left"] for e in entries)
        measured = scenario_wall([Path(e["path"]) for e in entries], args.pause) if fresh else None
        if measured is None:
            continue
        priced = price["scenarios"][scenario]
        rows[scenario] = {
            "priced_seconds": priced,
            **measured,
            "measured_over_priced": measured["wall_seconds"] / priced,
        }
    priced = sum(r["priced_seconds"] for r in rows.values())
    measured = sum(r["wall_seconds"] for r in rows.values())
    payload = {
        **header("study_price", "a study's --dry-run price against the wall time its scenarios took", "cpu", load),
        "price_file": str(args.price),
        "priced_in_all_seconds": price["estimated_training_seconds"],
        "scenarios": rows,
        "compared": {
            "scenarios": len(rows),
            "priced_seconds": priced,
            "measured_seconds": measured,
            "measured_over_priced": measured / priced if priced else None,
        },
    }
    path = write_json(f"study_price_{args.name}", "cpu", payload)
    for scenario, row in rows.items():
        print(
            f"{scenario}: priced {row['priced_seconds'] / 60:.1f} min, measured {row['wall_seconds'] / 60:.1f} min "
            f"({row['measured_over_priced']:.2f}x; evaluation {row['evaluation_seconds']:.0f} s, "
            f"paused {row['paused_seconds']:.0f} s)"
        )
    if rows:
        print(
            f"{len(rows)} scenario{'s' * (len(rows) != 1)}: priced {priced / 60:.1f} min, "
            f"measured {measured / 60:.1f} min "
            f"({measured / priced:.2f}x)"
        )
    print(f"wrote {path}")


def _steps(folder: Path) -> int | None:
    """The steps a run folder was asked to train (its config), or None before it has one."""
    config = folder / "config.json"
    if not config.is_file():
        return None
    return int(json.loads(config.read_text())["training"]["steps"])


if __name__ == "__main__":
    main()
