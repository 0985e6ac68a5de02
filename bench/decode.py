"""Greedy decoding examples/s on SCAN test examples, with and without the KV cache.

    python bench/decode.py [--device cuda] [--pes nope t5] [--examples 512]

Decodes SCAN test examples (the length-generalization split: targets longer than training's)
with ``probe.tasks.decoding.greedy_decode`` the way ``evaluate_examples`` does: grouped by prompt length,
batches of up to ``--batch-size``, as many new tokens as the longest gold target plus <eos>
(bf16 autocast on CUDA). The model is built at ``--preset`` (default tiny) and untrained, so
<eos> is replaced by an id it can never produce: every batch decodes its full budget, which is
what a model that has learned SCAN does. Cached and uncached runs are interleaved in one run and
must produce the same tokens. Writes bench/results/decode_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from common import add_common_args, clock, header, interleave, medians, paired_ratio, setup, write_json

from probe.models import build_model
from probe.models.registry import PE_KINDS
from probe.presets import PRESETS
from probe.tasks import Tokenizer
from probe.tasks import get as get_task
from probe.tasks.decoding import decoding_batches, greedy_decode


def decode_batches(examples, tokenizer: Tokenizer, batch_size: int, device: torch.device):
    """[(prompts [batch, prompt], new tokens)] as evaluate_examples forms them (:func:`decoding_batches`)."""
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    return [
        (torch.tensor([prompts[i] for i in chunk], device=device), longest)
        for chunk, longest in decoding_batches(prompts, targets, batch_size)
    ]


def sampled(examples: list, n: int, seed: int) -> list:
    """A seeded sample of ``n`` of ``examples`` in their order (all of them for 0 or more than there are)."""
    if not 0 < n < len(examples):
        return examples
    pick = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:n]
    return [examples[i] for i in sorted(pick.tolist())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=5)
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument("--pes", nargs="+", default=["nope"], choices=PE_KINDS)
    parser.add_argument("--examples", type=int, default=512, help="SCAN test examples (a seeded sample; 0: all)")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    device = setup(args)
    task = get_task("scan")
    tokenizer = Tokenizer.for_task(task)
    examples = sampled(task.examples("test", seed=args.seed), args.examples, args.seed)
    batches = decode_batches(examples, tokenizer, args.batch_size, device)
    never = len(tokenizer)  # an id outside the vocabulary: no batch stops early
    new_tokens = sum(len(p) * n for p, n in batches)
    load_before = os.getloadavg()

    variants, outputs = {}, {}
    for pe in args.pes:
        model = build_model(pe, vocab_size=len(tokenizer), preset=args.preset, seed=args.seed, device=device).eval()
        for use_cache in (True, False):
            name = f"{pe}/{'cache' if use_cache else 'no_cache'}"

            def run(model=model, use_cache=use_cache, name=name) -> None:
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    outputs[name] = [
                        greedy_decode(model, prompts, n, never, tokenizer.pad_id, use_cache) for prompts, n in batches
                    ]

            variants[name] = run
    print(
        f"{len(examples)} SCAN test examples in {len(batches)} batches, {new_tokens} new tokens per pass; "
        f"{args.repeats} repeats",
        flush=True,
    )
    timings = interleave(variants, repeats=args.repeats, calls=1, warmup=1, device=device)
    runs = timings[clock(device)]
    seconds = medians(runs)
    rows = []
    for pe in args.pes:
        cached, uncached = f"{pe}/cache", f"{pe}/no_cache"
        same = all(torch.equal(a, b) for a, b in zip(outputs[cached], outputs[uncached]))
        rows.append(
            {
                "pe": pe,
                "seconds": {"cache": seconds[cached], "no_cache": seconds[uncached]},
                "wall_seconds": {
                    "cache": medians(timings["wall"])[cached],
                    "no_cache": medians(timings["wall"])[uncached],
                },
                "examples_per_s": {
                    "cache": len(examples) / seconds[cached],
                    "no_cache": len(examples) / seconds[uncached],
                },
                "new_tokens_per_s": {"cache": new_tokens / seconds[cached], "no_cache": new_tokens / seconds[uncached]},
                "cache_speedup": paired_ratio(runs, uncached, cached),
                "cache_speedup_wall": paired_ratio(timings["wall"], uncached, cached)["median"],
                "same_tokens_with_and_without_cache": same,
            }
        )
    payload = {
        **header(
            "decode",
            "probe.tasks.decoding.greedy_decode over SCAN test examples grouped as evaluate_examples groups them, "
            "KV cache vs full recomputation each step; untrained model with <eos> unreachable, so each "
            "batch decodes longest gold target + 1 tokens",
            device,
            load_before,
        ),
        "preset": args.preset,
        "examples": len(examples),
        "batches": len(batches),
        "batch_size": args.batch_size,
        "new_tokens_per_pass": new_tokens,
        "clock": clock(device),
        "timing": f"{args.repeats} interleaved repeats (order rotated each repeat) of one pass over the examples after "
        f"one warm-up pass each; seconds on the {clock(device)} clock (process CPU time on CPU, "
        "wall on CUDA); speed-ups are medians of per-repeat ratios",
        "results": rows,
    }
    path = write_json("decode", device, payload)
    print(f"\n{'PE':>7} {'cache ex/s':>11} {'no cache ex/s':>14} {'speed-up':>9} {'same tokens':>12}")
    for row in rows:
        print(
            f"{row['pe']:>7} {row['examples_per_s']['cache']:>11.1f} {row['examples_per_s']['no_cache']:>14.1f} "
            f"{row['cache_speedup']['median']:>8.2f}x {str(row['same_tokens_with_and_without_cache']):>12}"
        )
    print(f"wrote {path}")
    return 0 if all(row["same_tokens_with_and_without_cache"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
