"""How often a scratchpad run's unseen-length predictions write the scratchpad's end more than once.

    python bench/repeated_answers.py RUN [RUN ...]             # run folders (globs welcome)
    python bench/repeated_answers.py '/work/runs/section6/runs-steps4000/lego+scratchpad=C/*/seed1' --n-test 200

The authors read a scratchpad prediction's answer between its first scratchpad end (``. Thus, ``) and the next,
and their parity and LEGO readers want the answer ended by a period (``.*The answer is\\s*(.+)\\s*\\.``). A model
that writes its conclusion twice (``... . Thus, The answer is +1 . Thus, The answer is +1.``) leaves the first
answer without its period, so it scores wrong whatever sign it holds, as probe scores it too
(:func:`probe.tasks.scratchpad.final_answer`). Per run, over ``--n-test`` test examples at unseen lengths (as
``probe eval`` draws them, seed 0): how many score right, how many write the end more than once, and how many
of those give the gold answer first (read with its period restored). One thread, the run's weights on a CPU.
Writes bench/results/repeated_answers_cpu.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import runs_main, scratchpad_scorer  # noqa: E402

from probe.tasks.scratchpad import end_marker, final_answer  # noqa: E402


def measure(path: Path, n_test: int) -> dict:
    """One run's unseen-length predictions: scored right, the end written twice or more, and of those the
    gold answer given first."""
    scorer = scratchpad_scorer(path, "it has no scratchpad end to write twice")
    task = scorer.task
    examples = [e for e in task.examples("test", n=n_test, seed=0) if not task.is_seen(e.length)]
    result = scorer.decode(examples)
    close = end_marker(task.template)
    twice = [(e, p) for e, p in zip(examples, result.predictions) if p.count(close) > 1]
    first = [task.read_answer(final_answer(p, task.template) + ".") == task.answer_of(e.target) for e, p in twice]
    return {
        "run": str(path),
        "unseen": len(examples),
        "right": sum(result.correct),
        "end_written_twice": len(twice),
        "of_those_gold_first": sum(first),
    }


def main() -> None:
    options = {"--n-test": {"type": int, "default": 200, "help": "test examples drawn, the unseen-length ones kept"}}
    what = "scratchpad predictions that write their end more than once"
    runs_main(__doc__, "repeated_answers", what, options, measure)


if __name__ == "__main__":
    main()
