"""Example generation speed of every task: training examples per second, plain and with the full
scratchpad where the task has one.

    python bench/task_sampling.py

Each task draws ``--n`` training examples ``--repeats`` times (a fresh seed each time, so no cache
helps); the figure is the median rate. Absolute rates on a shared CPU, so they move with its load
(the JSON records it). Writes bench/results/task_sampling_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import header, write_json

from probe.tasks import SCRATCHPAD_TASKS, TASKS, get


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="examples per draw (default 2000)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.n < 1 or args.repeats < 1:
        parser.error("--n and --repeats must be at least 1")
    load_before = os.getloadavg()
    rows = []
    variants = [(name, {}) for name in TASKS] + [(name, {"scratchpad": "full"}) for name in SCRATCHPAD_TASKS]
    for name, options in variants:
        task = get(name, **options)
        seconds = []
        for seed in range(args.repeats):
            start = time.perf_counter()
            task.examples("train", n=args.n, seed=seed)
            seconds.append(time.perf_counter() - start)
        rate = args.n / statistics.median(seconds)
        label = name + ("+scratchpad=full" if options else "")
        rows.append({"task": label, "examples_per_second": rate, "seconds": seconds})
        print(f"{label:<26} {rate:>12,.0f} examples/s", flush=True)
    what = f"median seconds to draw {args.n} training examples, {args.repeats} seeds, per task"
    path = write_json(
        "task_sampling", "cpu", {**header("task_sampling", what, "cpu", load_before), "n": args.n, "results": rows}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
