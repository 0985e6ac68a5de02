"""A/B of a study's training step on its own packed batches, between two checkouts of probe, in one run.

    git worktree add /tmp/probe-old 1c72182
    python bench/packed_steps.py --old-tree /tmp/probe-old                     # Section 6's full formats, T5
    python bench/packed_steps.py --old-tree /tmp/probe-old --scenario section3:copy+split=paper+variant=count:alibi

:mod:`bench.ab_step` times SCAN-shaped batches of one row an example; a study trains packed rows (several
examples a row, :meth:`EncodedSet.packed_batch` at the run's ``pack_width``), whose attention masks the pairs of
two examples, and whose rows run to hundreds of tokens with a scratchpad. Here each side is a worker process
(this file with ``--worker``, that side's tree first on ``PYTHONPATH``, one torch thread) that builds the
scenario's run as the study plans it (its model, AdamW at the run's rate and clipping) and the first
``--batches`` batches of its first epoch, and answers each request with the CPU seconds of one pass over them
(forward with the rows' segments, the target loss, backward, clipping, the optimizer step). The driver alternates
which side goes first, turn by turn; the ratio new/old is per turn, the median over turns. Both sides train the
same steps from the same weights, so at the end each reports its weights' hash: a change that only moves work
leaves them equal bit for bit, one that rounds otherwise does not (the largest weight difference is reported).
Writes bench/results/packed_steps_cpu.json (``--name``: another stem).
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

HERE = Path(__file__).resolve()
SCENARIOS = (
    "section6:addition+scratchpad=full:t5",
    "section6:polynomial+scratchpad=full:t5",
    "section6:addition+scratchpad=full:nope",
    "section6:polynomial+scratchpad=full:alibi",
    "section3:sorting+train_length=8+variant=multi-digit:t5",
)


def worker(scenario: str, batches: int) -> None:
    """Answer "step" with the CPU seconds of one pass over the batches, "weights" with the weights' file."""
    import time

    import torch

    torch.set_num_threads(1)
    from probe.studies.reproduce import plan
    from probe.tasks.batches import encode, epoch_batches
    from probe.training.loop import target_loss
    from probe.training.sources import TaskSource

    study, folder, pe = scenario.split(":")
    with tempfile.TemporaryDirectory() as scratch:
        runs = [r for r in plan(study, scratch, seeds=1) if r.path.parent.parent.name == folder and r.config.pe == pe]
    if not runs:
        sys.exit(f"the {study} study has no {folder} run of {pe}")
    config = runs[0].config
    source = TaskSource(config.task, config.task_options, config.seed, config.protocol == "authors")
    data = encode(source.task.examples("train", n=batches * config.batch_size, seed=config.seed), source.tokenizer)
    cut = epoch_batches(data, config.batch_size, config.seed, 0, grouped=config.protocol != "authors")[:batches]
    packed = [data.packed_batch(index, factor=config.pack_width) for index in cut]  # (tokens, mask, segments)
    from probe.models.transformer import PETransformer

    model = PETransformer(config.model_config(source.vocab_size), device=torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, foreach=True)
    model.train()

    def one_pass() -> None:
        for tokens, mask, segments in packed:
            loss = target_loss(model, tokens, mask, segments)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()

    one_pass()  # warm-up: allocations, the kernels' first calls
    tokens = sum(t.numel() for t, _, _ in packed)
    widths = [t.size(1) for t, _, _ in packed]
    print(json.dumps({"ready": True, "tokens_per_pass": tokens, "width": widths}), flush=True)
    for line in sys.stdin:
        if line.strip() == "weights":
            from safetensors.torch import save_file

            path = Path(tempfile.mkdtemp()) / "weights.safetensors"
            save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path))
            print(json.dumps(str(path)), flush=True)
            continue
        started = time.process_time()
        one_pass()
        print(json.dumps(time.process_time() - started), flush=True)


def spawn(python: str, tree: Path, scenario: str, batches: int) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    command = [python, str(HERE), "--worker", "--scenario", scenario, "--batches", str(batches)]
    process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
    first = process.stdout.readline()
    if not first:  # the worker said why on stderr, or died without a word
        sys.exit(process.wait() or f"the worker in {tree} did not start for {scenario}")
    return process, json.loads(first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--old-tree", type=Path, help="the checkout to compare against")
    parser.add_argument("--old-python", default=sys.executable, help="its interpreter")
    parser.add_argument("--new-tree", type=Path, default=HERE.parent.parent)
    parser.add_argument("--new-python", default=sys.executable)
    parser.add_argument("--scenario", action="append", help="study:folder:pe (repeatable; default: five)")
    parser.add_argument("--batches", type=int, default=3, help="batches a turn (default 3)")
    parser.add_argument("--turns", type=int, default=6, help="timed turns a side (default 6)")
    parser.add_argument("--name", default="packed_steps", help="results file: bench/results/<name>_cpu.json")
    args = parser.parse_args()
    if args.worker:
        return worker(args.scenario[0], args.batches)
    if args.old_tree is None:
        sys.exit("--old-tree is required (a checkout to compare against: git worktree add DIR REV)")
    for tree in (args.old_tree, args.new_tree):
        if not (tree / "probe" / "__init__.py").is_file():
            sys.exit(f"{tree}: not a checkout of probe (no probe/__init__.py in it)")
    scenarios = args.scenario or list(SCENARIOS)
    malformed = [scenario for scenario in scenarios if scenario.count(":") != 2]
    if malformed:
        sys.exit(f"--scenario takes study:folder:pe (e.g. {SCENARIOS[0]}), got {malformed[0]!r}")
    sys.path.insert(0, str(HERE.parent))
    from common import ask_worker, header, write_json
    from safetensors.torch import load_file

    load_before = os.getloadavg()
    results = {}
    for scenario in scenarios:
        sides = {}
        for side, python, tree in (("old", args.old_python, args.old_tree), ("new", args.new_python, args.new_tree)):
            sides[side], shape = spawn(python, tree, scenario, args.batches)
        ratios, times = [], {"old": [], "new": []}
        for turn in range(args.turns):
            order = ("old", "new") if turn % 2 == 0 else ("new", "old")
            got = {side: ask_worker(sides[side], "step") for side in order}
            for side in got:
                times[side].append(got[side] / args.batches)
            ratios.append(got["new"] / got["old"])
        weights = {side: load_file(ask_worker(sides[side], "weights")) for side in sides}
        for process in sides.values():
            process.stdin.close()
            process.wait()
        largest = max((weights["new"][k] - weights["old"][k]).abs().max().item() for k in weights["old"])
        results[scenario] = {
            "step_new_over_old": statistics.median(ratios),
            "ratios": ratios,
            "step_old_s": statistics.median(times["old"]),
            "step_new_s": statistics.median(times["new"]),
            "tokens_per_step": shape["tokens_per_pass"] / args.batches,
            "row_widths": shape["width"],
            "same_weights": largest == 0.0,
            "largest_weight_difference": largest,
        }
        row = results[scenario]
        print(
            f"{scenario}: step new/old {row['step_new_over_old']:.3f} ({row['step_old_s']:.3f} -> "
            f"{row['step_new_s']:.3f} s), same weights: {row['same_weights']} (largest difference {largest:.1e})",
            flush=True,
        )
    write_json(
        args.name,
        "cpu",
        {
            **header(
                "packed_steps",
                "a study's training step on its own packed batches, new checkout / old checkout; process CPU time, "
                "one torch thread; median over alternating turns of per-turn ratios",
                "cpu",
                load_before,
            ),
            "old_tree": str(args.old_tree),
            "new_tree": str(args.new_tree),
            "batches_per_turn": args.batches,
            "turns": args.turns,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
