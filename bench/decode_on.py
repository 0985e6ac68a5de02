"""A scratchpad's unended rows decoded on from where they stopped, against decoded again from their prompts.

    python bench/decode_on.py RUN [RUN ...]                  # run folders (globs welcome)
    python bench/decode_on.py '/work/runs/section6/runs/addition+scratchpad=full/*/seed0' --n-test 200

``evaluate_examples`` decodes a batch to its longest gold target + 1; rows scored by their answer with no
``<eos>`` by then go on to the authors' 1,500 positions (:func:`probe.tasks.decoding._decoded_on`). They used to
be decoded again from their prompts, every token they had re-derived a step at a time; now their prompt and
what they generated are read in one pass and decoding goes on from there. Per run, on the evaluation's examples
(the first ``--n-valid`` held-out IID ones and ``--n-test`` of the test split, as ``probe eval`` draws them),
this decodes each batch to its gold's budget, then its unended rows on both ways, timed side by side (process
CPU time, one thread, the two ways alternating batch by batch), and counts the rows whose ids differ at the end
and the verdicts that differ. Writes bench/results/decode_on_cpu.json (``--name``: another stem).
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
from probe.tasks import Tokenizer  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402
from probe.tasks.decoding import SCRATCHPAD_POSITIONS, _decoded_on, decoding_batches, greedy_decode, is_correct  # noqa: E402


def again_from_prompts(model, prompts: torch.Tensor, rows: list[list[int]], eos: int, pad: int) -> list[list[int]]:
    """The unended of ``rows`` decoded again from their prompts to the authors' budget (the way before)."""
    cut = [k for k, ids in enumerate(rows) if eos not in ids]
    budget = min(SCRATCHPAD_POSITIONS, model.cfg.n_ctx + 1) - prompts.size(1)
    if not cut or budget <= len(rows[cut[0]]):
        return rows
    again = dict(zip(cut, greedy_decode(model, prompts[cut], budget, eos, pad).tolist()))
    return [again.get(k, ids) for k, ids in enumerate(rows)]


def compare(path: Path, n_test: int, n_valid: int) -> dict:
    model = resolve(Run(path, read_checkpoint_config(path))).load("cpu").model
    meta = model.metadata
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    answer_of = task.answer_reader()
    if answer_of is None:
        sys.exit(f"{path}: its task is scored token for token; nothing is decoded on")
    examples = task.held_out(n_valid) + task.examples("test", n=n_test, seed=0)
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    answers = [answer_of(e.target) for e in examples]
    eos, pad = tokenizer.eos_id, tokenizer.pad_id
    seconds = {"again": 0.0, "on": 0.0}
    cut = differ = verdicts = 0
    with torch.inference_mode():
        for b, (chunk, longest) in enumerate(decoding_batches(prompts, targets, 256)):
            batch = torch.tensor([prompts[i] for i in chunk])  # [batch, prompt]
            short = greedy_decode(model, batch, longest, eos, pad).tolist()
            ways = {
                "again": lambda batch=batch, short=short: again_from_prompts(model, batch, short, eos, pad),
                "on": lambda batch=batch, short=short: _decoded_on(model, batch, short, tokenizer, True, None),
            }
            out = {}
            for way in sorted(ways, reverse=b % 2 == 1):  # which goes first alternates batch by batch
                start = time.process_time()
                out[way] = ways[way]()
                seconds[way] += time.process_time() - start
            cut += sum(eos not in ids for ids in short)
            differ += sum(a != o for a, o in zip(out["again"], out["on"]))
            verdicts += sum(
                is_correct(a, targets[i], tokenizer, answer_of, answers[i])
                != is_correct(o, targets[i], tokenizer, answer_of, answers[i])
                for a, o, i in zip(out["again"], out["on"], chunk)
            )
    return {
        "run": str(path),
        "examples": len(examples),
        "unended_at_the_golds_budget": cut,
        "rows_that_differ": differ,
        "verdicts_that_differ": verdicts,
        "seconds_again_from_prompts": seconds["again"],
        "seconds_decoded_on": seconds["on"],
        "speedup": seconds["again"] / seconds["on"] if seconds["on"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (a glob is expanded)")
    parser.add_argument("--n-test", type=int, default=200, help="test examples per run (default 200)")
    parser.add_argument("--n-valid", type=int, default=100, help="held-out IID examples (default 100)")
    parser.add_argument("--name", default="decode_on")
    args = parser.parse_args()
    load = os.getloadavg()
    torch.set_num_threads(1)
    rows = each_run(trained_runs(args.runs), lambda path: compare(path, args.n_test, args.n_valid))
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in ("run", "speedup")}
    total["speedup"] = total["seconds_again_from_prompts"] / total["seconds_decoded_on"]
    print("all: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    what = "a scratchpad's rows unended at the gold's budget decoded on from where they stopped vs again from prompts"
    write_result(args.name, what, load, n_test=args.n_test, n_valid=args.n_valid, runs=rows, total=total)


if __name__ == "__main__":
    main()
