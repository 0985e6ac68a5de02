"""Read-only runs are first-class: `probe eval RUN --out DIR` reads a run it cannot write (no lock: locks
belong to writers) and writes only under DIR; without --out, eval and compare say before computing that
they cannot write; `probe train` reports finished runs in a read-only folder as done.

Tests run as root here, where chmod stops no write: the commands decide from
:func:`probe.atomic.writable`, which the tests make say "read-only" for the checkpoints, and each test
checks that nothing under the checkpoints changed. The last test does it with real permissions, where
the user is not root."""

from __future__ import annotations

import json
import os
import stat

import pytest

import probe.atomic
from probe.cli import main
from probe.errors import ProbeError

COMMON = ["--task", "reverse", "-o", "train_length=4"]
MODEL = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]
TRAIN = ["train", *COMMON, "--pe", "nope", "--pe", "rotary", "--steps", "20", *MODEL]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared") / "ck"
    assert main([*TRAIN, "--checkpoints", str(folder)]) == 0
    return folder


def _snapshot(folder) -> dict:
    """Every file under ``folder`` with its bytes and modification time: what a reader must leave alone."""
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def read_only(root, monkeypatch):
    """The checkpoints as a colleague's shared folder: :func:`probe.atomic.writable` says no under it, the
    trainer's own check that it can write fails as it would there, and taking a run's lock fails the test."""
    real = getattr(probe.atomic, "writable", lambda f: True)  # (raising=False: so the tests fail, not err, before)

    def writable(folder) -> bool:
        return not os.path.abspath(folder).startswith(str(root)) and real(folder)

    monkeypatch.setattr(probe.atomic, "writable", writable, raising=False)

    def no_lock(*args, **kwargs):
        raise AssertionError(f"a reader took a run's lock: {args}")

    def cannot_write(folder):  # what the trainer's own check says on a read-only folder
        raise ProbeError(f"cannot write to {folder}: Read-only file system")

    monkeypatch.setattr("probe.training.bookkeeping.check_writable", cannot_write)
    monkeypatch.setattr("probe.runs.locks.run_lock", no_lock)
    monkeypatch.setattr("probe.analysis.evaluation.run_lock", no_lock)
    before = _snapshot(root)
    yield root
    assert _snapshot(root) == before, "a reader wrote under the read-only checkpoints"


def _run(root, pe="nope"):
    return root / "reverse+train_length=4" / pe / "seed0"


def test_eval_with_out_reads_the_run_and_writes_only_under_out(read_only, tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(["eval", str(_run(read_only)), "--valid", "10", "--n", "10", "--out", str(out)]) == 0
    written = out / "reverse+train_length=4" / "nope" / "seed0"
    assert json.loads((written / "eval.json").read_text())["n_examples"] == 20
    assert (written / "eval.csv").read_text().startswith("label,pe,seed,length")
    assert any(out.glob("eval_accuracy*.html"))


def test_eval_without_out_says_so_before_computing(read_only, monkeypatch, capsys):
    monkeypatch.setattr("probe.analysis.evaluation._evaluate", lambda *a: pytest.fail("computed before saying"))
    assert main(["eval", *COMMON, "--checkpoints", str(read_only)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "--out DIR" in err and len(err.strip().splitlines()) == 1


def test_compare_without_out_says_so_before_computing(read_only, monkeypatch, capsys):
    monkeypatch.setattr("probe.analysis.compare_report", lambda *a, **k: pytest.fail("computed before saying"))
    assert main(["compare", "nope", "rotary", *COMMON, "--checkpoints", str(read_only)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "--out DIR" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [["distances"], ["positions", "--resamples", "10"], ["extrapolate", "--family", "temperature", "--n-iid", "4"]],
)
def test_analyses_without_out_say_so_before_computing_and_with_out_write_only_there(
    command, read_only, tmp_path, monkeypatch, capsys
):
    quick = ["--n-per-bucket", "2"] if command[0] != "extrapolate" else ["--n-valid", "2"]
    assert main([*command, *COMMON, *quick, "--checkpoints", str(read_only)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "--out DIR" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "out"
    assert main([*command, *COMMON, *quick, "--checkpoints", str(read_only), "--out", str(out)]) == 0
    assert any(out.iterdir())


def test_train_reports_finished_read_only_runs_as_done(read_only, capsys):
    assert main([*TRAIN, "--checkpoints", str(read_only), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in runs] == ["skipped", "skipped"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; the tests above stand in for it")
def test_a_chmod_read_only_folder_for_real(root, tmp_path, capsys):
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
    modes = {p: p.stat().st_mode for p in folders}
    for p in folders:
        p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        before = _snapshot(root)
        assert main(["eval", str(_run(root)), "--valid", "10", "--n", "10", "--out", str(tmp_path)]) == 0
        assert main(["eval", *COMMON, "--checkpoints", str(root)]) == 2
        assert main(["compare", "nope", "rotary", *COMMON, "--checkpoints", str(root)]) == 2
        assert main(["distances", *COMMON, "--checkpoints", str(root)]) == 2
        assert main([*TRAIN, "--checkpoints", str(root)]) == 0
        assert _snapshot(root) == before
    finally:
        for p in folders:
            p.chmod(modes[p])


def test_a_rerun_of_eval_reads_what_it_wrote_unless_the_examples_weights_or_force_differ(root, tmp_path, monkeypatch):
    """The second `probe eval` of the same examples reads eval.json (nothing computed); other examples, weights
    re-published since, or --force compute again."""
    import shutil

    import probe.analysis.evaluation

    run = tmp_path / "run"
    shutil.copytree(_run(root), run)
    args = ["eval", str(run), "--valid", "10", "--n", "10", "--json"]
    assert main(args) == 0
    first = (run / "eval.json").read_text()
    computed = []
    real = probe.analysis.evaluation._evaluate
    monkeypatch.setattr(probe.analysis.evaluation, "_evaluate", lambda *a: computed.append(a) or real(*a))
    assert main(args) == 0 and not computed and (run / "eval.json").read_text() == first
    assert main([*args, "--force"]) == 0 and len(computed) == 1
    assert main(["eval", str(run), "--valid", "10", "--n", "12"]) == 0 and len(computed) == 2
    published = (run / "model.safetensors").stat().st_mtime
    for path in run.glob("eval*.json"):  # every evaluation older than the weights: re-published since
        os.utime(path, (published - 60, published - 60))
    assert main(args) == 0 and len(computed) == 3
    assert main(args) == 0 and len(computed) == 3  # written after the weights now: read again


def test_a_scratchpad_evaluation_records_how_far_it_decoded_and_one_decoded_less_far_is_computed_again(tmp_path):
    """A prediction scored by its answer is decoded on to the authors' 1,500 positions; an eval.json written
    before (its examples asked alike, the decoding not recorded) is not read back as this evaluation."""
    from probe.tasks.decoding import SCRATCHPAD_POSITIONS

    task = ["--task", "parity", "-o", "train_length=3", "-o", "scratchpad=C", "-m", "n_ctx=256", "--no-eval"]
    assert main(["train", *task, "--pe", "nope", "--steps", "2", *MODEL, "--checkpoints", str(tmp_path)]) == 0
    (run,) = [p.parent for p in tmp_path.glob("*/nope/seed0/model.safetensors")]
    args = ["eval", str(run), "--valid", "5", "--n", "5"]
    assert main(args) == 0
    written = json.loads((run / "eval.json").read_text())
    assert written["asked"] == {"n_test": 5, "n_valid": 5, "decode_positions": SCRATCHPAD_POSITIONS}
    written["asked"].pop("decode_positions")
    written["iid_accuracy"] = -1.0  # a marker: read back, it would show
    (run / "eval.json").write_text(json.dumps(written))
    assert main(args) == 0
    assert json.loads((run / "eval.json").read_text())["iid_accuracy"] >= 0.0


def test_an_evaluation_records_its_wall_time_and_a_rerun_reading_it_back_keeps_it(root, tmp_path, monkeypatch):
    """A study's cost is its training's and its evaluations' (a scratchpad's decoding: minutes a run): eval.json
    records the evaluation's time, here on a scripted clock (two readings, 12.5 s apart)."""
    import shutil
    from types import SimpleNamespace

    import probe.analysis.evaluation

    run = tmp_path / "run"
    shutil.copytree(_run(root), run)
    for path in run.glob("eval*"):  # the training's own evaluation, of more examples: this one would go beside it
        path.unlink()
    clock = iter([100.0, 112.5])
    monkeypatch.setattr(probe.analysis.evaluation, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    args = ["eval", str(run), "--valid", "10", "--n", "10", "--json"]
    assert main(args) == 0
    assert json.loads((run / "eval.json").read_text())["seconds"] == 12.5
    assert main(args) == 0  # read back, not timed again (the clock has no third reading)
    assert json.loads((run / "eval.json").read_text())["seconds"] == 12.5
