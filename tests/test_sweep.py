"""`probe sweep`: grids, bad input, and a Ray sweep that equals `train_run` one by one, survives a
killed worker, and starts nothing when rerun. One local Ray instance (2 CPUs) for the module."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch
from helpers import tiny_model
from rich.console import Console

from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.studies import sweep
from probe.studies.sweep.cluster import in_order
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

TINY = {
    "task": "reverse",
    "pe": ["nope", "t5"],
    "seed": [0, 1],
    "steps": 400,
    "batch_size": 16,
    "checkpoint_every": 20,
    "log_every": 5,
    "eval_examples": 16,
    "eval_n": 32,
    "eval_valid": 16,
    "options": {"train_length": 4},
    "model": tiny_model(1),
    "name": "tiny",
}


def test_paper_grid_covers_sections_3_and_5(tmp_path):
    runs = sweep.expand_grid(sweep.load_grid("paper"), tmp_path)
    assert len(runs) == len({r.path for r in runs}) == 1050
    assert {r.config.pe for r in runs} == {"nope", "t5", "alibi", "rotary", "ape"}
    assert {r.config.seed for r in runs} == {0, 1, 2} and {r.config.preset for r in runs} == {"base"}
    folders = {r.path.parent.parent.name for r in runs}
    assert len(folders) == 17 + 53
    assert "addition+scratchpad=full" in folders and "sorting+scratchpad=I+C+O+R+variant=multi-digit" in folders
    assert "copy+split=paper+variant=count-2x" in folders and "addition+template=authors+train_length=8" in folders
    assert "scan+split=paper" in folders and "reverse+split=paper+variant=random-2x" in folders


def test_flags_default_is_probe_trains_default_and_scratchpad_only_where_it_exists(tmp_path):
    runs = sweep.expand_grid(sweep.grid_from_flags(), tmp_path)
    assert [(r.config.pe, r.config.seed) for r in runs][-1] == ("nope", 1) and len(runs) == 6
    both = sweep.expand_grid(sweep.grid_from_flags(tasks=["scan", "copy"]), tmp_path)  # as `probe train --task`
    assert len(both) == 12 and {"copy/nope/seed1", "scan/nope/seed1", "copy/ape/seed0"} <= {r.label for r in both}
    grid = sweep.grid_from_flags(tasks=["scan", "addition"], pes=["nope"], scratchpads=["none", "full"])
    assert sorted(r.label for r in sweep.expand_grid(grid, tmp_path)) == [
        "addition+scratchpad=full/nope/seed0",
        "addition/nope/seed0",
        "scan/nope/seed0",
    ]


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"task": "nosuch"}, "unknown task"),
        ({"task": "scan", "pe": "nosuch"}, "unknown positional encoding"),
        ({"task": "copy", "options": {"variant": "nosuch"}}, "variant"),
        ({"task": "scan", "steps": [1, 2]}, "must be one value"),
        ({"colour": "red"}, "unknown key"),
        ({"task": "scan", "model": {"n_layerz": 1}}, "unknown model option"),
        ({"task": "scan", "pe": "nope", "block": [{"steps": 5}, {"steps": 6}]}, "share the folder"),
    ],
)
def test_bad_grids_fail_before_anything_runs(tmp_path, grid, message):
    with pytest.raises(ProbeError, match=message):
        sweep.expand_grid(grid, tmp_path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--grid", "nosuch"], "unknown grid"),
        (["--pe", "nosuch"], "unknown positional encoding"),
        (["--address", "127.0.0.1:1"], "cannot reach a Ray cluster"),
        (["--address", "ray://127.0.0.1:1"], "cannot reach a Ray cluster"),
        (["--cpus-per-run", "0"], "would start every run at once"),
        (["--cpus-per-run", "0", "--dry-run"], "would start every run at once"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main(["sweep", "--checkpoints", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_dry_run_counts_and_prices_the_grid(tmp_path, capsys):
    grid = tmp_path / "tiny.toml"
    grid.write_text(_toml(TINY))
    assert (
        main(
            [
                "sweep",
                "--grid",
                str(grid),
                "--checkpoints",
                str(tmp_path / "ck"),
                "--dry-run",
                "--json",
                "--tokens-per-second",
                "1000",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["count"] == 4 and plan["states"]["new"] == 4
    assert all(r["estimated_seconds"] > 0 for r in plan["runs"]) and not (tmp_path / "ck").exists()


def test_throughput_is_timed_at_the_runs_own_batch_with_the_threads_asked_for(tmp_path, monkeypatch):
    """No cut-down batch (tokens/s at batch 8 is well below batch 64's on a CPU), the torch threads
    each run will get, the first step left out as a warm-up, the median of the rest."""
    import probe.training.loop
    import probe.training.stacked

    run = sweep.expand_grid({**TINY, "batch_size": 64}, tmp_path)[0]
    seen: dict[str, int] = {}

    class FakeTrainer:
        def __init__(self, config: TrainConfig, path, device, source=None) -> None:
            seen["batch_size"], seen["steps"] = config.batch_size, config.steps

    def fake_train_alone(trainer, on_step) -> tuple[float, float]:
        seen["threads"] = torch.get_num_threads()
        for step, speed in enumerate([1.0, 50.0, 10.0, 30.0, 20.0, 40.0], start=1):
            on_step(step, 0.0, speed)
        return 0.0, 0.0

    monkeypatch.setattr(probe.training.loop, "Trainer", FakeTrainer)
    monkeypatch.setattr(probe.training.stacked, "train_alone", fake_train_alone)
    before = torch.get_num_threads()
    threads = 2 if before != 2 else 3
    assert sweep.measure_tokens_per_second(run, "cpu", steps=5, threads=threads) == 30.0
    assert seen == {"batch_size": 64, "steps": 6, "threads": threads} and torch.get_num_threads() == before


def test_batch_tokens_are_the_padded_tokens_the_trainer_times(tmp_path):
    """tokens/s counts every token of a padded batch, so the tokens a step costs must too."""
    from probe.tasks.batches import batch_stream
    from probe.training.sources import TaskSource

    run = sweep.expand_grid({**TINY, "options": {"train_length": 8}}, tmp_path)[0]
    config = run.config
    data = TaskSource(config.task, config.task_options, config.seed).training_set(config.seed)
    sizes = []
    for epoch, _, index in batch_stream(data, config.batch_size, config.seed):
        if epoch:
            break
        sizes.append(data.batch(index)[0].numel())
    unpadded = config.batch_size * data.lengths.float().mean().item()
    assert sweep.mean_batch_tokens(run, sample=None) == pytest.approx(sum(sizes) / len(sizes), rel=1e-9)
    assert sweep.mean_batch_tokens(run, sample=None) > unpadded


def test_a_compute_bound_step_is_timed_at_a_smaller_batch_on_a_cpu(tmp_path):
    """tokens/s of a step over MEASURED_WORK FLOPs does not depend on the batch (base on copy, this CPU:
    112-125 tokens/s at batch 8 against 141 at 64, in 17-21 s instead of 127 s); below it the batch stays."""
    from probe.studies.sweep.cost import MEASURED_WORK, measured_batch

    tiny = sweep.expand_grid(TINY, tmp_path)[0]
    assert measured_batch(tiny, 2_000.0, "cpu") == tiny.config.batch_size
    base = sweep.expand_grid({**TINY, "preset": "base", "model": {}, "batch_size": 64}, tmp_path)[0]
    shape = base.config.model_config(vocab_size=64)
    weights = shape.n_layers * (4 * shape.d_model**2 + 2 * shape.d_model * shape.d_mlp)
    assert weights == 12 * (4 * 768**2 + 2 * 768 * 3072)  # base: 84.9M in its attention and MLPs
    cut = measured_batch(base, 2_812.0, "cpu")
    assert cut == int(64 * MEASURED_WORK / (6 * weights * 2_812.0)) and 1 <= cut < 64
    assert measured_batch(base, 2_812.0, "cuda") == 64 and measured_batch(base, None, "cpu") == 64


@pytest.mark.parametrize("task, options", [("addition", {"scratchpad": "full"}), ("copy", {}), ("lego", {})])
def test_a_price_reads_one_pool_of_examples_and_lands_near_the_whole_epoch(tmp_path, task, options):
    """The dry run cuts its epoch from 32 batches' worth of training examples (the paper grid's 70 task
    folders in seconds, not minutes); the mean padded batch stays within a few percent of the whole set's."""
    from probe.training.sources import TaskSource

    run = sweep.expand_grid({**TINY, "task": task, "options": options, "batch_size": 16}, tmp_path)[0]
    whole = sweep.mean_batch_tokens(run, sample=None)
    sampled = sweep.mean_batch_tokens(run)
    assert sampled == pytest.approx(whole, rel=0.05)
    size = len(TaskSource(task, run.config.task_options, 0).task.examples("train", seed=0))
    assert 32 * 16 < size  # the sample is a part of the set, not all of it


def test_cost_is_steps_left_times_batch_tokens_over_throughput(tmp_path):
    runs = sweep.expand_grid(TINY, tmp_path)
    cost = sweep.estimate_cost(runs, tokens_per_second=1000.0)
    per_run = TINY["steps"] * sweep.mean_batch_tokens(runs[0]) / 1000.0
    assert cost["seconds"] == pytest.approx([per_run] * len(runs)) and cost["source"] == "given"
    assert sweep.wall_seconds(cost["seconds"], 2) == pytest.approx(2 * per_run)


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """A local Ray instance of 2 CPUs whose two worker processes are already up, with torch and probe
    imported. A fresh worker takes seconds to start, longer than a whole test run here, so without
    this the first worker can finish every run before the second one exists. Ray writes a token
    under ~/.ray: it gets a home of its own, so the suite leaves the user's home alone (and runs
    with a read-only one)."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(tmp_path_factory.mktemp("ray-home")))
        cluster = sweep.connect(None, num_cpus=2)

    @ray.remote(num_cpus=0)
    class Barrier:
        def __init__(self) -> None:
            self.arrived = 0

        def arrive(self) -> int:
            self.arrived += 1
            return self.arrived

        def count(self) -> int:
            return self.arrived

    @ray.remote(num_cpus=1)
    def warm(barrier) -> int:
        import time

        import probe.training.bookkeeping  # noqa: F401  (what run_one imports first)

        ray.get(barrier.arrive.remote())
        deadline = time.time() + 120
        while ray.get(barrier.count.remote()) < 2 and time.time() < deadline:
            time.sleep(0.05)
        return os.getpid()

    barrier = Barrier.remote()
    assert len(set(ray.get([warm.remote(barrier) for _ in range(2)]))) == 2  # two workers, at the same time
    yield cluster
    ray.shutdown()


def test_too_many_gpus_per_run_is_refused(ray_local, tmp_path, capsys):
    grid = tmp_path / "tiny.toml"
    grid.write_text(_toml(TINY))
    assert main(["sweep", "--grid", str(grid), "--checkpoints", str(tmp_path), "--gpus-per-run", "2"]) == 2
    assert "more than any node" in capsys.readouterr().err
    assert not any(p.is_dir() for p in tmp_path.iterdir())


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) open at one time, an end before a start at the same instant."""
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_most_at_once_counts_overlapping_spans():
    assert _most_at_once([(0, 2), (1, 3), (2, 4)]) == 2  # the first ends as the third starts
    assert _most_at_once([(0, 5), (1, 3), (2, 4)]) == 3


def test_a_polls_news_is_relayed_in_the_order_of_the_workers_clocks(tmp_path):
    a, b, c, _ = sweep.expand_grid(TINY, tmp_path)
    events = [  # as drained: c started on the CPU a freed, before the driver collected a's result
        {"kind": "step", "label": a.label, "time": 1.0, "step": 10, "total": 60},
        {"kind": "start", "label": c.label, "time": 3.0},
        {"kind": "step", "label": b.label, "time": 2.5, "step": 5, "total": 60},
    ]
    finished = [(a, {"state": "done", "finished": 2.0}), (b, {"state": "done", "finished": 4.0})]
    news = in_order(events, finished)
    assert [(n["kind"], n["label"]) for n in news] == [
        ("step", a.label),
        ("finish", a.label),
        ("step", b.label),
        ("start", c.label),
        ("finish", b.label),
    ]
    assert news[1]["result"] == {"state": "done", "finished": 2.0}


def test_sweep_equals_one_by_one_survives_a_killed_worker_and_reruns_nothing(ray_local, tmp_path):
    runs = sweep.expand_grid(TINY, tmp_path / "sweep")
    manifest = sweep.Manifest(tmp_path / "sweep" / "sweep-tiny.json", "tiny", runs)
    pids: dict[str, int] = {}
    killed: list[str] = []
    killed_at: list[float] = []
    relayed_running: set[str] = set()
    relayed_most = 0

    def on_event(event):
        nonlocal relayed_most
        label = event.get("label")
        if event["kind"] == "start":
            pids[label] = event["node"]["pid"]
            relayed_running.add(label)
            relayed_most = max(relayed_most, len(relayed_running))
        elif event["kind"] == "finish":
            relayed_running.discard(label)
        elif event["kind"] == "step" and not killed and 40 <= event["step"] <= event["total"] // 2:
            killed.append(label)  # kill the worker process mid-run, after a checkpoint was written
            killed_at.append(time.time())
            relayed_running.discard(label)
            os.kill(pids[label], signal.SIGKILL)

    sweep.execute(runs, manifest, cpus_per_run=1, max_retries=3, on_event=on_event)
    entries = {e["label"]: e for e in json.loads(manifest.path.read_text())["runs"]}
    assert [e["state"] for e in entries.values()] == ["done"] * 4, entries
    assert killed and entries[killed[0]]["attempts"] == 2 and entries[killed[0]]["status"] == "resumed"
    assert entries[killed[0]]["history"][0]["node"]["pid"] != entries[killed[0]]["node"]["pid"]
    # Two CPUs, one per run: two at a time, never three, on the workers' own clocks (each attempt from its start
    # to its result, the killed one to its kill) and in the order the driver relays their news (a run that took
    # a finished one's CPU is relayed as started after that finish).
    spans = [(e["started"], e["finished"]) for e in entries.values()]
    spans.append((entries[killed[0]]["history"][0]["started"], killed_at[0]))
    assert _most_at_once(spans) == 2 and relayed_most == 2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what a worker asking for one CPU trains with
    try:
        for run in runs:
            alone = train_run(TrainConfig(**run.config.to_dict()), tmp_path / "alone" / run.label, torch.device("cpu"))
            assert alone.status == "trained"
            ours, theirs = load_checkpoint(run.path).state_dict(), load_checkpoint(alone.path).state_dict()
            assert ours.keys() == theirs.keys()
            assert all(torch.equal(ours[k], theirs[k]) for k in ours), run.label
    finally:
        torch.set_num_threads(threads)

    events = []
    again = sweep.Manifest(manifest.path, "tiny", runs)
    sweep.execute(runs, again, cpus_per_run=1, on_event=events.append)
    assert [e["kind"] for e in events] == ["plan"] and events[0]["todo"] == []
    assert again.counts()["done"] == 4 and again.entries[killed[0]]["attempts"] == 2

    summary = sweep.report(runs)
    assert summary["evaluated"] == 4 and {row["pe"] for row in summary["aggregate"]} == {"nope", "t5"}
    assert set(summary["mean_rank"]["all tasks"]) == {"nope", "t5"}
    reciprocal = summary["mean_reciprocal_rank"]["all tasks"]  # two queries (seeds), 1 or 1/2 each
    assert set(reciprocal) == {"nope", "t5"} and sum(reciprocal.values()) == pytest.approx(1.5)


def _toml(grid: dict) -> str:
    def value(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    return "\n".join(f"{k} = {value(v)}" for k, v in grid.items()) + "\n"


def test_a_failed_run_is_recorded_and_the_others_finish(ray_local, tmp_path):
    grid = {**TINY, "pe": "nope", "block": [{"seed": 3}, {"seed": 4, "lr": 1e12}]}  # the second diverges
    runs = sweep.expand_grid(grid, tmp_path)
    manifest = sweep.execute(runs, sweep.Manifest(tmp_path / "m.json", "fail", runs), cpus_per_run=1)
    good, bad = (manifest.entries[r.label] for r in runs)
    assert good["state"] == "done" and bad["state"] == "failed" and bad["attempts"] == 1
    assert "loss became" in bad["error"] and json.loads((tmp_path / "m.json").read_text())["counts"]["failed"] == 1


def test_every_registered_pe_runs_through_a_sweep_and_its_report(tmp_path):
    """The registry is the sweep's source: a grid of every PE (the zoo included) trains, evaluates
    and aggregates each one under its own label, with no list of names in the sweep."""
    from probe.models.registry import PE_KINDS

    grid = {**TINY, "pe": list(PE_KINDS), "seed": 0, "steps": 4, "checkpoint_every": 10, "eval_n": 8, "eval_valid": 4}
    runs = sweep.expand_grid(grid, tmp_path)
    assert [r.config.pe for r in runs] == list(PE_KINDS)
    results = [sweep.run_one(r.to_dict(), "cpu", 1, evaluate=True) for r in runs]
    assert all(r["state"] == "done" for r in results), [r.get("error") for r in results]
    summary = sweep.aggregate({r.label: r.path for r in runs})
    assert summary["missing"] == [] and sorted(row["pe"] for row in summary["aggregate"]) == sorted(PE_KINDS)
    assert set(summary["mean_reciprocal_rank"]["all tasks"]) == set(PE_KINDS)  # every PE ranked
    # one category of tasks: "all tasks" is its ranking again, kept in the JSON, read once in the text and figures
    (group,) = set(summary["mean_reciprocal_rank"]) - {"all tasks"}
    assert summary["mean_reciprocal_rank"]["all tasks"] == summary["mean_reciprocal_rank"][group]
    console = Console(record=True, width=400)
    sweep.show_report(runs, "zoo", sweep.Launch(checkpoints=tmp_path), console)
    lines = [line for line in console.export_text().splitlines() if "rank (" in line]
    assert [line.split(";")[0] for line in lines] == [f"mean reciprocal rank ({group}", f"mean rank ({group}"]
    bars = sweep.report_figure_objects(summary)["mean_reciprocal_rank"].data[0].x
    assert list(bars) == [group]


def test_grids_name_the_pe_sets_the_code_derives(tmp_path):
    from probe.studies.plans import PE_SETS

    for grid, pes in (("paper", PE_SETS["paper"]), ("reproduce", PE_SETS["paper"]), ("pretrain", PE_SETS["pretrain"])):
        runs = sweep.expand_grid(sweep.load_grid(grid), tmp_path)
        assert tuple(dict.fromkeys(r.config.pe for r in runs)) == pes


def test_the_default_grid_is_the_runs_probe_train_plans(tmp_path):
    """default.toml spells out the NoPE' block :func:`probe.studies.plans.seed_baseline_blocks` adds to `probe train`
    with no arguments, so a sweep and `probe train` share (and skip) each other's runs."""
    from argparse import Namespace

    from probe.commands.train import planned_runs
    from probe.studies.plans import seed_baseline_blocks

    grid = sweep.load_grid("default")
    assert [
        {k: v if isinstance(v, list) else [v] for k, v in b.items()} for b in grid["block"]
    ] == seed_baseline_blocks([0])
    runs = sweep.expand_grid(grid, tmp_path)
    assert [(r.config.pe, r.config.seed) for r in runs] == planned_runs(Namespace(pe=None, seed=None))
