"""What the explorer's analysis pages show of a report a command saved, and when they must not: every run a
report read (Compare's A' baseline too) is checked to be unchanged since, and a run is found whether the command
named it relative to where it ran or absolute (`probe app` names the checkpoint folder absolute)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import FOLDER, assert_saved_report_shown, charts, run_page, texts

from probe.cli import main

ASKED = "**Compare** collects both models' attention"


@pytest.fixture
def root(checkpoints, tmp_path) -> Path:
    """A copy of the explorer's checkpoints (NoPE seeds 0 and 1, T5) the test may re-publish runs in."""
    shutil.copytree(checkpoints, tmp_path / "ck")
    return tmp_path / "ck"


def republish(run: Path, after: Path) -> None:
    """Mark ``run`` re-published after ``after`` was written (its weights newer)."""
    later = after.stat().st_mtime + 60
    os.utime(run / "model.safetensors", (later, later))


def test_compare_shows_no_saved_report_whose_baseline_was_re_published(root, monkeypatch):
    """A' (NoPE seed 1) re-published after `probe compare` saved NoPE vs T5: the saved D(NoPE, NoPE') is stale, so
    the page offers to compute instead of showing it."""
    folder = root / FOLDER
    assert main(["compare", str(folder / "nope/seed0"), str(folder / "t5/seed0"), "--n-per-bucket", "2"]) == 0
    at = run_page("compare", root, monkeypatch)
    assert "Saved by `probe compare`" in texts(at.caption)
    assert [row["A vs"] for _, row in at.dataframe[0].value.iterrows()] == ["T5's Relative Bias", "NoPE'"]
    republish(folder / "nope" / "seed1", next((folder / "compare").glob("*.json")))
    at = run_page("compare", root, monkeypatch)
    assert "Saved by `probe compare`" not in texts(at.caption)
    assert charts(at) == 0 and ASKED in texts(at.info)


def test_compare_computes_again_once_the_baseline_is_re_published(root, monkeypatch):
    """The page's comparison is cached with A' among its key: once NoPE seed 1 is re-published (here with NoPE seed
    0's weights, so D(NoPE, NoPE') becomes 0), the baseline row is computed anew, not served from the cache."""
    folder = root / FOLDER
    at = run_page("compare", root, monkeypatch)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    before = at.dataframe[0].value.set_index("A vs")["average over layers"]
    assert before["NoPE'"] > 0
    seed0, seed1 = folder / "nope" / "seed0", folder / "nope" / "seed1"
    config = json.loads((seed0 / "config.json").read_text())
    config["model"]["seed"] = config["training"]["seed"] = 1
    shutil.copy(seed0 / "model.safetensors", seed1 / "model.safetensors")
    (seed1 / "config.json").write_text(json.dumps(config))
    later = (seed1 / "model.safetensors").stat().st_mtime + 60
    os.utime(seed1 / "model.safetensors", (later, later))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    after = at.dataframe[0].value.set_index("A vs")["average over layers"]
    assert after["NoPE'"] == pytest.approx(0, abs=1e-6)
    assert after["T5's Relative Bias"] == before["T5's Relative Bias"]  # A and B unchanged: the same numbers


# each page's command, naming its runs relative to where it runs, as the README's flow does
SAVED_BY = {
    "compare": ["compare", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
    "distances": ["distances", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
    "positions": ["positions", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
}


@pytest.mark.parametrize("page", SAVED_BY)
def test_a_report_naming_runs_relative_is_shown_under_an_absolute_checkpoint_folder(page, root, monkeypatch):
    """`probe compare checkpoints/...` records the runs as named; `probe app` passes the folder resolved: the page
    finds the runs all the same."""
    monkeypatch.chdir(root.parent)
    command, *runs, option, value = SAVED_BY[page]
    relative = [str(Path(root.name) / FOLDER / run) for run in runs]
    assert main([command, *relative, option, value]) == 0
    assert root.is_absolute()
    at = run_page(page, root, monkeypatch)
    assert_saved_report_shown(at, page)
