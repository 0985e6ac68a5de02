"""What evaluating a study costs beside training it: `probe eval`'s scoring of trained runs, greedy decoding
token by token (the old path) against one teacher-forced pass per batch (greedy decoding's exact match,
:func:`probe.analysis.evaluation.score_examples`), on each run's whole evaluation set (500 IID validation
examples and the test split), with the run's training time beside it.

    python bench/eval_speed.py --runs /work/runs/section3/copy+split=paper+variant=count/*/seed0

Writes ``bench/results/eval_speed_<device>.json``: per run the process CPU seconds of each scoring (one
thread; interleaved, ``--repeats`` rounds, medians), whether both give the same exact match per example,
and the run's training seconds from its ``config.json`` (one thread too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, interleave, setup, write_json  # noqa: E402

from probe.runs.folders import load_run  # noqa: E402
from probe.tasks import Tokenizer  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402
from probe.tasks.decoding import evaluate_examples, teacher_forced_examples  # noqa: E402


def _call(fn, name, outcomes, model, tokenizer, examples, device):
    """A call of one scorer that keeps its per-example outcome in ``outcomes[name]``."""

    def call() -> None:
        outcomes[name] = fn(model, tokenizer, examples, device=device).correct

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="trained run folders")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="eval_speed")
    args = parser.parse_args()
    import os

    load = os.getloadavg()
    device = setup(args)
    rows = []
    for folder in args.runs:
        model = load_run(folder, device=device)
        meta = model.metadata
        task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
        tokenizer = Tokenizer.from_dict(meta["tokenizer"])
        examples = task.examples("valid", n=500, seed=0) + task.examples("test", seed=0)
        outcomes: dict[str, list[bool]] = {}
        scorers = {"greedy": evaluate_examples, "teacher_forced": teacher_forced_examples}
        timings = interleave(
            {name: _call(fn, name, outcomes, model, tokenizer, examples, device) for name, fn in scorers.items()},
            repeats=args.repeats,
            calls=1,
            warmup=0,
            device=device,
        )
        stored = json.loads((Path(folder) / "config.json").read_text())
        cpu = {name: statistics.median(values) for name, values in timings["cpu"].items()}
        rows.append(
            {
                "run": folder,
                "examples": len(examples),
                "cpu_seconds": cpu,
                "speed_up": cpu["greedy"] / cpu["teacher_forced"],
                "same_exact_match": outcomes["greedy"] == outcomes["teacher_forced"],
                "exact_match": sum(outcomes["teacher_forced"]) / len(examples),
                "train_seconds": stored.get("metrics", {}).get("train_seconds"),
            }
        )
        print(
            f"{folder}: greedy {cpu['greedy']:.1f} s, teacher forced {cpu['teacher_forced']:.1f} s "
            f"({rows[-1]['speed_up']:.1f}x), same per example: {rows[-1]['same_exact_match']}; "
            f"training took {rows[-1]['train_seconds']:.0f} s",
            flush=True,
        )
    result = header(args.name, __doc__.split("\n")[0], device, load) | {"clock": "process CPU time", "runs": rows}
    print(f"wrote {write_json(args.name, device, result)}")


if __name__ == "__main__":
    main()
