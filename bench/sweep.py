"""`probe sweep` throughput: runs per hour with 1, 2, ... runs at a time on one machine.

    python bench/sweep.py                                   # CPU: 1 vs 2 concurrent runs
    python bench/sweep.py --device cuda --concurrency 1 2 4 8   # one GPU shared by k runs

For each concurrency k a fresh local Ray instance runs the same ``--runs`` runs (preset ``tiny``,
``--steps`` steps, evaluated on ``--eval-n`` test examples) into a scratch folder through
``probe.studies.sweep.execute``, exactly as ``probe sweep`` does. On CPU, k runs ask for one CPU each (one
torch thread) from a Ray instance of k CPUs; on CUDA each run asks for 1/k of the one GPU.

Reported per k: ``runs_per_hour`` (runs / wall time from submission to the last result, Ray worker
start and imports included), ``steady_runs_per_hour`` (k x 3600 / mean seconds a run spends on its
worker: the rate once workers are warm), and the training steps/s of the runs. Writes
bench/results/sweep_<device>.json. On a shared, loaded machine the figures move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--concurrency", type=int, nargs="+", help="runs at a time (default: 1 2 on CPU, 1 2 4 8 on CUDA)"
    )
    parser.add_argument("--runs", type=int, default=4, help="runs per concurrency level (default 4)")
    parser.add_argument("--task", default="scan")
    parser.add_argument(
        "--steps", type=int, default=100, help="training steps per run (default 100; tiny's recipe is 4000)"
    )
    parser.add_argument("--eval-n", type=int, default=64, help="test examples evaluated per run (default 64)")
    args = parser.parse_args()
    levels = args.concurrency or ([1, 2] if args.device == "cpu" else [1, 2, 4, 8])

    import ray
    import torch
    from common import header, write_json

    from probe.studies import sweep
    from probe.studies.plans import PE_SETS

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible to torch; use --device cpu")
    pes = PE_SETS["paper"]
    results, load_before = [], os.getloadavg()
    for k in levels:
        with tempfile.TemporaryDirectory() as root:
            grid = {
                "name": f"bench{k}",
                "task": args.task,
                "preset": "tiny",
                "steps": args.steps,
                "eval_n": args.eval_n,
                "eval_valid": args.eval_n,
                "eval_examples": args.eval_n,
                "block": [{"pe": pes[i % len(pes)], "seed": i // len(pes)} for i in range(args.runs)],
            }
            runs = sweep.expand_grid(grid, root)
            manifest = sweep.Manifest(Path(root) / "sweep.json", grid["name"], runs)
            if args.device == "cpu":
                sweep.connect(None, num_cpus=k, num_gpus=0)
                options = {"cpus_per_run": 1, "gpus_per_run": 0}
            else:
                sweep.connect(None, num_cpus=max(k, os.cpu_count() or 1), num_gpus=1)
                options = {"cpus_per_run": min(1, (os.cpu_count() or 1) / k), "gpus_per_run": 1 / k}
            started = time.perf_counter()
            sweep.execute(runs, manifest, **options)
            wall = time.perf_counter() - started
            ray.shutdown()
            entries = list(manifest.entries.values())
            failed = [e for e in entries if e["state"] != "done"]
            if failed:
                sys.exit(f"k={k}: {len(failed)} run(s) failed: {failed[0].get('error')}")
            seconds = [e["seconds"] for e in entries]
            result = {
                "concurrency": k,
                "runs": len(runs),
                "wall_seconds": wall,
                "runs_per_hour": 3600 * len(runs) / wall,
                "steady_runs_per_hour": 3600 * k / statistics.mean(seconds),
                "run_seconds_median": statistics.median(seconds),
                "train_steps_per_second_median": statistics.median(e["steps_per_second"] for e in entries),
                "eval_seconds_median": statistics.median(e["eval_seconds"] for e in entries),
            }
            results.append(result)
            print(json.dumps(result), flush=True)
    payload = {
        **header(
            "sweep",
            "runs per hour of probe.studies.sweep.execute with k runs at a time, fresh local Ray instance per k",
            args.device,
            load_before,
        ),
        "ray": ray.__version__,
        "task": args.task,
        "preset": "tiny",
        "steps": args.steps,
        "eval_n": args.eval_n,
        "results": results,
    }
    path = write_json("sweep", args.device, payload)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
