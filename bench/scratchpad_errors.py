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
never ended the scratchpad (no answer read: under a constant guess's floor). Of the wrong, where their scratchpad
first departs from the gold's (:func:`probe.tasks.scratchpad.first_wrong_step`, its step index counted, 0 for
the opening): on unseen lengths, at a step a training length's gold also has, or past the most steps one has
(``training_steps``, counted on the seen-length examples drawn and the IID held-out ones), which reads a model that
ran its steps right as far as training took them; and in which component it departs
(:func:`probe.tasks.scratchpad.first_wrong_component`, the authors' words). One thread, the run's weights on a
CPU. Writes bench/results/<--name>_cpu.json."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import runs_main, scratchpad_scorer  # noqa: E402

from probe.tasks.scratchpad import end_marker, first_wrong_component, first_wrong_step, written_steps  # noqa: E402


def where_wrong(prediction: str, gold: str, template: str) -> str:
    """``steps right`` where ``prediction`` ends its scratchpad after the gold's steps word for word, ``no end``
    where it never ends it, else ``a step wrong``."""
    if end_marker(template) not in prediction:
        return "no end"
    return "steps right" if first_wrong_step(prediction, gold, template) is None else "a step wrong"


def measure(path: Path, n_valid: int, n_test: int, unseen: bool) -> dict:
    """One run's verdicts on its IID held-out examples (or, ``unseen``, the test split's unseen lengths), the
    wrong ones sorted by where they went wrong, and by the step their scratchpad first departs from the gold's at."""
    scorer = scratchpad_scorer(path, "it has no scratchpad steps to get right")
    task, template = scorer.task, scorer.task.template
    drawn = task.examples("test", n=n_test, seed=0)
    examples = [e for e in drawn if not task.is_seen(e.length)] if unseen else task.held_out(n_valid)
    result = scorer.decode(examples)
    wrong = [(p, e.target) for e, p, ok in zip(examples, result.predictions, result.correct) if not ok]
    kinds = [where_wrong(p, gold, template) for p, gold in wrong]
    steps = [first_wrong_step(p, gold, template) for p, gold in wrong]
    parts = [first_wrong_component(p, gold, task.scratchpad) for p, gold in wrong] if template == "authors" else []
    seen = [e for e in drawn if task.is_seen(e.length)] + task.held_out(n_valid)
    most = max(len(written_steps(e.target, template)) for e in seen)
    return {
        "run": str(path),
        "unseen" if unseen else "iid": len(examples),
        "right": sum(result.correct),
        "wrong_steps_right": kinds.count("steps right"),
        "wrong_a_step_wrong": kinds.count("a step wrong"),
        "wrong_no_end": kinds.count("no end"),
        "training_steps": most,
        "wrong_first_step_off_within_training_steps": sum(k is not None and k <= most for k in steps),
        "wrong_first_step_off_past_training_steps": sum(k is not None and k > most for k in steps),
        "wrong_first_step_off": dict(sorted(Counter(k for k in steps if k is not None).items())),
        "wrong_first_component_off": dict(sorted(Counter(c for c in parts if c is not None).items())),
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
