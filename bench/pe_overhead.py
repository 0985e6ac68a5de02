"""Training-step and forward time of each positional encoding relative to NoPE, and fast vs hooked attention.

    python bench/pe_overhead.py [--device cuda] [--preset tiny|small|base] [--profile]
    python bench/pe_overhead.py --lengths 24 96 512 --batch 32 --no-hooked   # every PE at T = 24, 96, 512

Builds one model per PE at the preset and times the same training step on the same SCAN batch
(64 sequences of 24 tokens by default: <bos> source <sep> target <eos>), or with ``--lengths`` on
random tokens of each length T (every next token scored: a PE's cost does not depend on what the
tokens say): target-token loss, backward, gradient clipping, AdamW, as ``probe.training.loop.Trainer``
takes it; beside it, each PE's forward pass alone as evaluation takes it (eval mode, no gradient:
the logits of the same batch). Every registered PE by default (``--pes`` to choose). Every PE is timed with
its attention on the fast path (scaled_dot_product_attention) and forced onto the explicit,
hooked path (``set_fast_attention(False)``), all variants interleaved in one run. Ratios are per
repeat, median over repeats. With ``--profile``, torch.profiler's top operators of each PE's step and of the
plain decoder's (bench/plain_decoder.py) go into the JSON as well.
Writes bench/results/pe_overhead_<preset>_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import torch
from common import (
    add_common_args,
    clock,
    header,
    medians,
    paired_ratio,
    scan_batch,
    setup,
    time_once,
    time_training_steps,
    training_repeats,
    training_step,
    write_json,
)
from plain_decoder import PlainDecoder
from torch.profiler import ProfilerActivity, profile

from probe.models import build_model
from probe.models.registry import PE_CLASSES, PE_KINDS, REGISTRY
from probe.presets import PRESETS

TARGET = 1.10  # issue 14: every bias and rotary PE at most this x NoPE's step time up to T = 512
TARGETED = frozenset(
    kind for kind, cls in PE_CLASSES.items() if (cls.adds_bias or cls.rotates) and REGISTRY[kind].overhead_target
)
PAPER_STEPS = 40_000  # the paper's training run (Table tab:hyperparam)
TURN_S = 0.25  # a timed turn lasts about this long (steps_per_turn) unless --steps says otherwise
MAX_STEPS_PER_TURN = 16


def on_path(model, fast: bool, step: Callable[[], None]) -> Callable[[], None]:
    """``step`` with the attention fast path allowed or not."""

    def run() -> None:
        model.set_fast_attention(fast)
        step()

    return run


def forward_pass(model, tokens: torch.Tensor) -> Callable[[], None]:
    """The forward pass as evaluation takes it (``probe.tasks.decoding``): eval mode, no autograd, bf16
    autocast on CUDA, every position's logits."""

    def run() -> None:
        was_training = model.training
        model.eval()
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=tokens.is_cuda):
            model(tokens)
        model.train(was_training)

    return run


def steps_per_turn(step: Callable[[], None], device: torch.device) -> int:
    """Steps a variant takes per timed turn, so that a turn lasts about ``TURN_S`` at NoPE's pace: a
    20 ms step timed alone is mostly timer and cache noise (T = 24), a 2 s one is not (T = 512)."""
    step()
    seconds = time_once(step, 1, device)[1 if device.type == "cpu" else 0]
    return max(1, min(MAX_STEPS_PER_TURN, round(TURN_S / max(seconds, 1e-6))))


def top_ops(step: Callable[[], None], device: torch.device, steps: int, rows: int) -> dict[str, object]:
    """torch.profiler over ``steps`` steps: the operators with the most self time, per step."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events = prof.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = sum(getattr(e, key) for e in events)
    ops = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:rows]
    return {
        "sorted_by": key,
        "total_self_ms_per_step": total / 1e3 / steps,
        "aten_ops_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / steps,
        "ops": [
            {
                "op": e.key,
                "self_ms_per_step": getattr(e, key) / 1e3 / steps,
                "share": getattr(e, key) / total,
                "calls_per_step": e.count / steps,
            }
            for e in ops
        ],
    }


def measure(
    args: argparse.Namespace, tokens: torch.Tensor, mask: torch.Tensor, vocab: int, device: torch.device
) -> dict[str, object]:
    """Every PE's step on one batch, interleaved: times, ratios to NoPE, hooked over fast."""
    args.repeats, steps = training_repeats(args, device)
    models = {
        pe: build_model(pe, vocab_size=vocab, preset=args.preset, seed=args.seed, device=device) for pe in args.pes
    }
    steps_of = {pe: training_step(model, tokens, mask, device) for pe, model in models.items()}
    if args.steps is None:
        steps = steps_per_turn(steps_of["nope"], device)
    variants = {pe: on_path(models[pe], True, steps_of[pe]) for pe in args.pes}
    if not args.no_hooked:
        variants.update({f"{pe}/hooked": on_path(models[pe], False, steps_of[pe]) for pe in args.pes})
    variants.update({f"{pe}/forward": on_path(models[pe], True, forward_pass(models[pe], tokens)) for pe in args.pes})
    timings, ops, warmup = time_training_steps(
        variants, preset=args.preset, repeats=args.repeats, calls=steps, device=device
    )
    runs = timings[clock(device)]
    step_s = medians(runs)
    wall_step_s = medians(timings["wall"])
    vs_nope = {pe: paired_ratio(runs, pe, "nope") for pe in args.pes if pe != "nope"}
    hooked_vs_fast = {pe: paired_ratio(runs, f"{pe}/hooked", pe) for pe in args.pes if not args.no_hooked}
    forward_vs_nope = {pe: paired_ratio(runs, f"{pe}/forward", "nope/forward") for pe in args.pes if pe != "nope"}
    section = {
        "batch": list(tokens.shape),
        "steps_per_repeat": steps,
        "timing": f"{args.repeats} interleaved repeats (order rotated each repeat) after {warmup} warm-up step(s) "
        f"per variant; step_s and ratios on the {clock(device)} clock (process CPU time on CPU, wall "
        "on CUDA); ratios are medians of per-repeat ratios; wall-clock figures beside them",
        "step_s": step_s,
        "wall_step_s": wall_step_s,
        "runs_s": timings,
        "steps_per_s": {name: 1 / s for name, s in step_s.items()},
        "projected_hours_for_40k_steps": {name: PAPER_STEPS * s / 3600 for name, s in step_s.items()},
        "dispatched_ops_per_step": ops,
        "kernels_vs_nope": {name: ops[name]["kernels"] / ops["nope"]["kernels"] for name in ops},
        "vs_nope": vs_nope,
        "vs_nope_wall": {pe: paired_ratio(timings["wall"], pe, "nope")["median"] for pe in vs_nope},
        "within_target": {pe: vs_nope[pe]["median"] <= TARGET for pe in vs_nope if pe in TARGETED},
        "forward_s": {pe: step_s[f"{pe}/forward"] for pe in args.pes},
        "forward_vs_nope": forward_vs_nope,
        "forward_within_target": {
            pe: forward_vs_nope[pe]["median"] <= TARGET for pe in forward_vs_nope if pe in TARGETED
        },
        "hooked_over_fast": hooked_vs_fast,
    }
    if args.profile:
        print(f"profiling {args.profile_steps} steps per PE ...", flush=True)
        plain = PlainDecoder(models["nope"].config).to(device).load_from(models["nope"])
        profiled = {pe: top_ops(variants[pe], device, args.profile_steps, 15) for pe in args.pes}
        if not args.no_hooked:
            profiled["nope/hooked"] = top_ops(variants["nope/hooked"], device, args.profile_steps, 15)
        profiled["plain"] = top_ops(training_step(plain, tokens, mask, device), device, args.profile_steps, 15)
        section["profile"] = profiled
    print(
        f"\n{'PE':>9} {'step (ms)':>10} {'x NoPE':>8} {'target':>7} {'fwd (ms)':>9} {'x NoPE':>7} {'kernels':>8} "
        f"{'hooked/fast':>12}"
    )
    for pe in args.pes:
        ratio = vs_nope[pe]["median"] if pe in vs_nope else 1.0
        target = f"<={TARGET:.2f}" if pe in TARGETED else ""
        hooked = f"{hooked_vs_fast[pe]['median']:.3f}" if pe in hooked_vs_fast else ""
        forward = forward_vs_nope[pe]["median"] if pe in forward_vs_nope else 1.0
        print(
            f"{pe:>9} {step_s[pe] * 1e3:>10.1f} {ratio:>8.3f} {target:>7} {step_s[f'{pe}/forward'] * 1e3:>9.1f} "
            f"{forward:>7.3f} {ops[pe]['kernels']:>8} {hooked:>12}"
        )
    if args.profile:
        for name, prof in section["profile"].items():
            top = ", ".join(f"{op['op']} {op['share']:.0%}" for op in prof["ops"][:5])
            print(
                f"profile {name:>13}: {prof['total_self_ms_per_step']:.1f} ms/step, "
                f"{prof['aten_ops_per_step']:.0f} aten ops/step; {top}"
            )
    return section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=None)
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument("--pes", nargs="+", default=list(PE_KINDS), choices=PE_KINDS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=24, help="tokens per SCAN sequence")
    parser.add_argument("--lengths", type=int, nargs="+", help="time random-token batches of these lengths instead")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed steps per variant per repeat (default: as many as "
        f"fill {TURN_S} s at NoPE's pace, at most {MAX_STEPS_PER_TURN})",
    )
    parser.add_argument("--no-hooked", action="store_true", help="time the fast path only")
    parser.add_argument("--profile", action="store_true", help="add torch.profiler's top operators per PE")
    parser.add_argument("--profile-steps", type=int, default=5)
    args = parser.parse_args()
    device = setup(args)
    if "nope" not in args.pes:
        args.pes = ["nope", *args.pes]
    load_before = os.getloadavg()
    sections = {}
    if args.lengths:
        for length in args.lengths:
            _, _, vocab = scan_batch(1, args.length, args.seed, device)
            generator = torch.Generator().manual_seed(args.seed)
            tokens = torch.randint(vocab, (args.batch, length), generator=generator).to(device)
            print(f"T = {length}", flush=True)
            sections[str(length)] = measure(
                args, tokens, torch.ones(args.batch, length - 1, device=device), vocab, device
            )
    else:
        tokens, mask, vocab = scan_batch(args.batch, args.length, args.seed, device)
        sections[str(args.length)] = measure(args, tokens, mask, vocab, device)
    payload = {
        **header(
            "pe_overhead",
            "training-step time (target-token loss, backward, grad clip, AdamW; bf16 autocast on CUDA; "
            "no dropout) and forward time (eval mode, inference_mode) of each PE at one preset, relative to NoPE; "
            "fast (SDPA) vs forced hooked "
            "attention path per PE; the same batch for all, per sequence length",
            device,
            load_before,
        ),
        "preset": args.preset,
        "clock": clock(device),
        "target_vs_nope": TARGET,
        "targeted": sorted(TARGETED & set(args.pes)),
        "by_length": sections,
    }
    stem = f"pe_overhead_{args.preset}" + ("_lengths" if args.lengths else "")
    print(f"wrote {write_json(stem, device, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
