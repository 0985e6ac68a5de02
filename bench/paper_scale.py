"""The paper's SCAN study at the paper's scale (Section 3, Appendix D.2: `base`, 40,000 steps of 64, the
authors' protocol on their split), its PEs trained as one stacked program; today's path measured first
on the same device, so the speed-up is a ratio from one run.

    python bench/paper_scale.py --device cuda                          # the five PEs, 40,000 steps
    python bench/paper_scale.py --device cuda --pes nope t5 alibi      # the study in parts, a command each
    python bench/paper_scale.py --preset tiny --steps 40 --baseline-seconds 5 --name smoke   # on a CPU

Each PE is selected as the authors did (the best of 20 IID-validation checkpoints, teacher-forced, which
is greedy exact match), then scored on the held-out IID examples and the whole test split, one
teacher-forced pass per batch for every member (exact for greedy exact match but for float ties).
Writes bench/results/paper_scale_<name>_<device>.json: per PE IID, OOD and OOD per length bucket,
the selected step, the paper's numbers beside them (its released results, three seeds); the
member-steps/s of the stacked program and of today's path, their ratio, the share of the card's
bf16 peak, peak memory, the time to the first logged step (build, batch geometry, warm-up, capture or
compile), and wall times.

"Today's path" is ``probe train --no-stack`` on the same commit: one run at a time, eager, each batch
trimmed to its own shape (the GPU default before runs trained together). It trains each PE for an
equal share of ``--baseline-seconds`` in a scratch folder; its runs are thrown away.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import header, write_json  # noqa: E402

from probe.analysis.evaluation import split_accuracy  # noqa: E402
from probe.device import resolve_device  # noqa: E402
from probe.models.checkpoint import load_checkpoint, read_checkpoint_config  # noqa: E402
from probe.models.registry import PAPER_PES, pe_class  # noqa: E402
from probe.presets import RECIPES  # noqa: E402
from probe.reference import paper_summary  # noqa: E402
from probe.tasks import Tokenizer  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402
from probe.tasks.batches import EncodedSet, batch_stream, fixed_geometry  # noqa: E402
from probe.tasks.decoding import teacher_forced_examples  # noqa: E402
from probe.training.bookkeeping import train_group  # noqa: E402
from probe.training.dropout import dropout  # noqa: E402
from probe.training.engine import Engine  # noqa: E402
from probe.training.loop import Trainer  # noqa: E402
from probe.training.sources import TaskSource  # noqa: E402
from probe.training.train_config import TrainConfig  # noqa: E402

DATASET = "scan-mdlen_tr25_ts48"  # the authors' name for SCAN's length split (probe.reference)
BF16_PEAK = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}  # dense bf16 FLOP/s, the vendors' sheets


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    return [
        TrainConfig(
            task="scan",
            task_options={"split": "paper"},
            pe=pe,
            seed=args.seed,
            preset=args.preset,
            steps=args.steps,
            protocol="authors",
            pack=True,
            checkpoint_every=args.checkpoint_every,
            eval_examples=args.valid,
        )
        for pe in args.pes
    ]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def baseline(
    args: argparse.Namespace,
    runs: list[TrainConfig],
    device: torch.device,
    scratch: Path,
    source: TaskSource,
    data: EncodedSet,
) -> dict:
    """Today's path for ``--baseline-seconds``: each PE alone, eager, batches trimmed to their shapes;
    member-steps/s over the steps after the first few (allocator and kernel warm-up)."""
    share = args.baseline_seconds / len(runs)
    steps, seconds, per_pe = 0, 0.0, {}
    for config in runs:
        folder = scratch / "baseline" / config.pe
        folder.mkdir(parents=True)
        trainer = Trainer(config, folder, device, source=source, engine=Engine())
        stream = batch_stream(data, config.batch_size, config.seed, grouped=False)
        trainer.begin()
        with dropout(trainer.model, config.dropout, config.protocol):
            taken, started = 0, None
            while True:
                epoch, position, index = next(stream)
                batch = tuple(t.to(device, non_blocking=True) for t in data.packed_batch(index))
                trainer.run_step(batch)
                trainer.end_step(epoch, position, batch[0].numel())
                taken += 1
                if taken == 5:
                    trainer.read_losses()
                    sync(device)
                    started = time.perf_counter()
                elif started is not None and time.perf_counter() - started >= share:
                    trainer.read_losses()
                    sync(device)
                    break
            elapsed = time.perf_counter() - started
        trainer.close()
        per_pe[config.pe] = (taken - 5) / elapsed
        steps, seconds = steps + taken - 5, seconds + elapsed
        del trainer
    return {"member_steps_per_s": steps / seconds, "steps_per_s_by_pe": per_pe, "seconds": seconds}


def flops_per_member_step(model: torch.nn.Module, rows: int, width: int) -> float:
    """6 x weights x tokens of the grid (forward and backward of every matrix), plus attention's
    12 x layers x rows x width^2 x d_model (QK^T and AV, forward and backward, the causal half not
    skipped): the work the step does, padding included."""
    weights = sum(p.numel() for p in model.parameters() if p.requires_grad)
    cfg = model.cfg
    return 6 * weights * rows * width + 12 * cfg.n_layers * rows * width**2 * cfg.d_model


def evaluate(path: Path, device: torch.device, n_valid: int) -> dict:
    """The published (selected) checkpoint on the held-out IID examples and the whole test split."""
    model = load_checkpoint(path, device=device)
    meta = read_checkpoint_config(path)
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    examples = task.examples("valid", n=n_valid, seed=0) + task.examples("test", seed=0)
    result = teacher_forced_examples(model, tokenizer, examples, device=device)
    iid, ood = split_accuracy(task, result)
    training = meta["training"]
    return {
        "iid_accuracy": iid,
        "ood_accuracy": ood,
        "ood_by_length": {
            str(length): k / n for length, (n, k) in result.by_length().items() if not task.is_seen(length)
        },
        "selected_step": training.get("selected_step"),
        "best_valid_exact_match": training.get("selection", {}).get("best_valid_exact_match"),
        "step_engine": meta["metrics"].get("step_engine"),  # captured or not, as it trained
        "train_seconds": meta["metrics"].get("train_seconds"),
        "n_examples": len(examples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pes", nargs="+", default=list(PAPER_PES), help="default: the paper's five")
    parser.add_argument("--preset", default="base", help=f"one of {', '.join(RECIPES)} (default base)")
    parser.add_argument("--steps", type=int, default=40_000, help="training steps (default the paper's 40,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--valid", type=int, default=1000, help="IID validation examples (default 1000)")
    parser.add_argument("--checkpoint-every", type=int, default=10_000, help="resumable states (default 10,000)")
    parser.add_argument("--baseline-seconds", type=float, default=60, help="today's path, shared by the PEs (0: skip)")
    parser.add_argument("--compile", action="store_true", help="the forward through torch.compile as well")
    parser.add_argument("--no-capture", action="store_true", help="on a GPU, do not capture CUDA graphs")
    parser.add_argument("--checkpoints", type=Path, help="where the runs go (default: a scratch folder)")
    parser.add_argument("--name", help="bench/results/paper_scale_<name>_<device>.json (default: the PEs)")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak (default: by its name)")
    args = parser.parse_args()
    for pe in args.pes:
        try:
            pe_class(pe)
        except Exception as error:  # noqa: BLE001 - one line, not a traceback
            sys.exit(f"paper_scale: {error}")
    if args.steps < 1 or args.baseline_seconds < 0:
        sys.exit("paper_scale: --steps must be at least 1 and --baseline-seconds not negative")
    device = resolve_device(args.device)
    load = os.getloadavg()
    runs = configs(args)
    out = header("paper_scale", "the paper's SCAN study, its PEs stacked, against today's path", device, load)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        root = args.checkpoints or scratch / "runs"
        source = TaskSource("scan", {"split": "paper"}, args.seed, authors=True)
        data = source.training_set(args.seed)  # the baseline's batches, and the grid the FLOPs are counted on
        if args.baseline_seconds:
            out["baseline"] = baseline(args, runs, device, scratch, source, data)
        engine = Engine.for_device(device, compile=args.compile, capture=False if args.no_capture else None)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        marks: list[tuple[float, int]] = []
        lead = root / args.pes[0]

        def on_step(path: Path, step: int, loss: float, speed: float) -> None:
            if path == lead:
                marks.append((time.perf_counter(), step))

        started = time.perf_counter()
        results = train_group([(c, root / c.pe) for c in runs], device, engine=engine, on_step=on_step)
        wall = time.perf_counter() - started
        failed = {c.pe: str(r) for c, r in zip(runs, results) if isinstance(r, Exception)}
        first = next(((t, s) for t, s in marks if s >= 2 * runs[0].log_every), marks[0])
        last = marks[-1]
        rate = len(runs) * (last[1] - first[1]) / max(last[0] - first[0], 1e-9)
        geometry = fixed_geometry(data, runs[0].batch_size, args.seed, args.steps, grouped=False, packed=True)
        shape = load_checkpoint(root / runs[0].pe) if runs[0].pe not in failed else None
        flops = flops_per_member_step(shape, geometry.rows, geometry.width) if shape is not None else None
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        peak = (
            args.peak_tflops * 1e12 if args.peak_tflops else next((v for k, v in BF16_PEAK.items() if k in name), None)
        )
        out["stacked"] = {
            "engine": {"compile": engine.compile, "capture": engine.capture},
            "geometry": {"rows": geometry.rows, "width": geometry.width},
            "member_steps_per_s": rate,
            "startup_seconds": marks[0][0] - started,
            "wall_seconds": wall,
            "flops_per_member_step": flops,
            "share_of_bf16_peak": rate * flops / peak if peak and flops else None,
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
            "failed": failed,
        }
        if "baseline" in out:
            out["speedup"] = rate / out["baseline"]["member_steps_per_s"]
        began = time.perf_counter()
        reference = paper_summary(DATASET)
        out["runs"] = {
            c.pe: {**evaluate(root / c.pe, device, args.valid), "paper": reference.get(c.pe)}
            for c in runs
            if c.pe not in failed
        }
        out["evaluation_seconds"] = time.perf_counter() - began
    out["settings"] = {"preset": args.preset, "steps": args.steps, "seed": args.seed, "pes": args.pes}
    path = write_json(f"paper_scale_{args.name or '-'.join(args.pes)}", device, out)
    print(f"{'PE':<8} {'IID':>6} {'OOD':>6} {'paper OOD':>9} {'selected':>8}")
    for pe, row in out["runs"].items():
        paper = (row["paper"] or {}).get("ood")
        print(
            f"{pe:<8} {100 * row['iid_accuracy']:6.1f} {100 * (row['ood_accuracy'] or 0):6.1f} "
            f"{'-' if paper is None else f'{100 * paper:9.1f}'} {row['selected_step']!s:>8}"
        )
    stacked = out["stacked"]
    line = f"stacked: {stacked['member_steps_per_s']:.1f} member-steps/s"
    if stacked["share_of_bf16_peak"]:
        line += f", {100 * stacked['share_of_bf16_peak']:.1f}% of bf16 peak"
    if "baseline" in out:
        line += f"; today's path {out['baseline']['member_steps_per_s']:.1f} ({out['speedup']:.2f}x)"
    print(line + f"; wall {stacked['wall_seconds']:.0f} s -> {path}")


if __name__ == "__main__":
    main()
