"""The evaluation report as one type: ``eval.json`` read and written through it unchanged, older files still
read, broken ones refused; and the one mean over seeds that `probe reproduce` and `probe sweep` both report."""

from __future__ import annotations

import json

import pytest
from helpers import FOLDER

from probe.analysis.eval_report import Bucket, EvalReport, LastStep, mean_over_seeds, read_eval


def _report(pe: str, seed: int, ood: float | None, folder: str = "scan", **extra) -> EvalReport:
    buckets = [Bucket(2, 4, 4, 1.0, True)] + ([] if ood is None else [Bucket(6, 4, round(4 * ood), ood, False)])
    return EvalReport(f"{pe} {seed}", "", "scan", folder, pe, seed, 1.0, ood, buckets, 8, **extra)


def test_an_eval_json_written_by_probe_eval_reads_back_to_the_same_dict(checkpoints):
    path = checkpoints / FOLDER / "nope" / "seed0" / "eval.json"
    written = json.loads(path.read_text())
    report = read_eval(path.parent)
    assert report is not None and report.to_json() == written
    assert list(report.to_json()) == list(written)  # the keys in the order the file has them
    assert json.dumps(report.to_json(), indent=2) == json.dumps(written, indent=2)
    rows = report.to_rows()
    assert [r["length"] for r in rows] == [b["length"] for b in written["buckets"]]
    assert sum(r["n"] for r in rows) == written["n_examples"]  # IID validation and test examples, every one in a bucket


def test_an_eval_json_from_before_counts_and_labels_still_reads(tmp_path):
    old = {
        "task": "scan",
        "task_folder": "scan",
        "pe": "t5",
        "seed": 1,
        "iid_accuracy": 0.9,
        "ood_accuracy": None,
        "buckets": [{"length": 3, "accuracy": 0.9, "seen": True}],
    }
    (tmp_path / "eval.json").write_text(json.dumps(old))
    report = read_eval(tmp_path)
    assert report is not None and (report.pe, report.seed, report.ood_accuracy) == ("t5", 1, None)
    assert report.buckets == [Bucket(3, 0, 0, 0.9, True)] and report.label == "t5"


@pytest.mark.parametrize(
    "change",
    [
        {"seed": "zero"},
        {"iid_accuracy": "high"},
        {"buckets": [{"length": 3, "accuracy": 0.9, "seen": "yes"}]},
        {"buckets": [{"length": 3, "accuracy": True, "seen": True}]},
        {"buckets": None},
    ],
)
def test_an_eval_json_that_is_not_a_report_reads_as_none(tmp_path, change):
    good = _report("nope", 0, 0.5).to_json()
    (tmp_path / "eval.json").write_text(json.dumps({**good, **change}))
    assert read_eval(tmp_path) is None
    (tmp_path / "eval.json").write_text("[1, 2]")
    assert read_eval(tmp_path) is None


def test_mean_over_seeds_hand_worked():
    reports = [
        _report("nope", 0, 0.25, last=LastStep(10, 0.5, 0.0), selected_step=6),
        _report("t5", 0, 0.5),
        _report("nope", 1, 0.75),
        _report("nope", 2, None),  # no unseen length: adds nothing to the OOD mean
        _report("nope", 0, 0.0, folder="copy"),
    ]
    means = mean_over_seeds(reports)
    assert [(m.task_folder, m.pe) for m in means] == [("scan", "nope"), ("scan", "t5"), ("copy", "nope")]
    nope = means[0]
    assert nope.seeds == [0, 1, 2] and nope.ood_accuracy == pytest.approx(0.5)
    assert nope.ood_range == (0.25, 0.75)  # seed 2 has no unseen length
    assert nope.lengths == [2, 6] and nope.accuracy == pytest.approx([1.0, 0.5]) and nope.seen == [True, False]
    assert nope.selected_steps == [6] and nope.last_iid == 0.5 and nope.last_ood == 0.0
    assert means[1].last_iid is None and means[1].selected_steps == [] and means[1].ood_range is None
    assert mean_over_seeds([_report("alibi", 0, None)])[0].ood_accuracy is None


def test_reproduce_and_sweep_report_the_same_means_none_where_no_seed_has_unseen_lengths(tmp_path):
    from probe.studies.reproduce_report import _by_pe
    from probe.studies.sweep.report import aggregate

    reports = [_report("nope", 0, None), _report("nope", 1, None), _report("t5", 0, 0.5), _report("t5", 1, 0.25)]
    runs = {}
    for r in reports:
        folder = tmp_path / r.pe / f"seed{r.seed}"
        folder.mkdir(parents=True)
        (folder / "eval.json").write_text(json.dumps(r.to_json()))
        runs[f"{r.pe}-{r.seed}"] = folder
    rows = {row["pe"]: row for row in aggregate(runs)["aggregate"]}
    by_pe = _by_pe(reports)
    for pe in ("nope", "t5"):
        assert rows[pe]["ood_accuracy"] == by_pe[pe]["ood"]
        assert rows[pe]["iid_accuracy"] == by_pe[pe]["iid"] == 1.0
        assert rows[pe]["accuracy"] == by_pe[pe]["accuracy"]
    assert rows["nope"]["ood_accuracy"] is None and rows["t5"]["ood_accuracy"] == pytest.approx(0.375)
