"""How steady a `--dry-run` price's throughput measurement is, and what it leaves out.

    python bench/price_noise.py                                  # the Section 3 scenarios of rows ~64
    python bench/price_noise.py --task scan --task pcfg --repeats 3

A price times a few real training steps of a run (``probe.studies.sweep.cost.measure_tokens_per_second``)
and divides each run's tokens by that speed. On this 2-core machine, a price of SCAN's
seeds 1 and 2 came out 1.34x under the wall they took (``study_price_section3_s9_cpu.json``). This
benchmark measures the measurement. Two worker processes (one torch thread each, as a study's runs) hold
one run of each scenario; each turn measures one scenario at one ``--steps`` setting either in one worker
while the other waits (``alone``, as a price measures) or in both at once (``paired``, as a study trains
on 2 cores). Each repeat takes every turn once, in an order rotated by one per repeat, so the numbers of a
repeat saw about the same load. Reported per scenario, setting and steps: each measurement, the median and
the spread (max / min); per setting and steps, how far the scenarios' medians lie apart (a price shares one
measurement between scenarios whose rows are of a width, ``row_class``: that spread is what sharing adds);
and per repeat the median over every turn, which shows the host's own drift. Writes
``bench/results/price_noise_cpu.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

SCENARIOS = ("scan", "summation", "lego", "sorting")  # rows of 54-177 tokens at `tiny`
SETTINGS = ("alone", "paired")


def study_runs(tasks: list[str], pe: str, root: Path) -> dict:
    """One run of each scenario of ``tasks`` (a task may hold several: sorting's two variants)."""
    from probe.studies.reproduce import plan

    picked = {}
    for run in plan("section3", root, seeds=1, tasks=tasks, steps=4000):
        if run.config.pe == pe:
            picked.setdefault(run.path.parent.parent.name, run)
    return picked


def worker(connection, tasks: list[str], pe: str, root: str) -> None:
    """Measure the scenario and steps asked for, as a price does, until asked for nothing."""
    from probe.studies.sweep.cost import batch_geometry, measure_tokens_per_second
    from probe.training.bookkeeping import TRAIN_THREADS

    runs = study_runs(tasks, pe, Path(root))
    tokens = {name: batch_geometry(run)[0] for name, run in runs.items()}
    connection.send("ready")
    while ask := connection.recv():
        name, steps = ask
        connection.send(measure_tokens_per_second(runs[name], "cpu", steps, TRAIN_THREADS, tokens[name]))


def measure(workers: list, names: list[str], steps_settings: list[int], repeats: int) -> tuple[dict, list[float]]:
    """Every (setting, scenario, steps) turn once a repeat, rotated: tokens/s by setting, scenario and steps,
    and each repeat's median over its turns."""
    turns = [(setting, name, steps) for setting in SETTINGS for name in names for steps in steps_settings]
    speeds = {s: {n: {k: [] for k in steps_settings} for n in names} for s in SETTINGS}
    by_repeat = []
    for repeat in range(repeats):
        this_repeat = []
        for setting, name, steps in turns[repeat % len(turns) :] + turns[: repeat % len(turns)]:
            busy = workers if setting == "paired" else workers[:1]
            for connection in busy:
                connection.send((name, steps))
            measured = [connection.recv() for connection in busy]
            speeds[setting][name][steps] += measured
            this_repeat += measured
            print(f"repeat {repeat} {setting} {name} {steps} steps: {measured[0]:,.0f} tokens/s", flush=True)
        by_repeat.append(statistics.median(this_repeat))
    return speeds, by_repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", action="append", help=f"a Section 3 task (default: {', '.join(SCENARIOS)})")
    parser.add_argument("--steps", type=int, nargs="+", default=[5, 20], help="timed steps a measurement")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--pe", default="nope")
    args = parser.parse_args()
    if args.repeats < 1 or min(args.steps) < 1:
        sys.exit(f"--repeats and --steps must be at least 1, got {args.repeats} and {args.steps}")
    if (os.cpu_count() or 1) < 2:
        sys.exit("pairing two measurements needs 2 cores")
    load = os.getloadavg()

    from probe.errors import ProbeError
    from probe.studies.sweep.cost import batch_geometry, row_class

    tasks = list(args.task or SCENARIOS)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            runs = study_runs(tasks, args.pe, Path(scratch))
        except ProbeError as error:
            sys.exit(str(error))
        if not runs:
            sys.exit(f"no run with PE {args.pe!r} in those scenarios")
        geometry = {name: batch_geometry(run) for name, run in runs.items()}
        context = mp.get_context("spawn")
        pipes = [context.Pipe() for _ in range(2)]
        for _, child in pipes:
            context.Process(target=worker, args=(child, tasks, args.pe, scratch), daemon=True).start()
        workers = [parent for parent, _ in pipes]
        for connection in workers:
            connection.recv()
        speeds, by_repeat = measure(workers, list(runs), args.steps, args.repeats)
        for connection in workers:
            connection.send(None)

    def summary(values: list[float]) -> dict:
        return {"each": values, "median": statistics.median(values), "max_over_min": max(values) / min(values)}

    scenarios = {
        name: {
            "batch_tokens": geometry[name][0],
            "row_width": geometry[name][1],
            "row_class": row_class(geometry[name][1]),
            "tokens_per_second": {s: {str(k): summary(speeds[s][name][k]) for k in args.steps} for s in SETTINGS},
        }
        for name in runs
    }
    medians = {(s, k): [statistics.median(speeds[s][n][k]) for n in runs] for s in SETTINGS for k in args.steps}
    paired_over_alone = [
        statistics.median(speeds["paired"][n][k]) / statistics.median(speeds["alone"][n][k])
        for n in runs
        for k in args.steps
    ]
    result = {
        **header("price_noise", "a price's throughput measurement, repeated, alone and paired", "cpu", load),
        "pe": args.pe,
        "repeats": args.repeats,
        "scenarios": scenarios,
        "scenarios_medians_max_over_min": {f"{s} {k} steps": max(m) / min(m) for (s, k), m in medians.items()},
        "paired_over_alone_median": statistics.median(paired_over_alone),
        "median_tokens_per_second_by_repeat": by_repeat,
    }
    path = write_json("price_noise", "cpu", result)
    for name, row in scenarios.items():
        for setting, by_steps in row["tokens_per_second"].items():
            cells = ", ".join(f"{k} steps {v['median']:,.0f} (x{v['max_over_min']:.2f})" for k, v in by_steps.items())
            print(f"{name} (rows {row['row_width']:.0f}, class {row['row_class']}) {setting}: {cells}")
    print("scenarios apart: " + ", ".join(f"{k} x{v:.2f}" for k, v in result["scenarios_medians_max_over_min"].items()))
    print(f"paired / alone: {result['paired_over_alone_median']:.2f}")
    print("median by repeat: " + ", ".join(f"{v:,.0f}" for v in by_repeat))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
