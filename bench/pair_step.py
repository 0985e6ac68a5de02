"""The study's training speed as it runs: two `probe train` runs side by side, under each protocol.

    python bench/pair_step.py                                   # NoPE + ALiBi at small, 200 steps, 2 repeats
    python bench/pair_step.py --pes t5 alibi --steps 400 --variants probe authors-packed

``bench/protocol_step.py`` times one step in one process on one thread. The study instead trains two
runs at once on a 2-core machine (``probe reproduce``: ``--jobs 2``, one thread each), where the runs
share the memory bus and caches, and each run also pays for its data, logging, periodic states and,
under the authors' protocol, its 20 selection evaluations. This benchmark trains the study's
recipe (``probe/studies/grids/reproduce.toml``: ``small``, batch 64, dropout 0.1, SCAN's paper split) for
``--steps`` steps as the study would, one variant after another in an order rotated per repeat, and
reads each run's ``steps_per_second`` from its ``config.json``. The authors' runs validate at the
study's interval (every 200 of its 4,000 steps), so selection costs the same share of a step as
there (a shorter run would otherwise still validate 20 times):

- ``probe``: ``--protocol probe`` (``<bos>``, length-grouped batches, the last step), in float32;
- ``authors-packed``: the study's protocol (the authors' with ``--pack``), in float32;
- ``authors-packed-bf16``: the same under ``--precision bf16``.

Ratios of the pair's mean seconds per step are taken per repeat, then the median. Absolute rates
move with the machine's load, which the JSON records. Writes bench/results/pair_step_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import header, write_json

from probe.studies.sweep import load_grid
from probe.training.selection import every

PROBE = [sys.executable, "-c", "from probe.cli import main; raise SystemExit(main())", "train"]
STUDY = load_grid("reproduce")
RECIPE = [
    *("--task", "scan", "--split", "paper", "--preset", STUDY["preset"]),
    *("--batch-size", str(STUDY["batch_size"]), "--dropout", str(STUDY["dropout"])),
]
STUDY_EVAL_EVERY = every(STUDY["steps"])  # the study's selection interval: 20 evaluations a run
VARIANTS = {  # each names its precision: `auto` is bf16 at some presets on a CPU
    "probe": ["--protocol", "probe", "--precision", "float32"],
    "authors-packed": ["--pack", "--precision", "float32"],
    "authors-packed-bf16": ["--pack", "--precision", "bf16"],
}


def train_pair(pes: list[str], steps: int, flags: list[str], folder: Path) -> dict[str, float]:
    """Train ``pes`` side by side (``--jobs 2``) and return each run's steps per second."""
    command = [*PROBE, *RECIPE, *(f for pe in pes for f in ("--pe", pe)), "--seed", "0", "--steps", str(steps)]
    if "--protocol" not in flags:  # the authors' selection, at the study's interval rather than 20 a run
        command += ["--eval-every", str(STUDY_EVAL_EVERY)]
    done = subprocess.run(
        [*command, *flags, "--jobs", str(len(pes)), "--checkpoints", str(folder)], stdout=subprocess.DEVNULL
    )
    if done.returncode:  # probe train has said why on stderr, in one line
        sys.exit(f"probe train exited {done.returncode} for {' '.join(pes)} with {' '.join(flags)}")
    configs = {pe: folder / "scan+split=paper" / pe / "seed0" / "config.json" for pe in pes}
    missing = [str(path) for path in configs.values() if not path.is_file()]
    if missing:
        sys.exit(f"no config.json where a run should have written one: {', '.join(missing)}")
    return {pe: json.loads(path.read_text())["metrics"]["steps_per_second"] for pe, path in configs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pes", nargs=2, default=["nope", "alibi"], help="the pair (default nope alibi)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    load = os.getloadavg()
    rates: dict[str, list[dict[str, float]]] = {name: [] for name in args.variants}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            order = args.variants[repeat % len(args.variants) :] + args.variants[: repeat % len(args.variants)]
            for name in order:
                pair = train_pair(args.pes, args.steps, VARIANTS[name], Path(scratch) / f"{name}-{repeat}")
                rates[name].append(pair)
                print(f"repeat {repeat} {name}: " + "  ".join(f"{pe} {r:.2f} steps/s" for pe, r in pair.items()))

    def seconds_per_step(name: str, repeat: int) -> float:
        return statistics.mean(1 / r for r in rates[name][repeat].values())

    ratios = {
        f"{name}_over_{base}": statistics.median(
            seconds_per_step(name, i) / seconds_per_step(base, i) for i in range(args.repeats)
        )
        for name, base in (("authors-packed", "probe"), ("authors-packed-bf16", "authors-packed"))
        if name in rates and base in rates
    }
    result = {
        **header("pair_step", "steps/s of two `probe train` runs side by side, per protocol", "cpu", load),
        "pes": args.pes,
        "steps": args.steps,
        "recipe": RECIPE,
        "variants": {name: VARIANTS[name] for name in args.variants},
        "steps_per_second": rates,
        "ratios_of_seconds_per_step": ratios,
    }
    print("  ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print(f"wrote {write_json('pair_step', 'cpu', result)}")


if __name__ == "__main__":
    main()
