"""A study's `--dry-run` price against the time its runs and the sitting then took.

    probe reproduce --scale section3 --task all --seeds 3 --dry-run --json > price.json   # before a sitting
    python bench/study_price.py price.json                                               # after it

The dry run's JSON names every run it priced (``todo``: path, steps left, seconds), each scenario's share and
the sitting's wall (a phase's runs one queue for its ``jobs`` workers, scenario by scenario, as the study
trains them). Once the runs have trained and been evaluated this script compares two things:

- per part (a scenario at a seed), its runs' priced seconds against the ``train_seconds`` each run recorded
  (checkpoint selection included in both): how well the price knows a run;
- the sitting, over the parts that landed whole: the wall the price gives those runs as one queue against
  the span from their first start (a run's first log line, less one logging interval) to their last
  evaluation's file, less every pause (a span over ``--pause`` seconds in which no run logged:
  a stopped study or a suspended machine). The evaluations, beside the next scenario's training, are in both
  where the price has them (``evaluation_seconds``, over the workers' cores); an older price left them out.

Only parts priced whole (every run from step 0) and landed whole (every run evaluated) are compared.
Writes ``bench/results/study_price_<name>_cpu.json``.
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
from probe.studies.progress import PAUSE_FACTOR, PAUSE_FLOOR  # noqa: E402
from probe.studies.sweep import queued_wall_seconds  # noqa: E402
from probe.training.loop import METRICS  # noqa: E402


def log_times(folder: Path) -> list[float]:
    """Every log line's time of a run (none before it has logged)."""
    metrics = folder / METRICS
    if not metrics.is_file():
        return []
    return [json.loads(line)["time"] for line in metrics.read_text().splitlines() if line.strip()]


def run_times(folder: Path) -> tuple[float, float, list[float]] | None:
    """(start, end of evaluation, every log line's time) of a trained and evaluated run, else None."""
    evaluation = folder / EVAL
    times = log_times(folder)
    if not evaluation.is_file() or len(times) < 2:
        return None
    interval = statistics.median(b - a for a, b in zip(times, times[1:]))
    return times[0] - interval, evaluation.stat().st_mtime, times


def span(parts: list[list[Path]], pause: float | None, others: list[Path] = ()) -> dict[str, float] | None:
    """Measured span of ``parts`` (each the run folders of a scenario at a seed), first start to last
    evaluation, with its pauses taken out; None until all landed. A pause is a gap longer than ``pause`` in the
    log of every run of the sitting (``others`` too: runs still training beside the last evaluation) that no
    evaluation covers (a part's, from its runs' last log line to its last evaluation file); ``pause`` None:
    the study's own rule, :data:`PAUSE_FACTOR` times the usual spacing of log lines, at least :data:`PAUSE_FLOOR`."""
    times = [[run_times(folder) for folder in part] for part in parts]
    if any(t is None for part in times for t in part):
        return None
    flat = [t for part in times for t in part]
    start, landed = min(t[0] for t in flat), max(t[1] for t in flat)
    evaluating = [(max(t[2][-1] for t in part), max(t[1] for t in part)) for part in times]
    logs = [t[2] for t in flat] + [log_times(folder) for folder in others]
    logged = (s for log in logs for s in log if start <= s <= landed)
    events = sorted({start, landed, *logged})
    if pause is None:  # the study's own rule (probe.studies.progress): many times the usual spacing
        pause = max(PAUSE_FLOOR, PAUSE_FACTOR * statistics.median(b - a for a, b in zip(events, events[1:])))
    paused = sum(
        b - a
        for a, b in zip(events, events[1:])
        if b - a > pause and not any(a < end and b > begin for begin, end in evaluating)
    )
    return {"wall_seconds": landed - start - paused, "paused_seconds": paused}


def train_seconds(folder: Path) -> float:
    """The training seconds a run recorded (its config's metrics), checkpoint selection included."""
    return float(json.loads((folder / "config.json").read_text())["metrics"]["train_seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("price", help="the JSON `probe reproduce ... --dry-run --json` printed before the sitting")
    parser.add_argument("--name", default="section3", help="the result's name (default section3)")
    parser.add_argument(
        "--pause",
        type=float,
        help="a gap in every run's log longer than this is a pause (default: the study's own rule, "
        f"{PAUSE_FACTOR} times the usual spacing of log lines, at least {PAUSE_FLOOR:.0f} s)",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    try:
        price = json.loads(Path(args.price).read_text())
        price["todo"], price["jobs"]  # noqa: B018 (what a price file must hold)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{args.price}: not the JSON of `probe reproduce ... --dry-run --json` ({error!r})") from None
    todo: dict[str, list[dict]] = {}
    for entry in price["todo"]:
        path = Path(entry["path"])
        todo.setdefault(f"{path.parent.parent.name} {path.name}", []).append(entry)  # a part: scenario and seed
    rows: dict[str, dict] = {}
    for scenario, entries in todo.items():
        folders = [Path(e["path"]) for e in entries]
        fresh = all(_steps(folder) == e["steps_left"] for folder, e in zip(folders, entries))
        if not fresh or span([folders], args.pause) is None:
            continue
        priced, measured = sum(e["seconds"] for e in entries), sum(train_seconds(f) for f in folders)
        rows[scenario] = {
            "priced_run_seconds": priced,
            "run_seconds": measured,
            "measured_over_priced": measured / priced,
        }
    compared = [e for scenario in rows for e in todo[scenario]]
    sitting = None
    if compared:
        first = [price.get("seed0_first", False) and Path(e["path"]).name == "seed0" for e in compared]
        order = sorted(range(len(compared)), key=lambda i: not first[i])
        priced_wall = (
            queued_wall_seconds([compared[i]["seconds"] for i in order], [first[i] for i in order], price["jobs"])
            + sum(e.get("evaluation_seconds", 0.0) for e in compared) / price["jobs"]
        )
        parts = [[Path(e["path"]) for e in todo[scenario]] for scenario in rows]
        others = [Path(e["path"]) for scenario in todo if scenario not in rows for e in todo[scenario]]
        measured = span(parts, args.pause, others)
        sitting = {
            "priced_wall_seconds": priced_wall,
            **measured,
            "measured_over_priced": measured["wall_seconds"] / priced_wall,
        }
    payload = {
        **header(
            "study_price", "a study's --dry-run price against the time its runs and the sitting took", "cpu", load
        ),
        "price_file": str(args.price),
        "priced_in_all_seconds": price["estimated_training_seconds"],
        "jobs": price["jobs"],
        "scenarios": rows,
        "sitting": sitting,
    }
    path = write_json(f"study_price_{args.name}", "cpu", payload)
    for scenario, row in rows.items():
        print(
            f"{scenario}: runs priced {row['priced_run_seconds'] / 60:.1f} min, trained "
            f"{row['run_seconds'] / 60:.1f} min ({row['measured_over_priced']:.2f}x)"
        )
    if sitting:
        print(
            f"{len(rows)} part{'s' * (len(rows) != 1)} as one queue on {price['jobs']} workers: priced "
            f"{sitting['priced_wall_seconds'] / 60:.1f} min, measured {sitting['wall_seconds'] / 60:.1f} min "
            f"({sitting['measured_over_priced']:.2f}x; paused {sitting['paused_seconds']:.0f} s)"
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
