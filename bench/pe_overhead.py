"""Training-step time of each positional encoding relative to NoPE, and fast vs hooked attention.

    python bench/pe_overhead.py [--device cuda] [--preset tiny|small|base] [--profile]

Builds one model per PE at the preset and times the same training step on the same SCAN batch
(64 sequences of 24 tokens by default: <bos> source <sep> target <eos>): target-token loss,
backward, gradient clipping, AdamW, as ``probe.train.Trainer`` takes it. Every PE is timed with
its attention on the fast path (scaled_dot_product_attention) and forced onto the explicit,
hooked path (``set_fast_attention(False)``), all variants interleaved in one run. Ratios are per
repeat, median over repeats. With ``--tl-block`` each PE is also timed with TransformerLens' own
block forward (``ln1`` three times per layer) instead of ``PEBlock``'s (once): the before and after
of that change. With ``--profile``, torch.profiler's top operators of each PE's step and of the
plain decoder's (bench/plain_decoder.py) go into the JSON as well.
Writes bench/results/pe_overhead_<preset>_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from common import (add_common_args, clock, header, medians, paired_ratio, scan_batch, setup, time_training_steps,
                    training_repeats, training_step, write_json)
from plain_decoder import PlainDecoder

from probe.models import build_model
from probe.models.registry import PE_KINDS

TARGETS = {"t5": 1.15, "alibi": 1.05, "rotary": 1.15}  # issue 8: at most this x NoPE's step time
PAPER_STEPS = 40_000  # the paper's training run (Table tab:hyperparam)


def on_path(model, fast: bool, step: Callable[[], None], tl_block: bool = False) -> Callable[[], None]:
    """``step`` with the attention fast path allowed or not, in PEBlock's or TransformerLens' block."""

    def run() -> None:
        model.set_fast_attention(fast)
        for block in model.blocks:
            if tl_block:
                block.streamlined = lambda shortformer_pos_embed: False
            else:
                block.__dict__.pop("streamlined", None)
        step()

    return run


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
        "ops": [{"op": e.key, "self_ms_per_step": getattr(e, key) / 1e3 / steps,
                 "share": getattr(e, key) / total, "calls_per_step": e.count / steps} for e in ops],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=None)
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small", "base"])
    parser.add_argument("--pes", nargs="+", default=list(PE_KINDS), choices=PE_KINDS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=24, help="tokens per SCAN sequence")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per variant per repeat (default 1)")
    parser.add_argument("--no-hooked", action="store_true", help="time the fast path only")
    parser.add_argument("--tl-block", action="store_true",
                        help="also time each PE in TransformerLens' block forward (before PEBlock)")
    parser.add_argument("--profile", action="store_true", help="add torch.profiler's top operators per PE")
    parser.add_argument("--profile-steps", type=int, default=5)
    args = parser.parse_args()
    device = setup(args)
    if "nope" not in args.pes:
        args.pes = ["nope", *args.pes]
    args.repeats, steps = training_repeats(args, device)
    tokens, mask, vocab = scan_batch(args.batch, args.length, args.seed, device)
    load_before = os.getloadavg()

    models = {pe: build_model(pe, vocab_size=vocab, preset=args.preset, seed=args.seed, device=device) for pe in args.pes}
    steps_of = {pe: training_step(model, tokens, mask, device) for pe, model in models.items()}
    variants = {pe: on_path(models[pe], True, steps_of[pe]) for pe in args.pes}
    if not args.no_hooked:
        variants.update({f"{pe}/hooked": on_path(models[pe], False, steps_of[pe]) for pe in args.pes})
    if args.tl_block:
        variants.update({f"{pe}/tl_block": on_path(models[pe], True, steps_of[pe], tl_block=True) for pe in args.pes})
    timings, ops, warmup = time_training_steps(variants, preset=args.preset, repeats=args.repeats, calls=steps, device=device)
    runs = timings[clock(device)]

    step_s = medians(runs)
    wall_step_s = medians(timings["wall"])
    vs_nope = {pe: paired_ratio(runs, pe, "nope") for pe in args.pes if pe != "nope"}
    hooked_vs_fast = {pe: paired_ratio(runs, f"{pe}/hooked", pe) for pe in args.pes if not args.no_hooked}
    payload = {
        **header("pe_overhead", "training-step time (target-token loss, backward, grad clip, AdamW; bf16 autocast on CUDA; "
                "no dropout) of each PE at one preset, relative to NoPE; fast (SDPA) vs forced hooked "
                "attention path per PE; same SCAN batch for all", device, load_before),
        "preset": args.preset,
        "batch": args.batch,
        "length": args.length,
        "steps_per_repeat": steps,
        "clock": clock(device),
        "timing": f"{args.repeats} interleaved repeats (order rotated each repeat) after {warmup} warm-up step(s) "
                  f"per variant; step_s and ratios on the {clock(device)} clock (process CPU time on CPU, wall "
                  "on CUDA); ratios are medians of per-repeat ratios; wall-clock figures beside them",
        "step_s": step_s,
        "wall_step_s": wall_step_s,
        "runs_s": timings,
        "steps_per_s": {name: 1 / s for name, s in step_s.items()},
        "projected_hours_for_40k_steps": {name: PAPER_STEPS * s / 3600 for name, s in step_s.items()},
        "steps_per_s_wall": {name: 1 / s for name, s in wall_step_s.items()},
        "projected_hours_for_40k_steps_wall": {name: PAPER_STEPS * s / 3600 for name, s in wall_step_s.items()},
        "dispatched_ops_per_step": ops,
        "kernels_vs_nope": {name: ops[name]["kernels"] / ops["nope"]["kernels"] for name in ops},
        "targets_vs_nope": TARGETS,
        "vs_nope": vs_nope,
        "vs_nope_wall": {pe: paired_ratio(timings["wall"], pe, "nope")["median"] for pe in vs_nope},
        "hooked_over_fast": hooked_vs_fast,
        "hooked_over_fast_wall": {pe: paired_ratio(timings["wall"], f"{pe}/hooked", pe)["median"] for pe in hooked_vs_fast},
        "pe_block_over_tl_block": {pe: paired_ratio(runs, pe, f"{pe}/tl_block") for pe in args.pes if args.tl_block},
    }
    if args.profile:
        print(f"profiling {args.profile_steps} steps per PE ...", flush=True)
        plain = PlainDecoder(models["nope"].config).to(device).load_from(models["nope"])
        profiled = {pe: top_ops(variants[pe], device, args.profile_steps, 15) for pe in args.pes}
        if not args.no_hooked:
            profiled["nope/hooked"] = top_ops(variants["nope/hooked"], device, args.profile_steps, 15)
        if args.tl_block:
            profiled["nope/tl_block"] = top_ops(variants["nope/tl_block"], device, args.profile_steps, 15)
        profiled["plain"] = top_ops(training_step(plain, tokens, mask, device), device, args.profile_steps, 15)
        payload["profile"] = profiled
    path = write_json(f"pe_overhead_{args.preset}", device, payload)

    print(f"\n{'PE':>7} {'step (ms)':>10} {'x NoPE':>8} {'target':>7} {'kernels':>8} {'hooked/fast':>12} {'PEBlock/TL block':>17}")
    for pe in args.pes:
        ratio = vs_nope[pe]["median"] if pe in vs_nope else 1.0
        target = f"<={TARGETS[pe]:.2f}" if pe in TARGETS else ""
        hooked = f"{hooked_vs_fast[pe]['median']:.3f}" if pe in hooked_vs_fast else ""
        block = f"{payload['pe_block_over_tl_block'][pe]['median']:.3f}" if args.tl_block else ""
        print(f"{pe:>7} {step_s[pe] * 1e3:>10.1f} {ratio:>8.3f} {target:>7} {ops[pe]['kernels']:>8} {hooked:>12} {block:>17}")
    if args.profile:
        for name, prof in payload["profile"].items():
            top = ", ".join(f"{op['op']} {op['share']:.0%}" for op in prof["ops"][:5])
            print(f"profile {name:>13}: {prof['total_self_ms_per_step']:.1f} ms/step, "
                  f"{prof['aten_ops_per_step']:.0f} aten ops/step; {top}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
