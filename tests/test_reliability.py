"""Operating a run folder safely: locks between processes, full disks, file modes, and outputs that
go beside the runs they describe (issue: reliability)."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import tiny_model
from safetensors import SafetensorError

from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.models.checkpoint import read_checkpoint_config
from probe.runs.folders import Run, run_dir
from probe.runs.locks import RunLocked, run_lock
from probe.training.bookkeeping import train_run
from probe.training.loop import STATE
from probe.training.train_config import TrainConfig

CPU = torch.device("cpu")
SMALL = [
    "--task",
    "reverse",
    "-o",
    "train_length=4",
    "--pe",
    "nope",
    "--jobs",
    "1",
    "-m",
    "n_layers=1",
    "-m",
    "d_model=32",
    "-m",
    "n_heads=2",
    "-m",
    "d_head=16",
    "-m",
    "d_mlp=64",
    "--batch-size",
    "8",
]
HOLDER = textwrap.dedent("""
    import sys, time
    from probe.runs.locks import run_lock
    with run_lock(sys.argv[1], command="test holder"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _config(**overrides) -> TrainConfig:
    values = dict(
        task="reverse",
        pe="nope",
        steps=30,
        batch_size=8,
        checkpoint_every=10,
        log_every=5,
        eval_examples=16,
        task_options={"train_length": 4},
        model=tiny_model(1),
    )
    values.update(overrides)
    return TrainConfig(**values)


def _hold(folder: Path, seconds: float) -> subprocess.Popen:
    """Another process holding ``folder``'s lock for ``seconds`` (returns once it holds it)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def _reverse_run(root: Path) -> Path:
    return run_dir(root, "reverse", "nope", 0, {"train_length": 4})


# -- locks ------------------------------------------------------------------------------------
def test_a_second_writer_gets_one_line_naming_the_holder_and_a_killed_holder_leaves_no_lock(tmp_path, capsys):
    folder = _reverse_run(tmp_path)
    holder = _hold(folder, 120)
    try:
        with pytest.raises(RunLocked) as caught:
            with run_lock(folder):
                pass
        assert caught.value.holder["pid"] == holder.pid
        code = main(["train", *SMALL, "--steps", "5", "--checkpoints", str(tmp_path)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        assert f"pid {holder.pid} on " in err and "test holder" in err and "--wait" in err, err
        assert not (folder / "metrics.jsonl").exists()  # nothing of the second writer's got in
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert main(["train", *SMALL, "--steps", "5", "--checkpoints", str(tmp_path)]) == 0  # no stale lock
    assert read_checkpoint_config(folder)["training"]["complete"]


def test_wait_blocks_until_the_holder_is_done(tmp_path, capsys):
    folder = _reverse_run(tmp_path)
    holder = _hold(folder, 2)
    code = main(["train", *SMALL, "--steps", "5", "--wait", "--checkpoints", str(tmp_path)])
    holder.wait()
    err = capsys.readouterr().err
    assert code == 0 and f"waiting for pid {holder.pid}" in err, err
    assert read_checkpoint_config(folder)["training"]["complete"]


def test_evaluation_takes_the_lock_too(tmp_path):
    from probe.analysis.evaluation import evaluate_run

    path = train_run(_config(steps=5), tmp_path / "r", CPU).path
    holder = _hold(path, 120)
    try:
        with pytest.raises(RunLocked):
            evaluate_run(Run(path, read_checkpoint_config(path)), n_test=4, n_valid=4)
        assert not (path / "eval.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_sweep_leaves_a_locked_run_to_its_holder(tmp_path):
    from probe.studies.sweep import SweepRun, run_one

    config = _config(steps=5)
    run = SweepRun(config, tmp_path / "reverse" / "nope" / "seed0", eval_n=4, eval_valid=4)
    with run_lock(run.path):  # a second open file description: flock treats it as another holder
        result = run_one(run.to_dict(), "cpu", 1, evaluate=True)
    assert result["state"] == "elsewhere" and f"pid {os.getpid()}" in result["held_by"], result
    assert not (run.path / "config.json").exists()
    import ray

    assert not ray.is_initialized()  # run_one outside a Ray worker must not start a Ray instance


def test_a_resumed_run_logs_each_step_once(tmp_path):
    def crash(step, loss, speed):
        if step == 15:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        train_run(_config(), tmp_path / "r", CPU, on_step=crash)  # logs 5, 10, 15; its last state is step 10
    train_run(_config(), tmp_path / "r", CPU)
    steps = [json.loads(line)["step"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20, 25, 30]


# -- disk full and other write errors ---------------------------------------------------------
@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        ),
    ],
)
def test_a_full_disk_is_one_line_and_the_last_state_resumes(tmp_path, monkeypatch, failure):
    import probe.training.loop as train

    whole = train_run(_config(), tmp_path / "whole", CPU)
    real = train.save_file
    saves = {"n": 0}

    def filling(tensors, filename, metadata=None):
        saves["n"] += 1
        if saves["n"] == 2:  # the step-20 state: half a file, then the disk is full
            Path(filename).write_bytes(b"\0" * 1000)
            raise failure
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(train, "save_file", filling)
    with pytest.raises(ProbeError) as caught:
        train_run(_config(), tmp_path / "split", CPU)
    message = str(caught.value)
    assert str(tmp_path / "split" / STATE) in message and "No space left on device" in message
    assert len(message.splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "split").iterdir()) == [
        ".lock",
        "metrics.jsonl",
        STATE,
    ]  # no temporary left
    monkeypatch.setattr(train, "save_file", real)
    resumed = train_run(_config(), tmp_path / "split", CPU)  # from the step-10 state, intact
    assert resumed.status == "resumed"
    a, b = load_checkpoint(whole.path).state_dict(), load_checkpoint(resumed.path).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_cli_reports_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    import probe.atomic as files

    def full(path, mode="r", *args, **kwargs):
        if "a" in mode and str(path).endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(files, "open", full, raising=False)
    code = main(["train", *SMALL, "--steps", "5", "--checkpoints", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "metrics.jsonl" in err and "No space left on device" in err, err


def test_an_os_error_outside_the_library_is_still_one_line(tmp_path, monkeypatch, capsys):
    def denied(path, text, make_parents=True):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr("probe.atomic.atomic_write_text", denied)
    code = main(["tasks", "show", "scan", "--n", "3", "--jsonl", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "x.jsonl: Permission denied" in err, err


# -- file modes -------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_mode_the_umask_gives(tmp_path, umask, expected):
    from probe.analysis.evaluation import evaluate_run

    old = os.umask(umask)
    try:
        path = train_run(_config(steps=12), tmp_path / "r", CPU).path
        evaluate_run(Run(path, read_checkpoint_config(path)), n_test=4, n_valid=4)
        (tmp_path / "plain").write_text("")  # what open() gives under this umask: the oracle
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == expected
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()}
    assert {"model.safetensors", "config.json", "eval.json", "metrics.jsonl", ".lock"} <= modes.keys()
    assert modes == dict.fromkeys(modes, expected), modes


# -- where outputs go, and what runs are called -------------------------------------------------
def test_eval_labels_runs_from_their_config_and_writes_beside_them(tmp_path, monkeypatch, capsys):
    scan = train_run(_config(task="scan", task_options={}, steps=3), tmp_path / "deep" / "scan" / "nope4", CPU).path
    copy = train_run(
        _config(task="copy", task_options={"train_length": 4}, steps=3), tmp_path / "deep" / "copy" / "nope4", CPU
    ).path
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["eval", str(scan), str(copy), "--n", "4", "--valid", "4", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in printed["runs"]] == [
        "scan/nope/seed0 (nope4)",
        "copy+train_length=4/nope/seed0 (nope4)",
    ]
    assert sorted(Path(f).parent for f in printed["figures"] if f.endswith(".html")) == sorted(
        [scan.parent, copy.parent]
    )
    assert list(cwd.iterdir()) == []


def test_compare_and_distances_write_beside_run_folders_given(tmp_path, monkeypatch, capsys):
    a = train_run(_config(steps=3), tmp_path / "mine" / "first", CPU).path
    b = train_run(_config(pe="t5", steps=3), tmp_path / "mine" / "second", CPU).path
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["compare", str(a), str(b), "--n-per-bucket", "1", "--no-baseline", "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert {Path(f).parent for f in compared["files"]} == {tmp_path / "mine" / "compare"}
    assert main(["distances", str(a), str(b), "--n-per-bucket", "1", "--lengths", "all", "--json"]) == 0
    distances = json.loads(capsys.readouterr().out)
    assert {Path(f).parent for f in distances["files"]} == {tmp_path / "mine" / "distances"}
    assert [(r["run"]["pe"], Path(r["run"]["path"])) for r in distances["runs"]] == [("nope", a), ("t5", b)]
    assert list(cwd.iterdir()) == []


def test_runs_in_the_layout_keep_their_labels(tmp_path):
    path = train_run(_config(steps=2), run_dir(tmp_path, "reverse", "nope", 0, {"train_length": 4}), CPU).path
    run = Run(path, read_checkpoint_config(path))
    assert run.label == "reverse+train_length=4/nope/seed0" and run.task_folder == "reverse+train_length=4"


def test_subpackages_load_lazily_from_import_probe():
    code = (
        "import sys, probe; assert 'probe.models' not in sys.modules; "
        "probe.models.t5_relative_bucket; probe.tasks.get; probe.metrics; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
