"""Greedy decoding with probe's key-value cache (written in place) against TransformerLens' (concatenated each step).

    python bench/kv_cache.py [--pes nope t5] [--length 16] [--examples 128] [--scratchpad full]
    python bench/kv_cache.py --pes nope t5 rotary --batch-size 4 --name kv_cache_rerun   # a scratchpad's rerun rows

Decodes addition's test examples of one unseen length with the scratchpad (default 16, Section 6's longest
decodes: the scratchpad grows the cache by a thousand tokens) through ``probe.tasks.decoding.greedy_decode``,
batched as ``evaluate_examples`` batches them (one batch of up to 256 a prompt length), once with each cache,
interleaved in one run. The model is built at
``--preset`` (default tiny, context 2,048) and untrained, with <eos> out of its reach, so every batch decodes
its longest gold target + 1 tokens, as a model that has learned the task does. Both caches must give the same
tokens. A third arm, ``probe_before``, is probe's cache as it was before 2026-12-03: every decoding step built and
applied its mask, per layer, where nothing cached is padding (``KeyValueCache.padded``), and a rotating layer
turned every cached key again each step (``CacheEntry.turned``); ``speedup_over_before`` is its time over
probe's. ``--batch-size 4`` decodes the way a scratchpad's rows left unended are decoded on (a few rows a batch,
to 1,500 positions), where a step's fixed costs dominate. Writes bench/results/kv_cache_<device>.json
(``--name``: another stem).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import torch
from common import add_common_args, clock, header, interleave, medians, paired_ratio, setup, write_json
from decode import decode_batches, sampled
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from probe.models import build_model
from probe.models.kv_cache import CacheEntry, KeyValueCache
from probe.models.registry import PE_KINDS
from probe.presets import PRESETS
from probe.tasks import Tokenizer, decoding
from probe.tasks import get as get_task


def _before(model, batch: int, capacity: int) -> KeyValueCache:
    """probe's cache as it was: as if something cached were padding (every decoding step masks), and keeping no
    turned keys (a rotating layer turns every cached key again each step)."""
    cache = KeyValueCache(model.cfg, model.cfg.device, batch, capacity)
    cache.padded = True
    for entry in cache.entries:
        entry.append = lambda keys, values, turned=None, entry=entry: CacheEntry.append(entry, keys, values)
    return cache


CACHES = {
    "probe": lambda model, batch, capacity: KeyValueCache(model.cfg, model.cfg.device, batch, capacity),
    "probe_before": _before,
    "transformer_lens": lambda model, batch, capacity: TransformerLensKeyValueCache.init_cache(
        model.cfg, model.cfg.device, batch
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=3)
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument("--pes", nargs="+", default=["nope"], choices=PE_KINDS)
    parser.add_argument("--length", type=int, default=16, help="the unseen length whose test examples decode")
    parser.add_argument("--examples", type=int, default=128, help="of them, a seeded sample")
    parser.add_argument("--scratchpad", default="full")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--name", default="kv_cache", help="the results file's stem")
    args = parser.parse_args()
    device = setup(args)
    task = get_task("addition", train_length=8, template="authors", scratchpad=args.scratchpad)
    tokenizer = Tokenizer.for_task(task)
    of_length = [e for e in task.examples("test", seed=args.seed) if e.length == args.length]
    examples = sampled(of_length, args.examples, args.seed)
    batches = decode_batches(examples, tokenizer, args.batch_size, device)
    new_tokens = sum(len(p) * n for p, n in batches)
    never = len(tokenizer)  # an id outside the vocabulary: no batch stops early
    load_before = os.getloadavg()

    variants, outputs = {}, {}
    for pe in args.pes:
        model = build_model(
            pe, vocab_size=len(tokenizer), preset=args.preset, seed=args.seed, device=device, n_ctx=2048
        ).eval()
        for cache in CACHES:
            name = f"{pe}/{cache}"

            def run(model=model, cache=cache, name=name) -> None:
                model.key_value_cache = functools.partial(CACHES[cache], model)  # what greedy_decode asks for
                with torch.inference_mode():
                    outputs[name] = [
                        decoding.greedy_decode(model, prompts, n, never, tokenizer.pad_id) for prompts, n in batches
                    ]

            variants[name] = run
    print(f"{len(examples)} examples in {len(batches)} batches, {new_tokens} new tokens a pass; {args.repeats} repeats")
    timings = interleave(variants, repeats=args.repeats, calls=1, warmup=1, device=device)
    runs = timings[clock(device)]
    seconds = medians(runs)
    rows = []
    for pe in args.pes:
        ours, theirs = f"{pe}/probe", f"{pe}/transformer_lens"
        rows.append(
            {
                "pe": pe,
                "seconds": {cache: seconds[f"{pe}/{cache}"] for cache in CACHES},
                "speedup": paired_ratio(runs, theirs, ours),
                "speedup_wall": paired_ratio(timings["wall"], theirs, ours)["median"],
                "speedup_over_before": paired_ratio(runs, f"{pe}/probe_before", ours),
                "same_tokens": all(
                    torch.equal(a, b)
                    for other in CACHES
                    for a, b in zip(outputs[ours], outputs[f"{pe}/{other}"], strict=True)
                ),
            }
        )
    payload = {
        **header(
            "kv_cache",
            f"greedy_decode over addition + {args.scratchpad} scratchpad test examples of length {args.length}, "
            "probe's "
            "key-value cache (buffers written in place) against TransformerLens' (torch.cat each step); untrained "
            "model with <eos> unreachable, so each batch decodes its longest gold target + 1 tokens",
            device,
            load_before,
        ),
        "preset": args.preset,
        "length": args.length,
        "examples": len(examples),
        "batches": len(batches),
        "new_tokens_per_pass": new_tokens,
        "timing": f"{args.repeats} interleaved repeats after one warm-up each; seconds on the {clock(device)} "
        "clock; speed-ups are medians of per-repeat ratios (TransformerLens' time over probe's)",
        "results": rows,
    }
    path = write_json(args.name, device, payload)
    for row in rows:
        before, against_tl = row["speedup_over_before"]["median"], row["speedup"]["median"]
        print(f"{row['pe']:>7} {against_tl:.2f}x, over before {before:.2f}x; same tokens: {row['same_tokens']}")
    print(f"wrote {path}")
    return 0 if all(row["same_tokens"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
