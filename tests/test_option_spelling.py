"""One setting names one run folder however it was typed: a task option's value is recorded as the task reads it
(``scratchpad=c`` is ``C``), so ``probe eval -o scratchpad=c`` finds what ``probe train -o scratchpad=C`` wrote, and a
second spelling never trains the same runs again into a folder of its own."""

from __future__ import annotations

import pytest

from probe.cli import main
from probe.commands.common import task_options
from probe.errors import ProbeError
from probe.runs.folders import task_folder_name
from probe.studies import sweep
from probe.tasks import resolved_options


@pytest.mark.parametrize(
    "task, typed, read",
    [
        ("addition", "c", "C"),  # case
        ("addition", "C+I", "I+C"),  # components in the format's order
        ("addition", "i+c+o+v+r", "full"),  # every component is the full format
        ("addition", "full", "full"),
        ("sorting", "I+C+O+R", "I+C+O+R"),  # a task without V keeps the components as named
    ],
)
def test_a_format_is_recorded_as_the_task_reads_it(task, typed, read):
    assert resolved_options(task, {"scratchpad": typed, "train_length": 8}) == {"scratchpad": read, "train_length": 8}
    assert task_options(task, [f"scratchpad={typed}"], None) == (task, {"scratchpad": read})
    assert task_options(task, [], typed) == (task, {"scratchpad": read})


def test_no_scratchpad_is_kept_as_typed_as_earlier_runs_recorded_it():
    """``none`` reads as no scratchpad; a run trained with ``--scratchpad none`` recorded "none" in its config, and
    a later run of the same folder must not read as trained with other settings."""
    assert resolved_options("addition", {"scratchpad": "none"}) == {"scratchpad": "none"}
    assert task_folder_name("addition", resolved_options("addition", {"scratchpad": "none"})) == "addition"


def test_a_sweep_names_the_folder_the_commands_read():
    grid = sweep.grid_from_flags(tasks=["addition"], pes=["nope"], scratchpads=["c", "C+I"])
    assert [r.label for r in sweep.expand_grid(grid, "/nonexistent")] == [
        "addition+scratchpad=C/nope/seed0",
        "addition+scratchpad=I+C/nope/seed0",
    ]


def test_a_spelling_of_a_format_already_trained_reads_its_runs(tmp_path, capsys):
    """Trained as ``-o scratchpad=c`` (one step), the run is in ``addition+scratchpad=C``, and eval finds it as
    ``--scratchpad C``."""
    tiny = ["-m", "d_model=16", "-m", "n_layers=1", "-m", "n_heads=2", "-m", "d_mlp=32"]
    train = ["train", "--task", "addition", "-o", "scratchpad=c", "--pe", "nope", "--seed", "0", "--steps", "1"]
    assert main([*train, "--batch-size", "2", *tiny, "--no-eval", "--checkpoints", str(tmp_path), "--json"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["addition+scratchpad=C"]
    capsys.readouterr()
    evaluate = ["eval", "--task", "addition", "--scratchpad", "C", "--checkpoints", str(tmp_path), "--n", "2"]
    assert main([*evaluate, "--valid", "1", "--json"]) == 0


def test_a_format_given_twice_must_agree():
    with pytest.raises(ProbeError, match="disagree"):
        task_options("addition", ["scratchpad=full"], "C")
    assert task_options("addition", ["scratchpad=C"], "C") == ("addition", {"scratchpad": "C"})
