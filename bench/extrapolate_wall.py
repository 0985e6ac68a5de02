"""Wall time of `probe extrapolate` on a task folder's runs (issue 41: the default six runs, every intervention,
under 5 minutes on 2 cores).

    python bench/extrapolate_wall.py [--checkpoints checkpoints] [--task scan] [-o split=paper] [--name NAME]

Runs the command as a user would (a fresh process, its own imports and model loads included), records wall,
user and system time and the load average before and after (the box may be shared), and copies the report's
headline numbers beside them. Writes bench/results/extrapolate_<name>_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import header, write_json

TARGET_S = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="checkpoints")
    parser.add_argument("--task", default="scan")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--name", default="default", help="results go to extrapolate_<name>_cpu.json")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    load = os.getloadavg()
    out = Path(tempfile.mkdtemp(prefix="extrapolate-"))
    command = [sys.executable, "-m", "probe.cli", "extrapolate", "--task", args.task, "--checkpoints", args.checkpoints]
    command += [flag for option in args.option for flag in ("-o", option)]
    command += ["--out", str(out), "--json"]
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"probe extrapolate failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    report = json.loads(done.stdout)
    runs = [
        {
            "label": r["label"],
            "interventions": [o["intervention"]["name"] for o in r["outcomes"]],
            "ood": {o["intervention"]["name"]: o["test"] for o in r["outcomes"]},
            "iid": {o["intervention"]["name"]: o["iid"] for o in r["outcomes"]},
        }
        for r in report["runs"]
    ]
    evaluated = sum(len(r["interventions"]) - 1 for r in runs)
    payload = header("extrapolate_wall", "wall time of `probe extrapolate` on a task folder's runs", "cpu", load) | {
        "target_s": TARGET_S,
        "wall_s": wall,
        "user_s": after.ru_utime - before.ru_utime,
        "system_s": after.ru_stime - before.ru_stime,
        "meets_target": wall <= TARGET_S,
        "runs": len(runs),
        "interventions_evaluated": evaluated,
        "results": runs,
        "probe_command": " ".join(command[2:]),
    }
    path = write_json(f"extrapolate_{args.name}", "cpu", payload)
    print(f"{len(runs)} runs, {evaluated} interventions: {wall:.0f} s wall (target {TARGET_S}); wrote {path}")


if __name__ == "__main__":
    main()
