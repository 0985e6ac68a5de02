"""Vectorised layerwise min-head distance vs a straightforward per-pair, per-row loop.

    python bench/layer_distance.py [--device cuda] [--lengths 64 128 256]

Times `probe.metrics.layer_distances` and a plain Python loop (for each layer, head pair and
query row: `jsd` on the row's keys ≤ t, then the mean and the minimum) on the same random causal
patterns, side by side, and writes bench/results/layer_distance_<device>.json. A loop that would
run past --loop-budget seconds is timed on its first head pairs and extrapolated per pair (every
pair costs the same: T rows); the JSON says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from common import header, write_json

from probe.metrics import jsd, layer_distances


def causal_patterns(n_layers: int, n_heads: int, T: int, device: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n_layers, n_heads, T, T, generator=gen)
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return logits.softmax(-1).to(device=device, dtype=dtype)  # [layer, head, query, key]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_vectorised(A: torch.Tensor, B: torch.Tensor, repeats: int) -> tuple[list[float], torch.Tensor]:
    layer_distances(A, B)  # warm-up
    runs = []
    for _ in range(repeats):
        sync(str(A.device))
        start = time.perf_counter()
        result = layer_distances(A, B)
        sync(str(A.device))
        runs.append(time.perf_counter() - start)
    return runs, result.pairwise


def time_loop(A: torch.Tensor, B: torch.Tensor, budget_s: float) -> tuple[float, dict[tuple[int, int, int], float]]:
    """The straightforward loop, pair by pair, until every pair is done or the budget is spent."""
    n_layers, n_heads, T, _ = A.shape
    done: dict[tuple[int, int, int], float] = {}
    start = time.perf_counter()
    for layer in range(n_layers):
        for a in range(n_heads):
            for b in range(n_heads):
                total = 0.0
                for t in range(T):
                    total += float(jsd(A[layer, a, t, : t + 1], B[layer, b, t, : t + 1]))
                done[layer, a, b] = total / T
                if time.perf_counter() - start > budget_s:
                    return time.perf_counter() - start, done
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the vectorised version")
    parser.add_argument("--loop-budget", type=float, default=30.0, help="seconds of loop per length")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads for both sides (default: torch's own choice)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is visible to torch; use --device cpu", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)

    load_before = os.getloadavg()
    rows = []
    for T in args.lengths:
        A = causal_patterns(args.layers, args.heads, T, args.device, dtype, seed=T)
        B = causal_patterns(args.layers, args.heads, T, args.device, dtype, seed=T + 1)
        runs, pairwise = time_vectorised(A, B, args.repeats)
        loop_s, done = time_loop(A, B, args.loop_budget)
        total_pairs = args.layers * args.heads**2
        loop_estimate = loop_s / len(done) * total_pairs
        vectorised = statistics.median(runs)
        rows.append(
            {
                "T": T,
                "vectorised_s": vectorised,
                "vectorised_runs_s": runs,
                "loop_s": loop_estimate,
                "loop_measured_s": loop_s,
                "loop_pairs_timed": len(done),
                "loop_pairs_total": total_pairs,
                "loop_extrapolated": len(done) < total_pairs,
                "speedup": loop_estimate / vectorised,
                "max_abs_diff": max(abs(float(pairwise[k]) - v) for k, v in done.items()),
            }
        )
        r = rows[-1]
        print(
            f"T={T:4d}  vectorised {vectorised * 1e3:9.2f} ms   loop {loop_estimate:8.2f} s"
            f"{' (extrapolated from ' + str(len(done)) + ' pairs)' if r['loop_extrapolated'] else ''}"
            f"   speed-up {r['speedup']:8.1f}x   max |diff| {r['max_abs_diff']:.1e}",
            flush=True,
        )

    payload = {
        **header(
            "layer_distance",
            "probe.metrics.layer_distances (all head pairs, min per layer) vs a Python loop over "
            "layers, head pairs and query rows calling probe.metrics.jsd on keys <= t; same "
            "random causal patterns, same device, same run",
            args.device,
            load_before,
        ),
        "torch": torch.__version__,
        "dtype": args.dtype,
        "n_layers": args.layers,
        "n_heads": args.heads,
        "vectorised_timing": f"median of {args.repeats} runs after one warm-up",
        "loop_timing": f"one run; past {args.loop_budget:g} s it stops after the current head pair and "
        "extrapolates per pair (each pair is T rows, so pairs cost the same)",
        "results": rows,
    }
    path = write_json("layer_distance", args.device, payload)
    print(f"\n{'T':>5} {'vectorised (ms)':>16} {'loop (s)':>10} {'speed-up':>10}")
    for r in rows:
        print(
            f"{r['T']:>5} {r['vectorised_s'] * 1e3:>16.2f} {r['loop_s']:>10.2f} {r['speedup']:>9.0f}x"
            f"{'  (loop extrapolated)' if r['loop_extrapolated'] else ''}"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
