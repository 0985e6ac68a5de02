"""Training speed of `probe train` at each preset: steps/s and tokens/s of the real training loop.

    python bench/train_speed.py                         # CPU, 1 and 2 torch threads, tiny/small/base
    python bench/train_speed.py --device cuda           # one GPU (bf16 autocast, fused AdamW)

Each preset trains SCAN through ``probe.train.Trainer.train`` itself (length-bucketed batches, the
recipe's batch size, learning rate and dropout, metrics.jsonl and all) into a scratch folder. The
first ``warm`` steps are not timed; the rate is taken over the ``timed`` steps after them, from
the loop's own progress callback. Unlike the ratio benchmarks this reports absolute rates, so the
figures move with the machine's load (the JSON records the load average before and after).
Writes bench/results/train_speed_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import header, write_json

from probe.train import RECIPES, Trainer, TrainConfig

# (untimed warm-up steps, timed steps) per preset; base takes seconds a step on a CPU.
STEPS = {"cpu": {"tiny": (50, 400), "small": (10, 100), "base": (2, 6)},
         "cuda": {"tiny": (50, 1000), "small": (50, 1000), "base": (20, 300)}}


def measure(preset: str, warm: int, timed: int, device: torch.device) -> dict[str, float]:
    """steps/s and tokens/s over ``timed`` steps after ``warm`` untimed ones."""
    marks: list[tuple[int, float]] = []
    tokens: list[float] = []

    def on_step(step: int, loss: float, tokens_per_s: float) -> None:
        marks.append((step, time.perf_counter()))
        if step > warm:
            tokens.append(tokens_per_s)

    with tempfile.TemporaryDirectory() as folder:
        config = TrainConfig(task="scan", pe="nope", preset=preset, steps=warm + timed, log_every=warm,
                             checkpoint_every=10**9)
        Trainer(config, Path(folder), device).train(on_step=on_step)
    (first, start), (last, end) = marks[0], marks[-1]
    return {"steps_per_second": (last - first) / (end - start), "tokens_per_second": sum(tokens) / len(tokens),
            "batch_size": config.batch_size, "timed_steps": last - first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads on CPU (default 1 2)")
    parser.add_argument("--presets", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible to torch; use --device cpu")
    threads = args.threads if device.type == "cpu" else [torch.get_num_threads()]
    load_before = os.getloadavg()
    rows = []
    for count in threads:
        torch.set_num_threads(count)
        for preset in args.presets:
            warm, timed = STEPS[device.type][preset]
            row = {"preset": preset, "threads": count, **measure(preset, warm, timed, device)}
            print(f"{preset:5} threads {count}: {row['steps_per_second']:.2f} steps/s, "
                  f"{row['tokens_per_second']:,.0f} tokens/s", flush=True)
            rows.append(row)
    what = "steps/s of probe.train.Trainer.train on SCAN (NoPE) at each preset's recipe, after warm-up steps"
    path = write_json("train_speed", device, {**header("train_speed", what, device, load_before),
                                              "task": "scan", "pe": "nope", "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
