"""A checkpoint-selection pass in the validation set's order against shortest first, on trained runs.

    python bench/selection_order.py RUN [RUN ...]          # trained run folders (the study's, e.g.)

The authors' protocol scores its IID validation set (1,000 examples) 20 times a run, one teacher-forced
forward pass per batch of 256; each batch is padded to its longest example. In the set's own (random) order
most batches pad to nearly the longest of all; :func:`probe.tasks.decoding.length_batches` sorts them first.
Per run: the padded tokens each way, the seconds per pass each way (interleaved repeats on one thread, as a
study's worker scores), and whether the two score every example alike (the selection they make must not
change). Writes bench/results/selection_order_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, interleave, write_json  # noqa: E402

from probe.runs.folders import load_run  # noqa: E402
from probe.tasks.decoding import TEACHER_FORCED_BATCH, length_batches  # noqa: E402
from probe.training.sources import training_source  # noqa: E402


def scores(model, data, batches: list[torch.Tensor]) -> list[bool]:
    """Each example's teacher-forced exact match, the batches cut as given."""
    correct = [False] * len(data)
    with torch.no_grad():
        for index in batches:
            tokens, mask = data.batch(index)  # [batch, pos], [batch, pos - 1]
            hits = (model(tokens)[:, :-1].argmax(-1) == tokens[:, 1:]) | ~mask
            for i, hit in zip(index.tolist(), hits.all(dim=1).tolist()):
                correct[i] = hit
    return correct


def compare(folder: Path, repeats: int) -> dict:
    """One run's padded tokens, seconds per pass and scores, the set's order against shortest first."""
    model = load_run(folder).eval()
    config = model.metadata["training"]
    authors = config["protocol"] == "authors"
    source = training_source(config["task"], config["task_options"], config["seed"], folder, authors=authors)
    data = source.validation_set(config["eval_examples"])
    cuts = {
        "set_order": list(torch.arange(len(data)).split(TEACHER_FORCED_BATCH)),
        "shortest_first": length_batches(data.lengths, TEACHER_FORCED_BATCH),
    }
    timed = interleave(
        {name: (lambda b=b: scores(model, data, b)) for name, b in cuts.items()},
        repeats=repeats,
        calls=1,
        warmup=1,
        device=torch.device("cpu"),
        progress=False,
    )["wall"]
    seconds = {name: statistics.median(t) for name, t in timed.items()}
    return {
        "examples": len(data),
        "padded_tokens": {name: sum(int(data.lengths[b].max()) * len(b) for b in cut) for name, cut in cuts.items()},
        "seconds_per_pass": seconds,
        "set_order_over_shortest_first": seconds["set_order"] / seconds["shortest_first"],
        "same_scores": scores(model, data, cuts["set_order"]) == scores(model, data, cuts["shortest_first"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="trained run folders")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = {}
    for folder in args.runs:
        rows[str(folder)] = row = compare(folder, args.repeats)
        print(
            f"{folder}: {row['padded_tokens']['set_order']:,} -> {row['padded_tokens']['shortest_first']:,} tokens, "
            f"{row['set_order_over_shortest_first']:.2f}x, same scores: {row['same_scores']}",
            flush=True,
        )
    ratios = [r["set_order_over_shortest_first"] for r in rows.values()]
    payload = {
        **header("selection_order", "a selection pass in the set's order against shortest first", "cpu", load),
        "threads": 1,
        "runs": rows,
        "median_set_order_over_shortest_first": statistics.median(ratios),
        "all_same_scores": all(r["same_scores"] for r in rows.values()),
    }
    print(f"wrote {write_json('selection_order', 'cpu', payload)}")


if __name__ == "__main__":
    main()
