"""`probe positions` on the default runs, time per stage and end to end.

    python bench/positions.py [--checkpoints checkpoints] [--task scan] [--device cpu] [--threads N]

Runs ``probe.analysis.positions.positions_report`` over every complete run of --task and --seed (the
default six: every PE plus NoPE's second seed needs --seed 0 and --seed 1, so both are read) and records
the seconds spent loading, collecting (one hooked forward per batch feeding every measure), fitting and
scoring the probes (with their bootstrap), and the attention measures; then times the command itself
(``probe positions --json``, a fresh process: imports and figures included). The target is the six
default runs in under a minute on 2 cores. Writes bench/results/positions_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import header, write_json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="checkpoints")
    parser.add_argument("--task", default="scan")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--n-per-bucket", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--skip-cli", action="store_true", help="do not time the `probe positions` process")
    args = parser.parse_args()
    load_before = os.getloadavg()

    started = time.perf_counter()
    import torch

    from probe.analysis.positions import positions_report
    from probe.subjects import task_runs
    from probe.subjects.settings import ReadSettings

    imported = time.perf_counter() - started
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is visible to torch; use --device cpu", file=sys.stderr)
        return 2

    runs = task_runs(args.checkpoints, args.task, seed=None)
    names = [str(r.path) for r in runs]
    start = time.perf_counter()
    cpu_start = time.process_time()
    results = positions_report(names, ReadSettings(n_per_bucket=args.n_per_bucket, device=args.device)).results
    library = {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start}
    stages: dict[str, float] = {}
    for result in results:
        for stage, seconds in result.timings.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    library["stages_s"] = stages
    library["load_and_other_s"] = library["wall_s"] - sum(stages.values())

    command = None
    if not args.skip_cli:
        with tempfile.TemporaryDirectory() as out:
            argv = [
                sys.executable,
                "-m",
                "probe.cli",
                "positions",
                *names,
                "--n-per-bucket",
                str(args.n_per_bucket),
                "--device",
                args.device,
                "--out",
                out,
                "--json",
            ]
            start = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True)
            command = {
                "argv": argv[1:],
                "wall_s": time.perf_counter() - start,
                "returncode": done.returncode,
                "png": any(p.suffix == ".png" for p in Path(out).iterdir()),
            }

    data = {
        **header(
            "positions",
            "probe positions on the default runs: probes, head decomposition, sinks, variance",
            args.device,
            load_before,
        ),
        "runs": [r.info.label for r in results],
        "n_runs": len(results),
        "n_per_bucket": args.n_per_bucket,
        "threads": torch.get_num_threads(),
        "import_s": imported,
        "library": library,
        "command": command,
        "target_s": 60.0,
        "inputs": {r.info.label: r.n_inputs for r in results},
    }
    path = write_json("positions", args.device, data)
    print(
        f"{len(results)} runs: library {library['wall_s']:.1f} s (collect {stages.get('collect', 0):.1f}, probes "
        f"{stages.get('probes', 0):.1f}, attention {stages.get('attention', 0):.1f}); command "
        f"{command['wall_s']:.1f} s"
        if command
        else "",
        file=sys.stderr,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
