"""What the authors' protocol costs a training step, and bf16 autocast against float32 on a CPU.

    python bench/protocol_step.py                        # tiny and small, the paper's five PEs, 1 thread
    python bench/protocol_step.py --presets small --pes nope t5

Per preset and PE, five variants train the same model from the same weights on the paper's SCAN
split (``split=paper``), each drawing its own batches as its protocol does, interleaved in rotated
order and timed on process CPU time:

- ``probe``: probe's sequences (``<bos>``), batches grouped by length, dropout on the embedding and
  the sublayer outputs;
- ``authors``: their sequences (no ``<bos>``), batches cut from a plain shuffle (so padded to the
  longest of a random 64), dropout at T5's sites, attention probabilities included (which takes the
  biased layers off the fused kernel while training);
- ``authors-packed``: the authors' batches packed into rows of up to twice the longest example,
  attention kept within each (``--pack``: the same scored tokens, less padding);
- ``authors-bf16``: the authors' under ``torch.autocast("cpu", dtype=torch.bfloat16)``;
- ``authors-packed-bf16``: packed and under bf16 autocast (``--pack --precision bf16``).

Each turn takes ``--calls`` consecutive batches of the variant's own stream, so the padding each
protocol pays is in the time. Turns must be long: probe's length-grouped batches cost 360-500 ms a
step at ``small`` depending on the lengths a turn draws, so 4 calls a turn put the packed step at
1.07-1.15x probe's where 30 calls put it at 1.23x (``protocol_step_small_nope_calls30_cpu.json``).
Ratios are per repeat, median over repeats. Beside them: mean padded tokens per batch of each
stream, and the time of one selection evaluation (teacher-forced exact match on the 1,000
validation examples) as a share of the study's 4,000-step run, which evaluates 20 times. Writes
bench/results/protocol_step_<device>.json.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import torch
from common import (
    add_common_args,
    header,
    interleave,
    medians,
    paired_ratio,
    setup,
    streamed_training_step,
    write_json,
)

from probe.models.registry import PAPER_PES
from probe.models.transformer import PETransformer
from probe.presets import RECIPES
from probe.tasks.batches import batch_stream
from probe.tasks.decoding import teacher_forced_exact_match
from probe.training.sources import TaskSource
from probe.training.train_config import TrainConfig

BATCH = 64  # the study's (probe reproduce: 4,000 steps of 64)
STUDY_STEPS = 4000
EVALUATIONS = 20


def padded_tokens(data, grouped: bool, batches: int, pack: bool = False) -> float:
    stream = batch_stream(data, BATCH, 0, grouped=grouped)
    cut = data.packed_batch if pack else data.batch
    sizes = [cut(index)[0].numel() for _, _, index in itertools.islice(stream, batches)]
    return sum(sizes) / len(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--pes", nargs="+", default=list(PAPER_PES))
    parser.add_argument("--calls", type=int, default=30, help="consecutive steps per variant per turn (default 30)")
    add_common_args(parser, repeats=5)
    args = parser.parse_args()
    device = setup(args)
    if device.type != "cpu":
        sys.exit("this benchmark measures the CPU (bf16 autocast on CUDA is already what training takes)")
    task = {"split": "paper"}
    sources = {name: TaskSource("scan", task, seed=0, authors=name == "authors") for name in ("probe", "authors")}
    data = {name: source.training_set(0) for name, source in sources.items()}
    load = os.getloadavg()
    presets = {}
    for preset in args.presets:
        p = RECIPES[preset]["dropout"] or 0.1  # the study's dropout
        rows = {}
        for pe in args.pes:
            variants, models = {}, {}
            for name, protocol, bf16, pack in (
                ("probe", "probe", False, False),
                ("authors", "authors", False, False),
                ("authors-packed", "authors", False, True),
                ("authors-bf16", "authors", True, False),
                ("authors-packed-bf16", "authors", True, True),
            ):
                config = TrainConfig(
                    task="scan", pe=pe, preset=preset, task_options=task, protocol=protocol, dropout=p, seed=args.seed
                )
                torch.manual_seed(args.seed)
                model = PETransformer(config.model_config(sources[protocol].vocab_size))
                models[name] = model
                stream = batch_stream(data[protocol], BATCH, args.seed, grouped=protocol == "probe")
                variants[name] = streamed_training_step(
                    model, stream, data[protocol], sites=protocol, p=p, pack=pack, bf16=bf16
                )
            print(f"{preset} {pe}", flush=True)
            timings = interleave(variants, repeats=args.repeats, calls=args.calls, warmup=1, device=device)
            valid = sources["authors"].validation_set(1000)
            started = time.process_time()
            teacher_forced_exact_match(models["authors"], valid)
            evaluation = time.process_time() - started
            step = medians(timings["cpu"])["authors"]
            rows[pe] = {
                "seconds_per_step": medians(timings["cpu"]),
                "authors_over_probe": paired_ratio(timings["cpu"], "authors", "probe"),
                "authors_packed_over_probe": paired_ratio(timings["cpu"], "authors-packed", "probe"),
                "bf16_over_float32": paired_ratio(timings["cpu"], "authors-bf16", "authors"),
                "packed_bf16_over_packed": paired_ratio(timings["cpu"], "authors-packed-bf16", "authors-packed"),
                "selection_evaluation_seconds": evaluation,
                "selection_share_of_study_run": EVALUATIONS * evaluation / (STUDY_STEPS * step),
            }
            print(
                f"  authors/probe {rows[pe]['authors_over_probe']['median']:.2f}  "
                f"packed/probe {rows[pe]['authors_packed_over_probe']['median']:.2f}  "
                f"bf16/float32 {rows[pe]['bf16_over_float32']['median']:.2f} "
                f"(packed {rows[pe]['packed_bf16_over_packed']['median']:.2f})  "
                f"selection {100 * rows[pe]['selection_share_of_study_run']:.1f}% of a run",
                flush=True,
            )
        presets[preset] = rows
    result = {
        **header(
            "protocol_step",
            "training step under the authors' protocol vs probe's, and bf16 vs float32, on SCAN's paper split",
            device,
            load,
        ),
        "batch": BATCH,
        "calls": args.calls,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "padded_tokens_per_batch": {
            "probe": padded_tokens(data["probe"], True, 500),
            "authors": padded_tokens(data["authors"], False, 500),
            "authors-packed": padded_tokens(data["authors"], False, 500, pack=True),
        },
        "presets": presets,
    }
    print(f"wrote {write_json('protocol_step', device, result)}")


if __name__ == "__main__":
    main()
