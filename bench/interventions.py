"""Forward time under each inference-time intervention relative to the untouched model (issue 41: <= 1.10x).

    python bench/interventions.py [--device cuda] [--presets tiny small] [--length 64] [--batch 64]

Per preset and PE (NoPE, T5, Rotary), the evaluation forward pass (eval mode, no gradient) on a batch of
random tokens at ``--length`` (SCAN's unseen test sequences are 30 to 60 tokens; a PE's cost does not depend
on what the tokens say), untouched and under each intervention of :mod:`probe.models.interventions`, all
variants interleaved in one run. ``hooked`` is the untouched model on its explicit attention path (an
identity hook on every layer's scores): every score intervention takes that path, so ``hooked`` / ``none``
is what the path costs and each intervention / ``hooked`` what its own elementwise work costs.
Writes bench/results/interventions_<device>.json.
"""

from __future__ import annotations

import argparse
import os

import torch
from common import add_common_args, header, interleave, medians, paired_ratio, setup, write_json

from probe.models import build_model
from probe.models.intervention_hooks import intervention_hooks
from probe.models.interventions import Intervention

TARGET = 1.10
VOCAB = 24


def variants_of(pe: str, length: int) -> dict[str, Intervention | None]:
    trained = length // 2  # as if trained on half the length read: log-length and cap act on the far half
    out: dict[str, Intervention | None] = {
        "none": None,
        "temperature": Intervention(temperature=0.8),
        "log-length": Intervention(log_length=trained),
        "head-temperature": None,  # filled per model (its shape)
        "window+sinks": Intervention(window=trained, sinks=4),
        "log-length+window": Intervention(log_length=trained, window=trained, sinks=4),
    }
    if pe != "nope":
        out["cap"] = Intervention(cap=trained - 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=30)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--pes", nargs="+", default=["nope", "t5", "rotary"])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=4, help="forward passes per variant per repeat")
    args = parser.parse_args()
    device = setup(args)
    load = os.getloadavg()
    tokens = torch.randint(0, VOCAB, (args.batch, args.length), generator=torch.Generator().manual_seed(args.seed))
    tokens = tokens.to(device)
    results: dict[str, dict] = {}
    for preset in args.presets:
        for pe in args.pes:
            model = build_model(pe, vocab_size=VOCAB, preset=preset, seed=args.seed, device=device).eval()
            cfg = model.cfg
            plan = variants_of(pe, args.length)
            plan["head-temperature"] = Intervention(
                head_temperatures=tuple(tuple(0.9 + 0.05 * h for h in range(cfg.n_heads)) for _ in range(cfg.n_layers))
            )
            identity = [(f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook: s) for layer in range(cfg.n_layers)]

            def forward(hooks, model=model):
                def run() -> None:
                    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
                        model(tokens)

                return run

            calls = {"hooked": forward(identity)}
            for name, spec in plan.items():
                calls[name] = forward([] if spec is None else intervention_hooks(model, spec))
            print(f"{preset} {pe}: {len(calls)} variants", flush=True)
            runs = interleave(calls, repeats=args.repeats, calls=args.calls, warmup=2, device=device)
            primary = "wall" if device.type == "cuda" else "cpu"
            results[f"{preset}/{pe}"] = {
                "forward_s": medians(runs[primary]),
                "vs_none": {n: paired_ratio(runs[primary], n, "none")["median"] for n in calls if n != "none"},
                "vs_hooked": {
                    n: paired_ratio(runs[primary], n, "hooked")["median"] for n in calls if n not in ("none", "hooked")
                },
                "runs_s": runs,
            }
    worst = max(r for key in results for n, r in results[key]["vs_none"].items() if n != "hooked")
    payload = header(
        "interventions",
        f"evaluation forward pass at T = {args.length}, batch {args.batch}, under each intervention, against none",
        device,
        load,
    ) | {
        "target": TARGET,
        "worst_vs_none": worst,
        "meets_target": worst <= TARGET,
        "timing": f"{args.repeats} interleaved repeats of {args.calls} forward passes per variant, ratios are "
        "medians of per-repeat ratios on the process CPU clock (wall on CUDA)",
        "results": results,
    }
    path = write_json("interventions", device, payload)
    for key, r in results.items():
        print(key, "  ".join(f"{n} {v:.3f}" for n, v in r["vs_none"].items()))
    print(f"worst against none: {worst:.3f} (target {TARGET}); wrote {path}")


if __name__ == "__main__":
    main()
