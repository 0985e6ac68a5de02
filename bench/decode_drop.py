"""Greedy decoding that drops the rows that have ended, against decoding every row to the batch's end.

    python bench/decode_drop.py RUN [RUN ...]                  # run folders (globs welcome)
    python bench/decode_drop.py '/work/runs/section6/runs/lego+scratchpad=I+C+O+R/*/seed0' --n-test 400

A decoding step reads every cached key of every row, and a long scratchpad's cache is most of a step's work:
at ``tiny``, 156 rows at 1,500 positions read 240 MB a layer a step. A batch decodes to its longest gold (then
its unended rows on to 1,500 positions), so a row that ended early went on being computed, as padding, to the
batch's end. Now rows that have ended leave the batch and the cache once they are
:data:`probe.tasks.decoding.DROP_ENDED` of it. Per run, on the evaluation's examples (the first ``--n-valid``
held-out IID ones and ``--n-test`` of the test split, as ``probe eval`` draws them), each decoding batch is
scored both ways as ``evaluate_examples`` scores it (to the gold's budget, then the unended rows decoded on),
timed side by side (process CPU time, one thread, which way goes first alternating batch by batch), and the
rows whose ids differ and the verdicts that differ are counted (the rows left compute in a narrower batch:
the same values up to its matrix products' rounding). Writes bench/results/decode_drop_cpu.json (``--name``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import each_run, trained_runs, write_result  # noqa: E402

from probe.models.checkpoint import read_checkpoint_config  # noqa: E402
from probe.runs.folders import Run  # noqa: E402
from probe.subjects.resolve import resolve  # noqa: E402
from probe.tasks import Tokenizer, decoding  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402

WAYS = {"every_row": float("inf"), "drop_ended": decoding.DROP_ENDED}  # the fraction of ended rows that drops them


def scored(model, tokenizer, batch: torch.Tensor, longest: int, answer_of, drop: float) -> list[list[int]]:
    """A decoding batch's rows as ``evaluate_examples`` decodes them, with rows dropped at ``drop``."""
    decoding.DROP_ENDED = drop
    rows = decoding.greedy_decode(model, batch, longest, tokenizer.eos_id, tokenizer.pad_id).tolist()
    return decoding._decoded_on(model, batch, rows, tokenizer, True, None) if answer_of else rows


def compare(path: Path, n_test: int, n_valid: int) -> dict:
    model = resolve(Run(path, read_checkpoint_config(path))).load("cpu").model
    meta = model.metadata
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    answer_of = task.answer_reader()
    examples = task.held_out(n_valid) + task.examples("test", n=n_test, seed=0)
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    answers = [answer_of(e.target) if answer_of else None for e in examples]
    seconds = dict.fromkeys(WAYS, 0.0)
    differ = verdicts = 0
    with torch.inference_mode():
        for b, (chunk, longest) in enumerate(decoding.decoding_batches(prompts, targets, 256)):
            batch = torch.tensor([prompts[i] for i in chunk])  # [batch, prompt]
            out = {}
            for way in sorted(WAYS, reverse=b % 2 == 1):  # which goes first alternates batch by batch
                start = time.process_time()
                out[way] = scored(model, tokenizer, batch, longest, answer_of, WAYS[way])
                seconds[way] += time.process_time() - start
            differ += sum(a != d for a, d in zip(out["every_row"], out["drop_ended"]))
            verdicts += sum(
                decoding.is_correct(a, targets[i], tokenizer, answer_of, answers[i])
                != decoding.is_correct(d, targets[i], tokenizer, answer_of, answers[i])
                for a, d, i in zip(out["every_row"], out["drop_ended"], chunk)
            )
    return {
        "run": str(path),
        "examples": len(examples),
        "rows_that_differ": differ,
        "verdicts_that_differ": verdicts,
        "seconds_every_row": seconds["every_row"],
        "seconds_drop_ended": seconds["drop_ended"],
        "speedup": seconds["every_row"] / seconds["drop_ended"] if seconds["drop_ended"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (a glob is expanded)")
    parser.add_argument("--n-test", type=int, default=400, help="test examples per run (default 400)")
    parser.add_argument("--n-valid", type=int, default=100, help="held-out IID examples (default 100)")
    parser.add_argument("--name", default="decode_drop")
    args = parser.parse_args()
    load = os.getloadavg()
    torch.set_num_threads(1)
    rows = each_run(trained_runs(args.runs), lambda path: compare(path, args.n_test, args.n_valid))
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in ("run", "speedup")}
    total["speedup"] = total["seconds_every_row"] / total["seconds_drop_ended"]
    print("all: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    what = "greedy decoding dropping the rows that ended (at DROP_ENDED of a batch) vs every row to the batch's end"
    write_result(
        args.name,
        what,
        load,
        drop_ended=decoding.DROP_ENDED,
        n_test=args.n_test,
        n_valid=args.n_valid,
        runs=rows,
        total=total,
    )


if __name__ == "__main__":
    main()
