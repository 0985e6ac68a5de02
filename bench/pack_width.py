"""Packed rows twice a batch's longest example against rows as wide as it, on the Section 6 scratchpads.

    python bench/pack_width.py                                   # addition, parity, polynomial: full format
    python bench/pack_width.py --tasks addition --scratchpad C --repeats 5

A packed row holds up to ``pack_width`` x the batch's longest example (:meth:`EncodedSet.packed_batch`), and a
row's attention costs the square of its width. Where lengths spread widely (a scratchpad's, tens of tokens to
hundreds) rows twice the longest spend much of a step on attention between examples that the mask then drops.
Per task, the NoPE run of the Section 6 study (``tiny``, one thread): the padded tokens a batch holds and its row
width at each ``pack_width`` (the first epoch's batches), and the training tokens/s at each, timed in turns
(:func:`probe.studies.sweep.cost.measure_tokens_per_second`, 5 steps a turn, the median of ``--repeats``);
seconds a step = tokens / (tokens/s). Writes bench/results/pack_width_cpu.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402

from probe.studies import reproduce  # noqa: E402
from probe.studies.sweep.cost import batch_geometry, measure_tokens_per_second  # noqa: E402

WIDTHS = (2, 1)


def compare(run, repeats: int) -> dict:
    """One run's batch geometry and step time at each packing width, the widths timed in turns."""
    variants = {w: dataclasses.replace(run, config=dataclasses.replace(run.config, pack_width=w)) for w in WIDTHS}
    geometry = {w: batch_geometry(v) for w, v in variants.items()}
    speeds: dict[int, list[float]] = {w: [] for w in WIDTHS}
    for _ in range(repeats):
        for w, variant in variants.items():
            speeds[w].append(measure_tokens_per_second(variant, "cpu", 5, 1, geometry[w][0]))
    seconds = {w: geometry[w][0] / statistics.median(speeds[w]) for w in WIDTHS}
    return {
        "tokens_per_batch": {w: geometry[w][0] for w in WIDTHS},
        "row_width": {w: geometry[w][1] for w in WIDTHS},
        "tokens_per_second": {w: statistics.median(speeds[w]) for w in WIDTHS},
        "seconds_per_step": seconds,
        "width_2_over_width_1": seconds[2] / seconds[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["addition", "parity", "polynomial"])
    parser.add_argument("--scratchpad", default="full")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()
    rows = {}
    for run in reproduce.plan("section6", "/tmp/pack_width", seeds=1, tasks=args.tasks):
        if run.config.pe != "nope" or run.config.task_options.get("scratchpad") != args.scratchpad:
            continue
        rows[run.config.task] = row = compare(run, args.repeats)
        tokens, width = row["tokens_per_batch"], row["row_width"]
        print(
            f"{run.config.task} {args.scratchpad}: tokens {tokens[2]:.0f} -> {tokens[1]:.0f}, width {width[2]:.0f} -> "
            f"{width[1]:.0f}, a step {row['width_2_over_width_1']:.2f}x faster",
            flush=True,
        )
    what = "packed rows twice the longest example against rows as wide as it"
    write_result("pack_width", what, load, threads=1, scratchpad=args.scratchpad, tasks=rows)


if __name__ == "__main__":
    main()
