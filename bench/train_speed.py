"""Training speed of `probe train` at each preset: steps/s and tokens/s of the real training loop.

    python bench/train_speed.py                         # CPU, 1 and 2 torch threads, tiny/small/base
    python bench/train_speed.py --device cuda           # one GPU (bf16 autocast, fused AdamW)
    python bench/train_speed.py --task code             # `probe pretrain`: the standard library's code

Each preset trains SCAN through ``probe.training.loop.Trainer.train`` itself (length-bucketed batches, the
recipe's batch size, learning rate and dropout, metrics.jsonl and all) into a scratch folder;
``--task code`` trains a code language model instead (`probe pretrain`'s recipe and context per
preset, on the standard library prepared once in a scratch folder). The
first ``warm`` steps are not timed; the rate is taken over the ``timed`` steps after them, from
the loop's own progress callback. Unlike the ratio benchmarks this reports absolute rates, so the
figures move with the machine's load (the JSON records the load average before and after).
Writes bench/results/train_speed_<device>.json (pretrain_speed_<device>.json for code).
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

from probe.corpus import CODE_TASK, CorpusSpec
from probe.presets import CONTEXTS, LM_RECIPES, RECIPES
from probe.training.loop import Trainer
from probe.training.sources import CorpusSource
from probe.training.stacked import train_alone
from probe.training.train_config import TrainConfig

# (untimed warm-up steps, timed steps) per preset; base takes seconds a step on a CPU.
STEPS = {
    "cpu": {"tiny": (50, 400), "small": (10, 100), "base": (2, 6)},
    "cuda": {"tiny": (50, 1000), "small": (50, 1000), "base": (20, 300)},
}
# Code batches hold 4K (tiny) to 32K (base) tokens, 5-40x a SCAN batch.
CODE_STEPS = {
    "cpu": {"tiny": (20, 200), "small": (4, 30), "base": (1, 2)},
    "cuda": {"tiny": (50, 500), "small": (50, 500), "base": (20, 200), "lm-1b": (5, 20)},
}


def measure(
    preset: str, warm: int, timed: int, device: torch.device, task: str = "scan", scratch: Path | None = None
) -> dict[str, float]:
    """steps/s and tokens/s over ``timed`` steps after ``warm`` untimed ones."""
    marks: list[tuple[int, float]] = []
    tokens: list[float] = []

    def on_step(step: int, loss: float, tokens_per_s: float) -> None:
        marks.append((step, time.perf_counter()))
        if step > warm:
            tokens.append(tokens_per_s)

    with tempfile.TemporaryDirectory() as folder:
        if task == CODE_TASK:  # the corpus is prepared once in `scratch`/code/corpus, beside this run
            config = TrainConfig(
                task=task,
                pe="nope",
                preset=preset,
                steps=warm + timed,
                log_every=warm,
                checkpoint_every=10**9,
                task_options={"context": CONTEXTS[preset]},
            )
            trainer = Trainer(
                config,
                Path(folder),
                device,
                source=CorpusSource(config.task_options, scratch / "code" / "nope" / "seed0"),
            )
        else:
            config = TrainConfig(
                task="scan", pe="nope", preset=preset, steps=warm + timed, log_every=warm, checkpoint_every=10**9
            )
            trainer = Trainer(config, Path(folder), device)
        train_alone(trainer, on_step)
    (first, start), (last, end) = marks[0], marks[-1]
    return {
        "steps_per_second": (last - first) / (end - start),
        "tokens_per_second": sum(tokens) / len(tokens),
        "batch_size": config.batch_size,
        "forward_precision": trainer.forward_precision,  # `auto`'s choice for this preset and device
        "timed_steps": last - first,
        **({"context": CONTEXTS[preset]} if task == CODE_TASK else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads on CPU (default 1 2)")
    parser.add_argument(
        "--task",
        default="scan",
        choices=("scan", CODE_TASK),
        help="scan (probe train) or code (probe pretrain on the standard library)",
    )
    parser.add_argument(
        "--presets", nargs="+", choices=list(LM_RECIPES), help="default: tiny small base (and lm-1b for code on cuda)"
    )
    args = parser.parse_args()
    presets = args.presets or [
        p for p in (LM_RECIPES if args.task == CODE_TASK else RECIPES) if p != "lm-1b" or args.device == "cuda"
    ]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible to torch; use --device cpu")
    threads = args.threads if device.type == "cpu" else [torch.get_num_threads()]
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for count in threads:
            torch.set_num_threads(count)
            for preset in presets:
                warm, timed = (CODE_STEPS if args.task == CODE_TASK else STEPS)[device.type][preset]
                row = {
                    "preset": preset,
                    "threads": count,
                    **measure(preset, warm, timed, device, args.task, Path(scratch)),
                }
                print(
                    f"{preset:5} threads {count}: {row['steps_per_second']:.2f} steps/s, "
                    f"{row['tokens_per_second']:,.0f} tokens/s",
                    flush=True,
                )
                rows.append(row)
    name = "pretrain_speed" if args.task == CODE_TASK else "train_speed"
    corpus = f"code (the standard library, {CorpusSpec().vocab_size}-id BPE)" if args.task == CODE_TASK else "SCAN"
    what = (
        f"steps/s of probe.training.loop.Trainer.train on {corpus} (NoPE) at each preset's recipe, after warm-up steps"
    )
    path = write_json(
        name, device, {**header(name, what, device, load_before), "task": args.task, "pe": "nope", "results": rows}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
