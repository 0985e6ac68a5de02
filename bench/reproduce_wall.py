"""Wall time of `probe reproduce` on this machine, beside its own --dry-run estimate.

    python bench/reproduce_wall.py                     # the reduced study as shipped (small, 6 runs on 2 cores)
    python bench/reproduce_wall.py --steps 200         # a quick look at the pipeline's fixed costs

Runs the study from scratch in a temporary folder (or ``--checkpoints``), then writes
``bench/results/reproduce_wall_<preset>_<precision>[_<N>steps]_<device>.json`` (the study's preset,
the precision its forward passes trained in, the steps when ``--steps`` overrides them): the
estimate, the measured wall time, the training time summed over runs, and the study's OOD per PE.
``reproduce_wall_small_float32_cpu.json`` is the study before ``auto`` meant bf16 at ``small`` on
a CPU; ``reproduce_wall_cpu.json`` and ``reproduce_wall_10k_cpu.json`` are the earlier ``tiny``
studies (16,000 and 10,000 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.studies.sweep import load_grid  # noqa: E402

PROBE = [sys.executable, "-c", "from probe.cli import main; raise SystemExit(main())", "reproduce"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, help="override the study's steps")
    parser.add_argument("--checkpoints", help="where the study goes (default: a temporary folder, removed after)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.checkpoints or scratch) / "study"
        flags = [
            "--checkpoints",
            str(root),
            "--device",
            args.device,
            *(["--steps", str(args.steps)] if args.steps else []),
        ]
        estimate = json.loads(
            subprocess.run(
                [*PROBE, *flags, "--dry-run", "--json"], check=True, stdout=subprocess.PIPE, text=True
            ).stdout
        )
        started = time.perf_counter()
        done = json.loads(
            subprocess.run([*PROBE, *flags, "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout
        )
        wall = time.perf_counter() - started
        report = json.loads(Path(done["report"]).read_text())
        metrics = [json.loads((Path(p) / "config.json").read_text())["metrics"] for p in estimate["runs"]]
    train_seconds = sum(m["train_seconds"] for m in metrics)
    precision = "+".join(sorted({m["forward_precision"] for m in metrics}))
    ood = {folder: {pe: t["ood"] for pe, t in entry["ours"].items()} for folder, entry in report["tasks"].items()}
    result = {
        **header("reproduce_wall", "wall time of probe reproduce, beside its --dry-run estimate", args.device, load),
        "flags": flags[2:],
        "estimated_training_seconds": estimate["estimated_training_seconds"],
        "forward_precision": precision,
        "jobs": estimate["jobs"],
        "threads_per_job": estimate["threads_per_job"],
        "wall_seconds": wall,
        "train_seconds_summed_over_runs": train_seconds,
        "ood": ood,
    }
    name = f"reproduce_wall_{load_grid('reproduce')['preset']}_{precision}" + (
        f"_{args.steps}steps" if args.steps else ""
    )
    path = write_json(name, args.device, result)
    print(
        f"estimate {estimate['estimated_training_seconds'] / 60:.1f} min of training; measured {wall / 60:.1f} min "
        f"in all; wrote {path}"
    )


if __name__ == "__main__":
    main()
