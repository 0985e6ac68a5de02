"""Every report is a :class:`probe.analysis.report.Report` (``name``, ``to_json``, ``to_rows``, ``write``): each
report class of probe.analysis and probe.extrapolation, on a small instance built by hand (no model trained), and
a scan that fails on a new ``*Report`` class without a sample here."""

from __future__ import annotations

import csv
import importlib
import inspect
import json
import pkgutil
from dataclasses import fields
from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch

import probe.analysis
import probe.extrapolation
from probe.analysis.eval_report import Bucket, EvalReport
from probe.analysis.perplexity import PerplexityReport, RunPerplexity, ScoringPlan
from probe.analysis.positions import PositionsReport, analyse_positions
from probe.analysis.report import Report
from probe.analysis.results import (
    AttendedReport,
    AttendedResult,
    CompareReport,
    CompareResult,
    attended_stats,
    distance_stats,
)
from probe.extrapolation.report import ExtrapolationReport, Outcome, RunExtrapolation
from probe.models import build_model
from probe.models.interventions import Intervention
from probe.subjects.inputs import PositionInput
from probe.subjects.run_info import RunInfo

A, B = RunInfo("a", "nope", 0, "NoPE"), RunInfo("b", "t5", 0, "T5")
MEMBERS = ("name", "to_json", "to_rows", "write")


@pytest.fixture(autouse=True)
def no_png(monkeypatch):
    """Skip the PNG export (a headless browser, seconds per figure): the HTML is still written."""

    def refuse(*args, **kwargs):
        raise RuntimeError("no static export in tests")

    monkeypatch.setattr(go.Figure, "write_image", refuse)


def _compare() -> CompareReport:
    generator = torch.Generator().manual_seed(0)
    values = torch.rand(4, 2, generator=generator, dtype=torch.float64)  # [example, layer]
    pairwise = torch.rand(4, 2, 2, 2, generator=generator, dtype=torch.float64)  # [example, layer, head_A, head_B]
    bucket = distance_stats(values, pairwise, "jsd", 0, 8, True, "test")
    overall = distance_stats(values, pairwise, "jsd", 0)
    result = CompareResult(A, B, "scan", {}, "jsd", 0, 4, [bucket], overall, values, [8] * 4)
    return CompareReport(A, [result], None, "scan", Path("."), stems=["nope", "t5"])


def _attended() -> AttendedReport:
    grid = torch.rand(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64).tril()  # [query, key]
    stats = {w: attended_stats(grid, w, "text", 4) for w in ("argmax", "attention")}
    return AttendedReport([AttendedResult(A, "scan", {}, 2, 12, 0, [6], stats)], "text", "unseen", 2, 0, 4, "scan")


def _positions() -> PositionsReport:
    generator = torch.Generator().manual_seed(0)
    inputs = [
        PositionInput(torch.randint(1, 10, (length,), generator=generator), length < 12, length)
        for length in (6, 8, 10, 14)
        for _ in range(2)
    ]
    model = build_model("nope", vocab_size=10, n_layers=1, n_heads=2, seed=0).double()
    result = analyse_positions(model, inputs, A, n_resamples=10)
    return PositionsReport([result], {"n_per_bucket": 2, "seed": 0}, Path("."))


def _perplexity() -> PerplexityReport:
    plan = ScoringPlan.scaled(16)
    nll = torch.rand(3, len(plan.contexts), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    run = RunPerplexity("NoPE", "nope", "a", nll)
    return PerplexityReport(plan, ["f0.py", "f1.py", "f2.py"], torch.tensor([40, 50, 60]), [run])


def _eval() -> EvalReport:
    buckets = [Bucket(8, 2, 2, 1.0, True), Bucket(16, 2, 1, 0.5, False)]
    return EvalReport("NoPE", "a", "scan", "scan", "nope", 0, 1.0, 0.5, buckets, 4)


def _extrapolation() -> ExtrapolationReport:
    cell = {"mean": 0.5, "low": 0.4, "high": 0.6, "n": 4}
    untouched = Outcome(Intervention(), "none", "none", 1.0, cell, [{"at": 16, **cell}])
    run = RunExtrapolation("NoPE", "nope", "a", 0, 8, "2 examples", [untouched], {})
    return ExtrapolationReport([run], "exact match", Path("."))


SAMPLES = {
    CompareReport: _compare,
    AttendedReport: _attended,
    PositionsReport: _positions,
    PerplexityReport: _perplexity,
    EvalReport: _eval,
    ExtrapolationReport: _extrapolation,
}


def _report_classes() -> set[type]:
    """Every class named ``*Report`` defined in a module of probe.analysis or probe.extrapolation."""
    found = set()
    for package in (probe.analysis, probe.extrapolation):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                if inspect.isclass(value) and name.endswith("Report") and value.__module__ == module.__name__:
                    found.add(value)
    return found - {Report}


def test_every_report_class_has_the_protocols_members_and_a_sample_here():
    classes = _report_classes()
    assert classes == set(SAMPLES), f"a report class without a sample in this test: {classes - set(SAMPLES)}"
    for cls in classes:
        defined = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else set()
        missing = [m for m in MEMBERS if not hasattr(cls, m) and m not in defined]
        assert not missing, f"{cls.__name__} lacks {missing} of the Report protocol"
        assert all(callable(getattr(cls, m)) for m in ("to_json", "to_rows", "write")), cls.__name__


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda cls: cls.__name__)
def test_every_report_behaves_as_the_protocol_says(cls, tmp_path):
    report: Report = SAMPLES[cls]()
    assert isinstance(report.name, str) and report.name
    data = report.to_json()
    assert isinstance(data, dict) and json.loads(json.dumps(data)) == data
    rows = report.to_rows()
    assert rows and all(isinstance(row, dict) for row in rows)
    files = report.write(tmp_path)
    assert files and all(isinstance(f, str) and Path(f).is_file() for f in files)
    stem = Path(files[0]).stem
    assert files[:2] == [str(tmp_path / f"{stem}.json"), str(tmp_path / f"{stem}.csv")]  # write_tables first
    assert json.loads((tmp_path / f"{stem}.json").read_text()) == data
    with open(tmp_path / f"{stem}.csv", newline="") as table:
        assert next(csv.reader(table)) == list(rows[0])
