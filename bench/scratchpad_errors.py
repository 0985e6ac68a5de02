"""Where a scratchpad run goes wrong: in a step of its scratchpad, after every step, or by never ending it.

    python bench/scratchpad_errors.py RUN [RUN ...]             # run folders (globs welcome)
    python bench/scratchpad_errors.py '/work/runs/section6/runs-steps4000/polynomial+scratchpad=C/*/seed1'
    python bench/scratchpad_errors.py 'CHECKPOINTS/parity+scratchpad=full/*/seed1' --unseen --name NAME

A scratchpad run under the IID bar has not learnt its training lengths, and its predictions say where: a prediction
scored wrong whose scratchpad (the text before its first scratchpad end) is the gold's, word for word, wrote every
step right and missed the conclusion, which the format leaves to one step (polynomial evaluation's C writes each
term with its power worked out, ``3 * 2 ** 3 = 3 * 8``, and neither the product nor a running sum, so the answer
is every term's product summed mod 10 in one token). Per run, over ``--n-valid`` IID held-out examples
(``probe eval``'s first ones; with ``--unseen``, the unseen-length ones of ``--n-test`` test examples at seed 0):
how many score right, and of the wrong how many wrote every step right, how many wrote one wrong, and how many
never ended the scratchpad (no answer read: under a constant guess's floor). One thread, the run's weights on a
CPU. Writes bench/results/<--name>_cpu.json."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import runs_main, scratchpad_scorer  # noqa: E402

from probe.tasks.scratchpad import end_marker  # noqa: E402


def where_wrong(prediction: str, gold: str, close: str) -> str:
    """``steps right`` where ``prediction`` ends its scratchpad with ``close`` after the gold's steps word for
    word, ``no end`` where it never writes ``close``, else ``a step wrong``."""
    if close not in prediction:
        return "no end"
    return "steps right" if prediction.split(close)[0].split() == gold.split(close)[0].split() else "a step wrong"


def measure(path: Path, n_valid: int, n_test: int, unseen: bool) -> dict:
    """One run's verdicts on its IID held-out examples (or, ``unseen``, the test split's unseen lengths), the
    wrong ones sorted by where they went wrong."""
    scorer = scratchpad_scorer(path, "it has no scratchpad steps to get right")
    task = scorer.task
    if unseen:
        examples = [e for e in task.examples("test", n=n_test, seed=0) if not task.is_seen(e.length)]
    else:
        examples = task.held_out(n_valid)
    result = scorer.decode(examples)
    close = end_marker(task.template)
    verdicts = zip(examples, result.predictions, result.correct)
    wrong = [where_wrong(p, e.target, close) for e, p, ok in verdicts if not ok]
    return {
        "run": str(path),
        "unseen" if unseen else "iid": len(examples),
        "right": sum(result.correct),
        "wrong_steps_right": wrong.count("steps right"),
        "wrong_a_step_wrong": wrong.count("a step wrong"),
        "wrong_no_end": wrong.count("no end"),
    }


def main() -> None:
    options = {
        "--n-valid": {"type": int, "default": 200, "help": "IID held-out examples (default 200)"},
        "--unseen": {"action": "store_true", "help": "the test split's unseen lengths instead of the IID ones"},
        "--n-test": {"type": int, "default": 200, "help": "with --unseen: test examples drawn (default 200)"},
        "--name": {"default": "scratchpad_errors", "help": "the result's name (default scratchpad_errors)"},
    }
    runs_main(__doc__, "scratchpad_errors", "where scratchpad runs go wrong", options, measure)


if __name__ == "__main__":
    main()
