"""`probe train` / `probe eval`: learning, resuming to identical weights, and bad input."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import reverse_config

from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.training.bookkeeping import train_run
from probe.training.loop import STATE
from probe.training.train_config import TrainConfig, learning_rate

CPU = torch.device("cpu")


_config = reverse_config


def _weights(path):
    return load_checkpoint(path).state_dict()


def test_schedule_warms_up_then_decays():
    config = TrainConfig(steps=100, lr=1.0, warmup=0.1)
    rates = [learning_rate(step, config) for step in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(rates[9:], rates[10:])) and rates[-1] < 0.02


def test_schedule_is_transformers_polynomial_decay_one_warm_up_step_ahead():
    """Against transformers' own schedule, stepped as its Trainer steps it (the rate of optimizer step k is the
    scheduler's after k steps): equal from the end of warm-up on; during it, probe's step k runs at HF's k + 1
    (docs/deviations.md)."""
    from transformers import get_polynomial_decay_schedule_with_warmup

    config = TrainConfig(steps=200, lr=2e-3, warmup=0.06, lr_end=1e-5, decay_power=2.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
    schedule = get_polynomial_decay_schedule_with_warmup(
        optimizer, 12, config.steps, lr_end=config.lr_end, power=config.decay_power
    )
    theirs = []
    for _ in range(config.steps + 1):
        theirs.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    ours = [learning_rate(step, config) for step in range(config.steps)]
    assert ours[12:] == pytest.approx(theirs[12 : config.steps], rel=1e-12)
    assert ours[:12] == pytest.approx(theirs[1:13], rel=1e-12) and theirs[0] == 0.0


def test_one_seed_gives_the_same_weights_on_two_threads(tmp_path):
    """Repeated tokens' embedding gradients must not be summed in a thread-dependent order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = _config(steps=20, batch_size=32, model={})  # the tiny preset: d_model 128
        first, second = (train_run(config, tmp_path / name, CPU) for name in ("a", "b"))
    finally:
        torch.set_num_threads(threads)
    ours, theirs = _weights(first.path), _weights(second.path)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_interrupted_run_resumes_to_the_same_weights(tmp_path, dropout):
    whole = train_run(_config(dropout=dropout), tmp_path / "whole", CPU)
    assert whole.status == "trained"

    def interrupt(step, loss, speed):
        if step == 17:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(_config(dropout=dropout), tmp_path / "split", CPU, on_step=interrupt)
    assert (tmp_path / "split" / STATE).is_file() and not (tmp_path / "split" / "config.json").exists()
    resumed = train_run(_config(dropout=dropout), tmp_path / "split", CPU)
    assert resumed.status == "resumed"
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_resumed_runs_train_seconds_count_every_session(tmp_path):
    """``train_seconds`` is the run's training time, not its last session's; the speed is the last session's."""
    import time

    def slow_then_interrupt(step, loss, speed):
        time.sleep(0.1)
        if step == 17:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(_config(), tmp_path / "r", CPU, on_step=slow_then_interrupt)
    resumed = train_run(_config(), tmp_path / "r", CPU)
    metrics = json.loads((tmp_path / "r" / "config.json").read_text())["metrics"]
    assert metrics["train_seconds"] == pytest.approx(resumed.seconds)
    assert resumed.seconds >= 17 * 0.1
    assert metrics["steps_per_second"] >= (24 - 17) / (resumed.seconds - 17 * 0.1)  # 7 steps in this session


def test_killed_run_resumes_from_the_last_periodic_state(tmp_path):
    """A crash that cannot save (not Ctrl-C) loses the steps after the last periodic state only."""
    train_run(_config(), tmp_path / "whole", CPU)

    def crash(step, loss, speed):
        if step == 15:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        train_run(_config(), tmp_path / "split", CPU, on_step=crash)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "split" / STATE), "pt") as handle:
        assert json.loads(handle.metadata()["probe"])["step"] == 10
    train_run(_config(), tmp_path / "split", CPU)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_finished_run_is_skipped_unless_forced(tmp_path):
    first = train_run(_config(steps=5), tmp_path / "r", CPU)
    again = train_run(_config(steps=5), tmp_path / "r", CPU)
    assert (first.status, again.status) == ("trained", "skipped")
    assert train_run(_config(steps=5), tmp_path / "r", CPU, force=True).status == "trained"


def test_a_finished_run_trained_otherwise_is_one_line_not_a_silent_skip(tmp_path, capsys):
    train_run(_config(steps=5), tmp_path / "r", CPU)
    assert train_run(_config(steps=5, checkpoint_every=3, log_every=2), tmp_path / "r", CPU).status == "skipped"
    with pytest.raises(
        ProbeError, match=r"already trained with other settings \(steps 5, asked 6; lr 0.001, asked 0.002\)"
    ):
        train_run(_config(steps=6, lr=2e-3), tmp_path / "r", CPU)
    assert train_run(_config(steps=6), tmp_path / "r", CPU, force=True).status == "trained"
    from probe.studies import sweep

    run = sweep.SweepRun(_config(steps=7), tmp_path / "r")
    assert sweep.run_state(run) == "conflict"


def test_nan_loss_stops_and_keeps_the_last_good_state(tmp_path, monkeypatch):
    import probe.training.loop as train

    real = train.target_loss
    calls = {"n": 0}

    def poisoned(model, tokens, mask):
        calls["n"] += 1
        loss = real(model, tokens, mask)
        return loss * float("nan") if calls["n"] == 13 else loss

    monkeypatch.setattr(train, "target_loss", poisoned)
    with pytest.raises(ProbeError, match="loss became nan at step 12.*step 10"):
        train_run(_config(), tmp_path / "r", CPU)
    assert (tmp_path / "r" / STATE).is_file()


def test_a_tiny_model_learns_and_probe_eval_measures_it(tmp_path, capsys):
    """reverse with L = 4 on a 1-layer model: >= 95% exact match on seen lengths within seconds."""
    root = tmp_path / "ck"
    code = main(
        [
            "train",
            "--task",
            "reverse",
            "-o",
            "train_length=4",
            "--pe",
            "t5",
            "--steps",
            "800",
            "--lr",
            "3e-3",
            "--checkpoints",
            str(root),
            "--json",
        ]
    )
    assert code == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "/t5/seed0: step " in line]
    assert len(lines) == 10 and "step 800/800, loss" in lines[-1]  # not a terminal: a line per tenth of the run
    assert (
        main(["eval", "--task", "reverse", "-o", "train_length=4", "--checkpoints", str(root), "--n", "200", "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    run = report["runs"][0]
    assert run["iid_accuracy"] >= 0.95, run
    assert {b["seen"] for b in run["buckets"]} == {True, False}
    assert (root / "reverse+train_length=4" / "t5" / "seed0" / "eval.json").is_file()
    assert (root / "reverse+train_length=4" / "eval_accuracy.html").is_file()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--task", "sudoku"], "unknown task"),
        (["train", "--pe", "wavelet"], "unknown positional encoding"),
        (["train", "--preset", "huge", "--pe", "nope"], "unknown preset"),
        (["train", "--device", "cuda:7", "--pe", "nope"], "cuda"),
        (["train", "--pe", "nope", "--steps", "0"], "--steps"),
        (["eval", "--task", "copy"], "no runs of copy"),
        (["eval", "--task", "addition", "--scratchpad", "I+X"], "scratchpad='I+X' is not accepted"),
        (["eval", "--task", "copy", "-o", "colour=red"], "has no option 'colour'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    if torch.cuda.is_available() and "cuda:7" in argv:
        pytest.skip("this machine has a GPU; the check is for one without")
    code = main([*argv, "--checkpoints", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_unwritable_checkpoint_folder(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = main(["train", "--pe", "nope", "--steps", "1", "--checkpoints", str(blocker)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot" in err and "--checkpoints" in err and len(err.splitlines()) == 1, err


def test_a_runs_weights_do_not_depend_on_jobs_or_on_the_threads_it_was_started_with(tmp_path):
    """The same run trained alone (``--jobs 1``, which used to give it every core's thread) and beside another
    (``--jobs 2``, one thread each), and in this process after asking torch for two threads: it trains on one
    intra-op thread each time, and to the same weights bit for bit (Adam turns another count's rounding into
    different weights within a few steps where a kernel splits its sums by thread; on this machine's torch the
    tiny preset's do not, so the thread count seen inside the steps is what can fail here)."""
    from probe.training.parallel import train_parallel

    config, other = _config(pe="nope", steps=30, model={}), _config(pe="t5", steps=30, model={})
    alone = train_parallel([(config, tmp_path / "alone")], "cpu", jobs=1)
    paired = train_parallel([(config, tmp_path / "paired"), (other, tmp_path / "other")], "cpu", jobs=2)
    assert [r.status for r in alone + paired] == ["trained"] * 3
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        inside: set[int] = set()
        train_run(config, tmp_path / "here", CPU, on_step=lambda *_: inside.add(torch.get_num_threads()))
        assert inside == {1}
        assert torch.get_num_threads() == 2  # the caller's count comes back
    finally:
        torch.set_num_threads(before)
    reference = _weights(tmp_path / "alone")
    for folder in ("paired", "here"):
        weights = _weights(tmp_path / folder)
        assert all(torch.equal(reference[name], weights[name]) for name in reference), folder


def test_a_task_with_fewer_validation_examples_than_asked_validates_on_all_of_them(tmp_path):
    """A PCFG of 2,000 training-side inputs holds about 200 out for IID validation: a run asking for 1,000 (the
    default) under the authors' protocol, which validates every few steps, used to stop at its first step
    ("cannot draw 1000"), and `probe eval` (500 IID examples) after it."""
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run
    from probe.tasks import get

    options = {"train_size": 2_000, "size_per_length": 10}
    config = _config(task="pcfg", task_options=options, steps=2, eval_every=1, eval_examples=1000, protocol="authors")
    result = train_run(config, tmp_path / "run", CPU)
    assert result.status == "trained"
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert [step for step, _ in stored["training"]["selection"]["history"]] == [1, 2]
    held_out = len(get("pcfg", **options).examples("valid"))
    assert 100 < held_out < 500
    report = evaluate_run(Run(tmp_path / "run", read_checkpoint_config(tmp_path / "run")), n_test=4, write=False)
    assert sum(bucket.n for bucket in report.buckets if bucket.seen) == held_out


def test_each_parallel_run_is_reported_here_as_it_ends_while_the_others_train(tmp_path):
    """``on_done`` is how a study lands a scenario early: run 0 (5 steps) ends while run 1 (1,500 steps) trains
    beside it, and run 2 takes run 0's worker; each is reported once, after its weights are written. (At 400
    steps the long run once ended first, on two cores shared with a running study.)"""
    from probe.training.parallel import train_parallel

    folders = [tmp_path / name for name in ("short", "long", "next")]
    runs = [(_config(steps=steps, checkpoint_every=2000), folder) for steps, folder in zip((5, 1500, 5), folders)]
    reported: list[tuple[int, bool, bool]] = []  # (run, its weights written, the long run's written)

    def on_done(i: int) -> None:
        written = [(folder / "model.safetensors").is_file() for folder in folders]
        reported.append((i, written[i], written[1]))

    results = train_parallel(runs, "cpu", jobs=2, on_done=on_done)
    assert [r.status for r in results] == ["trained"] * 3
    assert reported == [(0, True, False), (2, True, False), (1, True, True)]


def test_the_workers_progress_is_reported_while_the_caller_works_on_an_ended_run(tmp_path):
    """A study evaluates a scenario in ``on_done`` for minutes: the workers' steps must reach ``on_event``
    meanwhile, or a sitting's log falls silent that long and its pace reads as a pause. Here ``on_done`` for the
    short run waits for a step of the long run, which the old main loop could not report until it returned."""
    import threading

    from probe.training.parallel import train_parallel

    short, long = tmp_path / "short", tmp_path / "long"
    stepped = threading.Event()
    heard: list[bool | None] = []
    last_step = [0]

    def on_event(path: str, kind: str, step: int, *_) -> None:
        if path == str(long) and kind == "step":
            last_step[0] = step
            stepped.set()

    def on_done(i: int) -> None:
        if i == 0:
            stepped.clear()
            ended = last_step[0] == long_steps  # its worker started well before the short one's (a loaded machine)
            heard.append(None if ended else stepped.wait(timeout=120))

    long_steps = 400
    runs = [(_config(steps=5), short), (_config(steps=long_steps, checkpoint_every=1000), long)]
    results = train_parallel(runs, "cpu", jobs=2, on_event=on_event, on_done=on_done)
    assert [r.status for r in results] == ["trained"] * 2
    if heard == [None]:
        pytest.skip("the long run had ended before the short one: nothing left to hear from it")
    assert heard == [True]


def test_an_exception_in_the_callers_work_stops_the_sitting_in_the_main_thread(tmp_path):
    """The caller's items run on a thread of their own; one that raises (a corrupt checkpoint met while a
    scenario is evaluated) is raised by ``train_parallel`` itself as the workers train, and neither the items
    after it nor the runs not yet started are."""
    from probe.training.parallel import train_parallel

    called: list[str] = []

    def broken() -> None:
        called.append("broken")
        raise ValueError("an evaluation failed")

    folders = [tmp_path / f"run{i}" for i in range(4)]
    runs = [(_config(steps=200, checkpoint_every=1000), folder) for folder in folders]
    with pytest.raises(ValueError, match="an evaluation failed"):
        train_parallel(runs, "cpu", jobs=1, beside=[broken, lambda: called.append("later")])
    assert called == ["broken"]
    assert not folders[-1].exists()  # raised while the first run trained: the runs queued after it never start


def test_the_callers_work_beside_runs_while_the_workers_train(tmp_path):
    """``beside`` is where a study evaluates what a sitting before had trained: done as the workers train,
    so it holds none of them back (here its first item sees a worker's run folder appear), item by item."""
    import time

    from probe.training.parallel import train_parallel

    folder = tmp_path / "run"
    seen: list[bool] = []

    def first() -> None:
        deadline = time.monotonic() + 120
        while not folder.is_dir() and time.monotonic() < deadline:  # the worker makes it as it starts the run
            time.sleep(0.05)
        seen.append(folder.is_dir() and not (folder / "model.safetensors").is_file())

    results = train_parallel([(_config(steps=300), folder)], "cpu", jobs=1, beside=[first, lambda: seen.append(0)])
    assert [r.status for r in results] == ["trained"]
    assert seen == [True, 0]


def test_a_missing_main_job_run_is_named_with_the_command_that_trains_it(tmp_path):
    """A PE name resolves to the main job's run when no task is named, as the commands read it; the hint for a
    missing one is `probe train`, since `--task copy` trains copy's own recipe (4,000 unpacked steps) into the
    same folder."""
    from probe.runs.folders import train_command
    from probe.subjects.resolve import resolve

    with pytest.raises(ProbeError) as missing:
        resolve("nope", root=tmp_path, seed=1)
    assert "copy+split=paper+variant=count" in str(missing.value)
    assert f"(make it with: probe train --pe nope --seed 1 --checkpoints {tmp_path})" in str(missing.value)
    assert train_command("copy", {"split": "paper", "variant": "count", "train_length": 20}, "checkpoints") == (
        "probe train"
    )
    other = train_command("copy", {"split": "paper", "variant": "count-2x"}, "checkpoints")
    assert other == "probe train --task copy -o split=paper -o variant=count-2x"
