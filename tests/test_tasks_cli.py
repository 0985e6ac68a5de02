"""`probe tasks`: the listing, printed examples, JSONL export, one-line errors."""

from __future__ import annotations

import json

import pytest

from probe.cli import main
from probe.tasks import TASKS, get


def test_lists_every_task_and_format(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TASKS)
    assert "I+C+O" in out and "full" in out and "empty" in out


def test_json_listing(capsys):
    assert main(["tasks", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert list(info["tasks"]) == list(TASKS) and len(info["scratchpad_formats"]) == 32
    assert info["tasks"]["copy"]["options"]["variant"]["default"] == "random"
    assert info["tasks"]["lego"]["scratchpad"] and not info["tasks"]["scan"]["scratchpad"]


def test_show_prints_examples(capsys):
    args = ["tasks", "show", "addition", "--scratchpad", "full", "-o", "template=figure", "--n", "2", "--part", "test"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "<scratch>" in out and "Compute:" in out and "train_length=8" in out


def test_jsonl_export_matches_the_library(tmp_path, capsys):
    path = tmp_path / "copy.jsonl"
    args = ["tasks", "show", "copy", "-o", "variant=count", "-o", "train_length=4", "--part", "test", "--seed", "3"]
    assert main([*args, "--n", "25", "--jsonl", str(path)]) == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    task = get("copy", variant="count", train_length=4)
    expected = task.examples("test", n=25, seed=3)
    assert [(r["source"], r["target"], r["length"]) for r in rows] == [(e.source, e.target, e.length) for e in expected]
    assert [r["seen"] for r in rows] == [e.length <= 4 for e in expected]
    assert main(["tasks", "show", "scan", "--part", "valid", "--jsonl", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(get("scan").examples("valid"))
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("where", ["after show", "before show"])
def test_show_json_is_the_examples_shown_as_the_library_makes_them(capsys, where):
    """`probe tasks show ... --json` and `probe tasks --json show ...`: one JSON document, not the table."""
    show = ["show", "copy", "-o", "variant=count", "-o", "train_length=4", "--part", "test", "--seed", "3", "--n", "4"]
    args = ["tasks", *show, "--json"] if where == "after show" else ["tasks", "--json", *show]
    assert main(args) == 0
    shown = json.loads(capsys.readouterr().out)
    task = get("copy", variant="count", train_length=4)
    expected = task.examples("test", n=4, seed=3)
    assert [(r["source"], r["target"], r["length"]) for r in shown["examples"]] == [
        (e.source, e.target, e.length) for e in expected
    ]
    assert shown["task_options"]["train_length"] == 4 and shown["seed"] == 3
    assert all(r["tokens"] > 0 and r["seen"] == (r["length"] <= 4) for r in shown["examples"])


@pytest.mark.parametrize(
    "args, words",
    [
        (["tasks", "show", "division"], ["division", "copy", "pcfg"]),
        (["tasks", "show", "copy", "--scratchpad", "full"], ["scratchpad", "variant"]),
        (["tasks", "show", "parity", "--scratchpad", "X"], ["I+C+O"]),
        (["tasks", "show", "copy", "-o", "variant"], ["KEY=VALUE"]),
        (["tasks", "show", "copy", "--part", "dev"], ["train", "valid", "test"]),
        (["tasks", "show", "copy", "--split", "test"], ["--part test"]),
        (["tasks", "show", "scan", "--split", "paper", "--part", "nope"], ["train", "valid", "test"]),
        (["tasks", "show", "copy", "--jsonl", "/nonexistent/dir/x.jsonl"], ["cannot write"]),
        (["tasks", "show", "copy", "--json", "--jsonl", "-"], ["give one"]),
    ],
)
def test_mistakes_give_one_line_and_exit_2(args, words, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(word in err for word in words), err
