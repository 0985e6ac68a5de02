"""Adding a task, as docs/tasks.md says: a task class with its oracle test (a reviewer's rotate, the worked
example), a class missing what every task needs refused where it is defined, and the existing suite taking a
registered task in (its per-task checks run on it; the paper's ten stay checked in their groups)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from probe.tasks.base import Example, GeneratedTask, Option, positive_int, train_length_option
from probe.tasks.copy import WORDS
from probe.tasks.scan import Scan
from probe.tasks.words import vocabulary_of

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Rotate the following words:"


class Rotate(GeneratedTask):
    """Rotate the input words left by ``shift`` places (w1 w2 w3 w4 -> w2 w3 w4 w1 at shift 1)."""

    name = "rotate"
    summary = "rotate the input words left by `shift` places"
    length_unit = "input words"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(20, "threshold L on the number of input words"),
        "shift": Option(1, "a positive integer", positive_int, "how many places to rotate left"),
    }

    def sample(self, rng: random.Random, length: int) -> Example:
        return self.example_for(rng.choices(WORDS, k=length))

    def example_for(self, words: list[str]) -> Example:
        k = self.options["shift"] % len(words)
        return Example(f"{PROMPT} {' '.join(words)} .", " ".join(words[k:] + words[:k]), len(words))

    def vocabulary(self) -> list[str]:
        return vocabulary_of(PROMPT, ".", *WORDS)


# --- the oracle test a new task comes with ----------------------------------------------------


def test_rotate_against_hand_worked_examples():
    words = ["w1", "w2", "w3", "w4"]
    assert Rotate().example_for(words) == Example(f"{PROMPT} w1 w2 w3 w4 .", "w2 w3 w4 w1", 4)
    assert Rotate(shift=6).example_for(words).target == "w3 w4 w1 w2"  # 6 places on 4 words: 2
    assert Rotate(shift=4).example_for(words).target == "w1 w2 w3 w4"


# --- a class missing what every task needs ----------------------------------------------------


@pytest.mark.parametrize(
    ("base", "dropped", "message"),
    [
        (Rotate, "train_length", "'rotate': OPTIONS has no 'train_length', which every Task reads"),
        (Scan, "valid_fraction", "'scan': OPTIONS has no 'valid_fraction', which every FiniteTask reads"),
    ],
    ids=["generated", "finite"],
)
def test_a_task_without_an_option_its_base_reads_is_refused_where_it_is_defined(base, dropped, message):
    with pytest.raises(TypeError, match=message):
        type("Lacking", (base,), {"OPTIONS": {k: v for k, v in base.OPTIONS.items() if k != dropped}})


def test_a_task_without_a_summary_is_refused_where_it_is_defined():
    with pytest.raises(TypeError, match="task class Unsaid sets no summary, length_unit"):

        class Unsaid(GeneratedTask):
            name = "unsaid"
            OPTIONS: ClassVar[dict[str, Option]] = Rotate.OPTIONS
            sample = Rotate.sample
            vocabulary = Rotate.vocabulary


def test_an_abstract_task_needs_nothing_yet():
    class Family(GeneratedTask):  # sample and vocabulary still abstract: its subclasses set the rest
        pass

    assert Family.__name__ == "Family"


# --- the existing suite with a task registered --------------------------------------------------

PLUGIN = f"""
import sys

sys.path.insert(0, {str(ROOT / "tests")!r})
from probe.tasks import TASKS
from test_task_extension import Rotate

TASKS[Rotate.name] = Rotate
"""
PER_TASK = (
    "test_tasks.py::test_options_rebuild_the_same_task",
    "test_tasks.py::test_texts_are_tidy",
    "test_tasks.py::test_length_splits",
    "test_tasks.py::test_determinism",
    "test_tasks.py::test_vocabulary_comes_from_the_alphabet",
)
REGISTRY = (
    "test_tasks.py::test_the_registry_holds_the_papers_ten_tasks",
    "test_tasks.py::test_unknown_task_lists_the_names",
    "test_reference.py::test_the_paper_categories_group_its_ten_tasks_once_and_any_other_task_apart",
    "test_tasks_cli.py::test_json_listing",
    "test_tokenizer.py::test_json_round_trip",
)


def test_the_suite_checks_a_registered_task_and_still_holds_the_papers(tmp_path):
    """The registry's tests pass with rotate beside the ten, and the per-task checks run on rotate."""
    (tmp_path / "register_rotate.py").write_text(PLUGIN)
    files = sorted({f"tests/{test.split('::')[0]}" for test in PER_TASK + REGISTRY})
    names = " or ".join(test.split("::")[1] for test in REGISTRY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("COLUMNS", None)
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "--noconftest", "-p", "no:cacheprovider"]
    command += ["-p", "register_rotate", "-k", f"rotate or {names}", *files]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = re.findall(r"^PASSED tests/(\S+)", done.stdout, re.M)
    for test in PER_TASK:
        assert any(p.startswith(f"{test}[rotate") for p in passed), (test, passed)
    for test in REGISTRY:
        assert test in passed, (test, passed)


# --- wording that stays true when a task is added -----------------------------------------------


def test_what_counts_the_tasks_counts_the_papers():
    """`probe tasks --help`, probe.tasks and the commands page say "ten tasks" only of the paper's."""
    import argparse

    import probe.tasks
    from probe.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    texts = {
        "probe tasks --help": commands.choices["tasks"].format_help(),
        "probe.tasks": probe.tasks.__doc__,
        "docs/commands.md": (ROOT / "docs" / "commands.md").read_text(),
    }
    for where, text in texts.items():
        for before in re.findall(r"(\S+) (?:ten|10) tasks", " ".join(text.split())):
            assert before == "paper's", where
