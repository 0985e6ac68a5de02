"""Which code trained a run: probe's version and commit, kept per training session, into a study's summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from test_train import _config

from probe import __version__
from probe.runs import provenance
from probe.runs.provenance import UNRECORDED, code_version, sessions_code
from probe.training import loop
from probe.training.bookkeeping import train_run
from probe.training.loop import STATE

CPU = torch.device("cpu")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def git(monkeypatch):
    """Stand-in answers for ``git`` run in probe's folder, by its first two arguments (None: git failed); the
    version read afresh."""
    answers: dict[tuple[str, ...], str | None] = {}
    monkeypatch.setattr(provenance, "_git", lambda *args: answers.get(args[:2]))
    code_version.cache_clear()
    yield answers
    code_version.cache_clear()


def _checkout(git: dict, changed: str = "") -> None:
    git[("rev-parse", "HEAD")] = COMMIT
    git[("rev-parse", "--show-toplevel")] = str(provenance.PACKAGE.parent)
    git[("status", "--porcelain")] = changed


def test_a_checkout_of_probe_gives_its_commit(git):
    _checkout(git)
    assert code_version() == f"{__version__}+g0123456789ab"


def test_changed_tracked_files_mark_the_version_dirty(git):
    _checkout(git, changed=" M probe/models/attention.py")
    assert code_version() == f"{__version__}+g0123456789ab.dirty"


@pytest.mark.parametrize("top", ["/home/someone/their-project", None])
def test_probe_outside_a_checkout_of_its_own_gives_its_version_alone(git, top):
    """Installed into a virtual environment that lies in somebody else's repository, probe must not report
    that repository's commit; with no git or no repository, the version alone."""
    git[("rev-parse", "HEAD")] = COMMIT if top else None
    git[("rev-parse", "--show-toplevel")] = top
    assert code_version() == __version__


def test_git_that_cannot_run_is_no_version(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", missing)
    assert provenance._git("rev-parse", "HEAD") is None


def test_sessions_keep_each_change_of_code_in_order():
    assert sessions_code([], "a") == ["a"]
    assert sessions_code(["a"], "a") == ["a"]
    assert sessions_code(["a"], "b") == ["a", "b"]
    assert sessions_code(["a", "b"], "a") == ["a", "b", "a"]
    assert sessions_code([UNRECORDED], "a") == [UNRECORDED, "a"]


def _stop_at(step_to_stop: int):
    def on_step(step, loss, speed):
        if step == step_to_stop:
            raise KeyboardInterrupt

    return on_step


def _metrics(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())["metrics"]


def test_a_run_resumed_under_other_code_records_both_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "code_version", lambda: "0.1.0+gaaaa")
    with pytest.raises(KeyboardInterrupt):
        train_run(_config(), tmp_path / "r", CPU, on_step=_stop_at(17))
    monkeypatch.setattr(loop, "code_version", lambda: "0.1.0+gbbbb")
    train_run(_config(), tmp_path / "r", CPU)
    assert _metrics(tmp_path / "r")["probe_versions"] == ["0.1.0+gaaaa", "0.1.0+gbbbb"]
    train_run(_config(), tmp_path / "whole", CPU)
    assert _metrics(tmp_path / "whole")["probe_versions"] == ["0.1.0+gbbbb"]


def test_a_state_written_before_versions_were_recorded_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "code_version", lambda: "0.1.0+gbbbb")
    with pytest.raises(KeyboardInterrupt):
        train_run(_config(), tmp_path / "r", CPU, on_step=_stop_at(17))
    state = tmp_path / "r" / STATE
    with safe_open(str(state), "pt") as handle:
        meta = json.loads(handle.metadata()["probe"])
    del meta["probe_versions"]
    save_file(load_file(str(state)), str(state), metadata={"probe": json.dumps(meta)})
    train_run(_config(), tmp_path / "r", CPU)
    assert _metrics(tmp_path / "r")["probe_versions"] == [UNRECORDED, "0.1.0+gbbbb"]
