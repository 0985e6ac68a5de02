"""A sweep's labels, manifest, report, refusals and dry-run plan, as a review of `probe sweep` found them wanting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import tiny_model
from rich.console import Console

from probe.analysis.eval_report import EVAL, Bucket, EvalReport, mean_over_seeds
from probe.analysis.evaluation import mean_reciprocal_ranks
from probe.cli import main
from probe.errors import ProbeError
from probe.runs.locks import run_lock
from probe.studies import sweep
from probe.studies.sweep import cluster
from probe.studies.sweep.console import _slots
from probe.training.bookkeeping import train_run

GRID = {
    "name": "review",
    "task": "reverse",
    "pe": "nope",
    "seed": 0,
    "steps": 4,
    "batch_size": 8,
    "checkpoint_every": 10,
    "log_every": 10,
    "eval_examples": 16,
    "eval_n": 8,
    "eval_valid": 4,
    "options": {"train_length": 4},
    "model": tiny_model(1),
}


def _eval(path: Path, pe: str, ood: float) -> EvalReport:
    """An eval report of the run folder ``path`` (as ``probe eval`` writes it), with one unseen length."""
    buckets = [Bucket(4, 10, 10, 1.0, True), Bucket(8, 10, int(10 * ood), ood, False)]
    return EvalReport(str(path), str(path), "reverse", path.parent.parent.name, pe, 0, 1.0, ood, buckets, 20)


def test_runs_differing_only_in_pe_options_keep_apart(tmp_path):
    grid = {**GRID, "pe": "rotary", "block": [{"pe_options": {"base": 500}}, {"pe_options": {"base": 10000}}]}
    runs = sweep.expand_grid(grid, tmp_path)
    assert [r.label for r in runs] == [
        "reverse+train_length=4/rotary+base=500/seed0",
        "reverse+train_length=4/rotary+base=10000/seed0",
    ]
    assert len(sweep.Manifest(tmp_path / "m.json", "review", runs).entries) == 2
    reports = [_eval(r.path, "rotary", ood) for r, ood in zip(runs, (0.2, 0.6))]
    assert [(m.pe, m.seeds) for m in mean_over_seeds(reports)] == [("rotary+base=500", [0]), ("rotary+base=10000", [0])]
    assert set(mean_reciprocal_ranks(reports)) == {"rotary+base=500", "rotary+base=10000"}
    plain = [_eval(tmp_path / "t" / pe / "seed0", pe, 0.5) for pe in ("rotary", "nope")]  # no options: as before
    assert [m.pe for m in mean_over_seeds(plain)] == ["rotary", "nope"]


def test_a_rerun_clears_old_results_and_the_report_leaves_out_runs_of_other_settings(tmp_path):
    (run,) = sweep.expand_grid(GRID, tmp_path)
    train_run(run.config, run.path, torch.device("cpu"))
    (run.path / EVAL).write_text(json.dumps(_eval(run.path, "nope", 0.5).to_json()))
    assert sweep.report([run])["evaluated"] == 1
    (edited,) = sweep.expand_grid({**GRID, "steps": 5}, tmp_path)  # the grid edited since: a conflict
    summary = sweep.report([edited])
    assert summary["evaluated"] == 0 and summary["missing"] == [edited.label]
    manifest = sweep.Manifest(tmp_path / "m.json", "review", [edited])
    manifest.update(edited.label, write=False, state="done", iid_accuracy=0.9, ood_accuracy=0.5, status="selected")
    cluster._mark_plan([edited], manifest, evaluate=True)
    entry = json.loads((tmp_path / "m.json").read_text())["runs"][0]
    assert entry["state"] == "pending" and not {"iid_accuracy", "ood_accuracy", "status"} & set(entry)


def test_a_partial_invocation_keeps_the_manifests_other_runs(tmp_path):
    runs = sweep.expand_grid({**GRID, "pe": ["nope", "t5"]}, tmp_path)
    sweep.Manifest(tmp_path / "m.json", "review", runs).write()
    part = sweep.Manifest(tmp_path / "m.json", "review", runs[1:])
    assert list(part.entries) == [runs[1].label, runs[0].label]


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"name": "g"}, "grid g is empty"),
        ({**GRID, "block": []}, "empty block list"),
        ({**GRID, "pe": ["nope", "nope"]}, "pe lists 'nope' twice"),
        ({**GRID, "seed": [0, 0]}, "seed lists 0 twice"),
        ({**GRID, "block": [{"seed": 1}, {"seed": 1}]}, "nope/seed1 is already listed"),
        ({**GRID, "steps": "ten"}, "steps must be int, got 'ten'"),
        ({**GRID, "steps": -5}, "steps in the grid must be at least 1"),
        ({k: v for k, v in GRID.items() if k != "task"}, "grid review: names no task"),
        ({**{k: v for k, v in GRID.items() if k != "task"}, "block": [{"task": "copy"}, {}]}, "block 2: names no task"),
    ],
)
def test_empty_duplicate_and_mistyped_grids_are_refused(tmp_path, grid, message):
    with pytest.raises(ProbeError, match=message):
        sweep.expand_grid(grid, tmp_path)


def test_a_bad_grid_file_is_one_line_naming_no_flag(tmp_path, capsys):
    (tmp_path / "g.toml").write_text('task = "reverse"\npe = "nope"\nsteps = -5\n')
    assert main(["sweep", "--grid", str(tmp_path / "g.toml"), "--checkpoints", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "steps in the grid must be at least 1" in err and "--steps" not in err and len(err.splitlines()) == 1


def test_the_plan_marks_damaged_in_use_and_conflicting_runs_and_prices_none_of_them(tmp_path):
    conflict, damaged, held, new = sweep.expand_grid({**GRID, "seed": [0, 1, 2, 3]}, tmp_path)
    train_run(sweep.expand_grid({**GRID, "steps": 3}, tmp_path)[0].config, conflict.path, torch.device("cpu"))
    damaged.path.mkdir(parents=True)
    (damaged.path / "config.json").write_text("{ not json")
    console = Console(record=True, width=300)
    with run_lock(held.path):
        plan = sweep.dry_run(
            [conflict, damaged, held, new], "review", sweep.Launch(tmp_path), console, tokens_per_second=1000
        )
    assert [r["state"] for r in plan["runs"]] == ["conflict", "damaged", "in use", "new"]
    assert [r["estimated_seconds"] > 0 for r in plan["runs"]] == [False, False, False, True]
    assert "1 new, 0 to resume, 0 to evaluate, 0 done, 1 conflict, 1 damaged, 1 in use)" in console.export_text()


def test_a_sweeps_errors_point_to_the_folder_not_to_force():
    said = cluster.sweep_advice("cannot resume from x (bad); delete it or pass --force to start over")
    assert said == "cannot resume from x (bad); remove the run folder or choose another --checkpoints"


def test_runs_at_a_time_follow_num_cpus_and_whole_threads(tmp_path):
    assert _slots(sweep.Launch(tmp_path, num_cpus=8))[0] == 8
    assert _slots(sweep.Launch(tmp_path, num_cpus=2, cpus_per_run=0.5))[0] == 2  # each run trains on one thread


def test_the_pretrain_grids_plan_prices_no_evaluation_of_its_code_runs(tmp_path):
    """A code run is read by held-out perplexity while it trains and not evaluated after: its evaluation is priced
    at nothing (the dry run of the pretrain grid stopped at "unknown task 'code'" looking for its test split)."""
    from probe.studies.sweep.cost import evaluation_work

    runs = sweep.expand_grid(sweep.load_grid("pretrain"), tmp_path)
    assert runs and all(r.config.task == "code" for r in runs)
    work = evaluation_work(runs[0])
    assert work.seconds(1000.0, None) == 0.0


def test_a_code_runs_plan_is_keyed_by_its_bpes_vocabulary(tmp_path):
    """The dry run keys a code run's throughput by the vocabulary its corpus asks for (it read 0, shown as "~1")."""
    from probe.studies.sweep.cost import vocabulary_size

    runs = sweep.expand_grid(sweep.load_grid("pretrain"), tmp_path)
    assert {vocabulary_size(r) for r in runs} == {2048}
