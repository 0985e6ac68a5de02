"""The sinusoidal APE's amplitude at `tiny`: the paper's unit p_j against p_j on the tokens' scale.

    python bench/ape_scale.py --checkpoints DIR [--scenario summation] [--seeds 0 1 2] [--threads 1]

At `base` the tokens' embedding is N(0, 1) and p_j (RMS 0.71) sits beside it at 0.7x, as in the authors'
code; at `tiny` the embedding is N(0, 0.8/sqrt(128)) and p_j is 10x it, so after the first RMSNorm the token
reaches the model about ten times weaker than under any other PE. This trains APE per seed both ways, with
the Section 3 study's recipe for the scenario (`probe/studies/grids/section3.toml`: the authors' protocol,
packed, 4,000 steps of 32 at lr 1e-3, or 1,500 for copy count, the rung its IID chose), `-p scale=1` (the
default) and `-p scale=` W_E's init std, through `probe train` (finished runs are read, not retrained), and
writes each run's IID and OOD exact match to bench/results/ape_scale_<scenario>_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from common import write_result

SCENARIOS = {  # the Section 3 study's scenario: task flags and the rung its IID validation chose
    "summation": (["--task", "summation", "-o", "train_length=8"], 4000),
    "lego": (["--task", "lego", "-o", "train_length=8"], 4000),
    "copy-count": (["--task", "copy", "-o", "split=paper", "-o", "variant=count"], 1500),
}
RECIPE = ["--preset", "tiny", "--batch-size", "32", "--lr", "1e-3", "--dropout", "0", "--protocol", "authors", "--pack"]
D_MODEL = 128  # tiny's


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", required=True, help="where the runs go (kept: a rerun reads them)")
    parser.add_argument("--scenario", default="summation", choices=sorted(SCENARIOS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of each run (default 1)")
    args = parser.parse_args()

    load_before = os.getloadavg()
    task_flags, steps = SCENARIOS[args.scenario]
    matched = round(0.8 / math.sqrt(D_MODEL), 4)  # W_E's init std at tiny (init gpt2)
    rows = []
    for scale in (1.0, matched):
        root = Path(args.checkpoints) / f"scale{scale:g}"
        seeds = [flag for seed in args.seeds for flag in ("--seed", str(seed))]
        command = ["probe", "train", *task_flags, *RECIPE, "--steps", str(steps), "--pe", "ape", *seeds]
        command += [] if scale == 1 else ["-p", f"scale={scale:g}"]  # the default: the folder the studies' runs have
        command += ["--checkpoints", str(root), "--jobs", "1"]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        if subprocess.run(command, env=env, stdout=subprocess.DEVNULL).returncode:
            print(f"bench/ape_scale.py: {' '.join(command)} failed", file=sys.stderr)
            return 1
        for seed in args.seeds:
            (run,) = root.glob(f"*/ape*/seed{seed}")
            report = json.loads((run / "eval.json").read_text())
            config = json.loads((run / "config.json").read_text())
            rows.append(
                {
                    "scale": scale,
                    "seed": seed,
                    "run": str(run.relative_to(root)),
                    "iid": report["iid_accuracy"],
                    "ood": report["ood_accuracy"],
                    "selected_step": config["training"].get("selected_step"),
                    "command": " ".join(command),
                }
            )
    for scale in (1.0, matched):
        mine = [r for r in rows if r["scale"] == scale]
        iid = ", ".join(f"{100 * r['iid']:.1f}" for r in mine)
        ood = ", ".join(f"{100 * r['ood']:.1f}" for r in mine)
        print(f"scale {scale:g}: IID {iid}; OOD {ood} (seeds {args.seeds})")
    write_result(
        f"ape_scale_{args.scenario}",
        f"APE at tiny on {args.scenario}: p_j at amplitude 1 (the paper's) and at W_E's init std {matched}",
        load_before,
        scenario=args.scenario,
        steps=steps,
        threads=args.threads,
        rows=rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
