"""The paper's own data splits (``split=paper``), checked against the authors' dataset builders."""

from __future__ import annotations

import pytest

from probe.tasks import Tokenizer, get


def test_scan_paper_split_is_the_authors_mdlen_tr25_ts48():
    task = get("scan", split="paper")
    train, valid, test = (task.examples(split) for split in ("train", "valid", "test"))
    assert all(e.source.startswith("Solve: ") for e in train + valid + test)
    assert all(len(e.target.split()) == e.length <= 25 for e in train + valid)
    assert all(26 <= len(e.target.split()) == e.length <= 48 for e in test)
    # The authors' released run reports 3136 test commands; train + valid is the rest of SCAN's 20,910.
    assert len(test) == 3136 and len(train) + len(valid) == 20_910 - 3136
    assert {e.length for e in test} == {26, 27, 28, 30, 32, 33, 36, 40, 48}
    assert not {e.source for e in train} & {e.source for e in valid}


def test_scan_length_split_is_unchanged():
    task = get("scan")
    assert task.train_length == 22 and len(task.examples("test")) == 3920
    assert not any(e.source.startswith("Solve:") for e in task.examples("test"))


@pytest.mark.parametrize(
    "task, variant, source, target",
    [
        ("copy", "random", "Copy: w3 w1 w4", "w3 w1 w4"),
        ("copy", "random-2x", "Copy: w3 w1 w4", "w3 w1 w4 [NEXT] w3 w1 w4"),
        ("copy", "count-2x", "Copy: w3 w3", "w3 w3 w3 w3"),
        ("reverse", "random", "Reverse: w3 w1 w4", "w4 w1 w3"),
        ("reverse", "random-2x", "Reverse: w3 w1 w4", "w4 w1 w3 [NEXT] w4 w1 w3"),
        ("reverse", "twice", "Reverse: w3 w1 w4", "w4 w1 w3 [NEXT] w3 w1 w4"),
    ],
)
def test_copy_and_reverse_paper_formats(task, variant, source, target):
    built = get(task, split="paper", variant=variant)
    words = source.split()[1:]
    example = built.example_for(words)
    assert (example.source, example.target, example.length) == (source, target, len(words))
    Tokenizer.for_task(built).encode_example(example)  # every word is in the vocabulary


def test_replace_paper_format():
    example = get("copy", split="paper", variant="replace").example_for(["w3", "w3"], "w7")
    assert (example.source, example.target) == ("Replace w3 with w7 in w3 w3", "w7 w7")


@pytest.mark.parametrize(
    "task, variant",
    [("copy", v) for v in ("count", "replace", "random", "count-2x", "random-2x")]
    + [("reverse", v) for v in ("random", "random-2x", "twice")],
)
def test_copy_and_reverse_paper_lengths(task, variant):
    built = get(task, split="paper", variant=variant)
    seen = {e.length for e in built.examples("train", n=3000)} | {e.length for e in built.examples("valid", n=500)}
    unseen = {e.length for e in built.examples("test", n=3000)}
    assert seen == set(range(2, 21)) and unseen == set(range(21, 41))


def test_split_flag_is_the_split_option(tmp_path, capsys):
    from probe.cli import main

    assert main(["eval", "--task", "scan", "--split", "paper", "--checkpoints", str(tmp_path)]) == 2
    assert "no runs of scan+split=paper" in capsys.readouterr().err
    assert main(["eval", "--task", "addition", "--split", "paper", "--checkpoints", str(tmp_path)]) == 2
    assert "task 'addition' has no option 'split'" in capsys.readouterr().err
