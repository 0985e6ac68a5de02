"""What decoding a scratchpad run only to the gold's length changes, against the authors' budget.

    python bench/decode_budget.py RUN [RUN ...]                # run folders (globs welcome)
    python bench/decode_budget.py 'checkpoints/reproduce-section6/addition+scratchpad=*/*/seed0' --n-test 300

Greedy decoding stops one token past a batch's longest gold target. The authors decode a scratchpad run to
1,500 positions, prompt included (``generation_max_length: 1500`` in their
``configs/data/w_scratchpad.jsonnet``), and score the answer read after the scratchpad, so a model that
writes a longer scratchpad than the gold and still lands on the right answer scores there and would not at
the gold's budget (``evaluate_examples`` decodes such rows on, :data:`probe.tasks.decoding.SCRATCHPAD_POSITIONS`).
Only a prediction without ``<eos>`` inside the gold's budget can change: per run, this decodes the evaluation's
examples (the first 500 held-out IID ones and ``--n-test`` of the test split, as ``probe eval`` draws them) at
the gold's budget, decodes the rows cut there again to the authors', and counts the verdicts that change (and
the rows whose second decoding, in a smaller batch, parts from the first within the gold's budget: rounding,
not budget). One thread, the run's weights on a CPU. Writes bench/results/decode_budget_cpu.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import measure_runs, write_result  # noqa: E402

from probe.models.checkpoint import read_checkpoint_config  # noqa: E402
from probe.runs.folders import Run  # noqa: E402
from probe.subjects.resolve import resolve  # noqa: E402
from probe.tasks import Tokenizer  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402
from probe.tasks.decoding import decoding_batches, greedy_decode, is_correct  # noqa: E402

AUTHORS_POSITIONS = 1500  # their generation_max_length for a scratchpad: prompt and generated tokens


def compare(path: Path, n_test: int, n_valid: int, positions: int) -> dict:
    """One run: its examples, those cut at our budget, and each verdict at ours and at ``positions``."""
    model = resolve(Run(path, read_checkpoint_config(path))).load("cpu").model
    meta = model.metadata
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    examples = task.held_out(n_valid) + task.examples("test", n=n_test, seed=0)
    answer_of = task.answer_reader()
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    answers = [answer_of(e.target) if answer_of else None for e in examples]
    ours, theirs, cut, extra, diverged = [False] * len(examples), [False] * len(examples), [], 0, 0
    for chunk, longest in decoding_batches(prompts, targets, 256):
        batch = torch.tensor([prompts[i] for i in chunk])  # [batch, prompt]
        short = greedy_decode(model, batch, longest, tokenizer.eos_id, tokenizer.pad_id).tolist()
        rows = [k for k, ids in enumerate(short) if tokenizer.eos_id not in ids]
        budget = min(positions, model.cfg.n_ctx + 1) - batch.shape[1]
        again = greedy_decode(model, batch[rows], budget, tokenizer.eos_id, tokenizer.pad_id).tolist() if rows else []
        longer = dict(zip(rows, again))
        extra += sum(len(ids) - len(short[k]) for k, ids in longer.items())
        diverged += sum(ids[: len(short[k])] != short[k] for k, ids in longer.items())  # a smaller batch's rounding
        for k, i in enumerate(chunk):
            ours[i] = is_correct(short[k], targets[i], tokenizer, answer_of, answers[i])
            theirs[i] = is_correct(longer.get(k, short[k]), targets[i], tokenizer, answer_of, answers[i])
        cut += [chunk[k] for k in rows]
    seen = [task.is_seen(e.length) for e in examples]
    return {
        "run": str(path),
        "examples": len(examples),
        "cut_at_our_budget": len(cut),
        "cut_unseen_lengths": sum(not seen[i] for i in cut),
        "extra_tokens_decoded": extra,
        "cut_rows_decoded_otherwise_again": diverged,
        "right_ours": sum(ours),
        "right_authors": sum(theirs),
        "changed": sum(a != b for a, b in zip(ours, theirs)),
        "changed_to_right": sum(b and not a for a, b in zip(ours, theirs)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (a glob is expanded)")
    parser.add_argument("--n-test", type=int, default=300, help="test examples per run (default 300)")
    parser.add_argument("--n-valid", type=int, default=500, help="held-out IID examples, as probe eval's")
    parser.add_argument("--positions", type=int, default=AUTHORS_POSITIONS, help="the authors' budget")
    parser.add_argument("--name", default="decode_budget")
    args = parser.parse_args()
    rows, load = measure_runs(args.runs, lambda path: compare(path, args.n_test, args.n_valid, args.positions))
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k != "run"}
    print("all: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    what = "greedy decoding to the longest gold target + 1 against the authors' 1,500 positions, per run"
    write_result(args.name, what, load, positions=args.positions, n_test=args.n_test, runs=rows, total=total)


if __name__ == "__main__":
    main()
