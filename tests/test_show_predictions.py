"""`probe eval --show`: a run's greedy predictions beside the gold, checked against a plain argmax loop and against
the evaluation's own per-length counts (scored by a teacher-forced pass, another path)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from rich.console import Console

from probe.analysis.predictions import show_predictions
from probe.cli import main
from probe.commands.eval import _shown_table
from probe.models.checkpoint import load_checkpoint
from probe.runs.folders import find_runs
from probe.tasks import Tokenizer, get
from probe.tasks.scratchpad import OPENING

MODEL = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]
COPY = ["--task", "copy", "-o", "train_length=4"]


def _train(folder, task_args, steps) -> None:
    argv = ["train", *task_args, "--pe", "nope", "--steps", str(steps), *MODEL, "--no-eval", "--checkpoints", folder]
    assert main(argv) == 0


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """NoPE on copy (L = 4), trained 400 steps: most one-word examples right, the longer ones not."""
    folder = tmp_path_factory.mktemp("show")
    _train(str(folder), COPY, 400)
    return folder


def _run(root):
    (run,), _ = find_runs(root, "copy", {"train_length": 4})
    return run


@torch.no_grad()
def _argmax_loop(model, tokenizer: Tokenizer, source: str, steps: int) -> str:
    """Greedy decoding written plainly: the whole sequence through the model at every step, no cache."""
    ids = tokenizer.encode_prompt(source)
    generated: list[int] = []
    for _ in range(steps):
        token = int(model(torch.tensor([ids + generated]))[0, -1].argmax())
        if token == tokenizer.eos_id:
            break
        generated.append(token)
    return tokenizer.decode(generated)


def test_the_first_examples_of_each_length_with_their_greedy_predictions(root):
    """Copy's prompts and targets have one length per λ, so every batch decodes its λ + 1 tokens: the plain loop
    to that budget is the oracle."""
    shown = show_predictions(_run(root), per_length=3, n_test=200)
    task = get("copy", train_length=4)
    test = task.examples("test", n=200, seed=0)
    firsts = [e for length in range(1, 9) for e in [x for x in test if x.length == length][:3]]
    assert [(s.length, s.source, s.target) for s in shown] == [(e.length, e.source, e.target) for e in firsts]
    model = load_checkpoint(_run(root).path)
    tokenizer = Tokenizer.from_dict(model.metadata["tokenizer"])
    for s in shown:
        budget = len(tokenizer.encode(s.target)) + 1  # the target and its <eos>
        assert s.prediction == _argmax_loop(model, tokenizer, s.source, budget), s
        assert s.correct == (s.prediction == s.target)
        assert s.seen == (s.length <= 4) and s.answer is None and s.gold_answer is None
        assert s.gold_steps is None and s.wrong_step is None  # no scratchpad
    assert any(s.correct for s in shown) and not all(s.correct for s in shown)  # the check can tell them apart


def test_a_run_folders_path_is_read_as_its_run(root):
    """The library's calls take the path a user has, as `probe eval RUN_DIR` does: the same predictions and scores."""
    from probe.analysis.evaluation import evaluate_run

    run = _run(root)
    assert show_predictions(str(run.path), per_length=1, n_test=50) == show_predictions(run, per_length=1, n_test=50)
    by_path = evaluate_run(str(run.path), n_test=50, n_valid=20, write=False, last_step=False)
    by_run = evaluate_run(run, n_test=50, n_valid=20, write=False, last_step=False)
    assert {**by_path.to_json(), "seconds": None} == {**by_run.to_json(), "seconds": None}  # all but the wall time


def test_every_example_shown_agrees_with_the_evaluations_counts_and_wrong_shows_the_rest(root, tmp_path, capsys):
    """No IID held-out examples (``--valid 0``): each length's bucket is the test split's alone."""
    argv = ["eval", *COPY, "--checkpoints", str(root), "--out", str(tmp_path), "--n", "80", "--valid", "0", "--json"]
    assert main(argv) == 0
    buckets = {b["length"]: (b["n"], b["correct"]) for b in json.loads(capsys.readouterr().out)["runs"][0]["buckets"]}
    shown = show_predictions(_run(root), per_length=80, n_test=80)
    wrong = show_predictions(_run(root), per_length=80, n_test=80, wrong=True)
    shown_of, right = Counter(s.length for s in shown), Counter(s.length for s in shown if s.correct)
    assert {length: (shown_of[length], right[length]) for length in shown_of} == buckets
    assert 0 < sum(right.values()) < len(shown)
    assert not any(s.correct for s in wrong)
    assert Counter(s.length for s in wrong) == Counter(s.length for s in shown if not s.correct)


def test_a_scratchpads_answer_and_steps_are_read_beside_the_gold(tmp_path):
    """Addition with the full scratchpad: the gold answer is the sum of the prompt's two numbers, read off the
    gold's conclusion, and the gold writes a step per digit of it; a verdict is the answer read from the
    prediction against it, and a prediction departs from the gold at no step where its scratchpad is the gold's."""
    args = ["--task", "addition", "--scratchpad", "full", "-o", "train_length=3"]
    _train(str(tmp_path), args, 2)
    (run,), _ = find_runs(tmp_path, "addition", {"train_length": 3, "scratchpad": "full"})
    shown = show_predictions(run, per_length=1, n_test=20)
    assert len(shown) == len({s.length for s in shown}) >= 4
    for s in shown:
        left, right = s.source.removeprefix("Compute ").removesuffix(" ?").split(" + ")
        total = int(left.replace(" ", "")) + int(right.replace(" ", ""))
        assert s.gold_answer == str(total) and s.gold_steps == len(str(total))
        assert s.correct == (s.answer is not None and s.answer == s.gold_answer)
        scratchpad = [text.split(". Thus,")[0].split() for text in (s.prediction, s.target)]
        assert (s.wrong_step is None) == (scratchpad[0] == scratchpad[1])
        assert s.wrong_step is None or 0 <= s.wrong_step <= s.gold_steps + 1
        assert (s.wrong_component is None) == (s.wrong_step is None)
        assert s.wrong_component in (None, OPENING, *"ICOVR") and (s.wrong_component == OPENING) == (s.wrong_step == 0)
    console = Console(width=400, record=True)
    console.print(_shown_table("addition", shown, wrong=False))
    printed = console.export_text()
    assert "first wrong step" in printed
    assert all(f"{'none' if s.wrong_step is None else s.wrong_step} of {s.gold_steps}" in printed for s in shown)


def test_eval_show_prints_the_predictions_and_puts_them_in_its_json(root, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    argv = ["eval", *COPY, "--checkpoints", str(root), "--n", "40", "--valid", "10", "--show", "1", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    (shown,) = json.loads(captured.out)["shown"].values()
    assert [row["length"] for row in shown] == list(range(1, 9))
    assert all(row["source"] in captured.err for row in shown)  # each input on the table, at this width


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--show", "0"], "--show must be at least 1 prediction per length, got 0"),
        (["--wrong"], "--wrong picks which predictions --show prints; give --show N with it"),
    ],
)
def test_a_bad_show_is_one_line_before_any_run_is_read(root, extra, said, capsys):
    assert main(["eval", *COPY, "--checkpoints", str(root / "nowhere"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_the_papers_split_shows_its_seen_lengths_from_the_iid_examples_eval_scores(tmp_path):
    """copy under split=paper tests on unseen lengths only (21-40): the seen ones (2-20) come from the IID examples
    `probe eval` scores, the first of each length, marked seen."""
    options = ["--task", "copy", "-o", "split=paper", "-o", "variant=count"]
    _train(str(tmp_path), options, 2)
    (run,), _ = find_runs(tmp_path, "copy", {"split": "paper", "variant": "count"})
    shown = show_predictions(run, per_length=1, n_test=40, n_valid=100)
    task = get("copy", split="paper", variant="count")
    held = task.held_out(100)
    seen = [s for s in shown if s.seen]
    assert seen and {s.length for s in seen} == {e.length for e in held} and all(s.length <= 20 for s in seen)
    firsts = {length: next(e for e in held if e.length == length) for length in {e.length for e in held}}
    assert all((s.source, s.target) == (firsts[s.length].source, firsts[s.length].target) for s in seen)
    assert {s.length for s in shown if not s.seen} == {e.length for e in task.examples("test", n=40, seed=0)}
