"""A/B of the training step and the forward pass between two checkouts of probe, in one run.

    git worktree add /tmp/probe-old d53e121            # probe on TransformerLens 3.9
    python bench/ab_step.py --old-tree /tmp/probe-old --old-python /path/to/tl3-venv/bin/python

Two checkouts cannot be imported by one process (they are both ``probe``, on different
TransformerLens releases), so each side is a worker process: this file run with ``--worker``, by
that side's interpreter, with that side's tree first on ``PYTHONPATH``. Both build the same model
(``build_model``, same preset and seed) and the same batch (SCAN-shaped random tokens), and time
training steps (target-token loss through each side's ``target_loss``, backward, gradient
clipping, AdamW), forwards (eval mode, no gradient) and the Trainer's own loop (``loop``: batches
cut from its stream, dropout, loss bookkeeping and logging around the step; a reverse run with each
side's ``Trainer``) on process CPU time, one torch thread.
The driver alternates which side goes first, turn by turn, so both see the same machine; ratios
new/old are per turn, median over turns. Writes bench/results/ab_step_cpu.json (``--name``: another name).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve()


def _train_alone(trainer_class: type):
    """The tree's way to train one run to its last step, whatever the checkout's age."""
    try:
        from probe.training.stacked import train_alone
    except ImportError:
        try:  # a checkout from before the word "stacked"
            from probe.training.together import train_alone
        except ImportError:  # a checkout from before runs trained together
            return trainer_class.train
    return train_alone


def worker(preset: str, pe: str, batch: int, length: int, steps: int) -> None:
    """Answer each line of stdin ("step" or "forward") with the CPU seconds of ``steps`` of it."""
    torch.set_num_threads(1)
    from probe.models import build_model

    try:
        from probe.training.loop import target_loss
    except ImportError:  # a checkout from before probe/training/ (probe.train)
        from probe.train import target_loss

    vocab = 40
    model = build_model(pe, vocab_size=vocab, preset=preset, seed=0)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(vocab, (batch, length), generator=generator)
    mask = torch.zeros(batch, length - 1)
    mask[:, length // 2 :] = 1  # the target half scores, as a SCAN batch's does
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, foreach=True)

    def step() -> None:
        model.train()
        loss = target_loss(model, tokens, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    def forward() -> None:
        model.eval()
        with torch.inference_mode():
            model(tokens)

    def loop() -> float:
        """CPU seconds of the Trainer's own loop over ``steps`` steps (batches cut from its stream,
        dropout, loss bookkeeping and logging around the same step), its setup left out."""
        from probe.training.loop import Trainer

        try:
            from probe.training.train_config import TrainConfig
        except ImportError:  # a checkout from before the packages by layer
            from probe.training.config import TrainConfig
        train_alone = _train_alone(Trainer)

        with tempfile.TemporaryDirectory() as folder:
            config = TrainConfig(
                task="reverse",
                task_options={"train_length": 8},
                pe=pe,
                preset=preset,
                steps=steps,
                batch_size=batch,
                dropout=0.1,
                log_every=5,
                checkpoint_every=10**9,
            )
            trainer = Trainer(config, Path(folder), torch.device("cpu"))
            started = time.process_time()
            train_alone(trainer)
            return time.process_time() - started

    work = {"step": step, "forward": forward}
    for name in work:  # warm-up
        for _ in range(3):
            work[name]()
    loop()
    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name == "loop":
            print(json.dumps(loop()), flush=True)
            continue
        started = time.process_time()
        for _ in range(steps):
            work[name]()
        print(json.dumps(time.process_time() - started), flush=True)


def spawn(python: str, tree: Path, args: argparse.Namespace, pe: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    command = [
        python,
        str(HERE),
        "--worker",
        "--preset",
        args.preset,
        "--pe",
        pe,
        "--batch",
        str(args.batch),
        "--length",
        str(args.length),
        "--steps",
        str(args.steps),
    ]
    process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
    if process.stdout.readline().strip() != "ready":
        sys.exit(f"the worker in {tree} did not start")
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--old-tree", type=Path, help="the checkout to compare against")
    parser.add_argument("--old-python", default=sys.executable, help="its interpreter (its TransformerLens)")
    parser.add_argument("--new-tree", type=Path, default=HERE.parent.parent)
    parser.add_argument("--new-python", default=sys.executable)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--preset", default="tiny", help=argparse.SUPPRESS)
    parser.add_argument("--pes", nargs="+", default=["nope", "t5", "alibi", "rotary", "ape"])
    parser.add_argument("--pe", default="nope", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed turn")
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--name", default="ab_step", help="results file: bench/results/<name>_cpu.json")
    args = parser.parse_args()
    if args.worker:
        return worker(args.preset, args.pe, args.batch, args.length, args.steps)
    if args.old_tree is None:
        sys.exit("--old-tree is required")
    sys.path.insert(0, str(HERE.parent))
    from common import ask_worker, header, write_json

    load_before = os.getloadavg()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for preset in args.presets:
        args.preset = preset
        for pe in args.pes:
            sides = {
                "old": spawn(args.old_python, args.old_tree, args, pe),
                "new": spawn(args.new_python, args.new_tree, args, pe),
            }
            row = {}
            for what in ("step", "forward", "loop"):
                ratios, times = [], {"old": [], "new": []}
                for turn in range(args.turns):
                    order = ("old", "new") if turn % 2 == 0 else ("new", "old")
                    got = {side: ask_worker(sides[side], what) for side in order}
                    for side in got:
                        times[side].append(got[side] / args.steps)
                    ratios.append(got["new"] / got["old"])
                row[f"{what}_new_over_old"] = statistics.median(ratios)
                row[f"{what}_old_s"] = statistics.median(times["old"])
                row[f"{what}_new_s"] = statistics.median(times["new"])
            for process in sides.values():
                process.stdin.close()
                process.wait()
            results.setdefault(preset, {})[pe] = row
            print(
                f"{preset:>5} {pe:>7}: step new/old {row['step_new_over_old']:.3f} "
                f"({row['step_old_s'] * 1e3:.1f} -> {row['step_new_s'] * 1e3:.1f} ms), "
                f"forward {row['forward_new_over_old']:.3f}, loop {row['loop_new_over_old']:.3f}",
                flush=True,
            )
    write_json(
        args.name,
        "cpu",
        {
            **header(
                "ab_step",
                "training step, forward and the Trainer's loop, new checkout / old checkout, same model, batch "
                "and machine; process CPU time, one torch thread; median over alternating turns of per-turn ratios",
                "cpu",
                load_before,
            ),
            "old_tree": str(args.old_tree),
            "new_tree": str(args.new_tree),
            "batch": [args.batch, args.length],
            "steps_per_turn": args.steps,
            "turns": args.turns,
            "results": results,
            "max_step_ratio": max(r["step_new_over_old"] for p in results.values() for r in p.values()),
            "max_forward_ratio": max(r["forward_new_over_old"] for p in results.values() for r in p.values()),
            "max_loop_ratio": max(r["loop_new_over_old"] for p in results.values() for r in p.values()),
        },
    )


if __name__ == "__main__":
    main()
