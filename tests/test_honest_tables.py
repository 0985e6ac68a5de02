"""Honest tables: `probe eval` ranks PEs once, over queries it names (a seed only one PE has is left out and
said to be); `probe extrapolate` flags an intervention that buys unseen lengths with the seen ones wherever
it reports it, never calls it best, and prints a tuned value as the value (temperature=1, not none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.analysis.eval_report import EvalReport
from probe.analysis.evaluation import pe_ranking
from probe.extrapolation.report import ExtrapolationReport, Outcome, RunExtrapolation
from probe.figures.extrapolation import extrapolation_figure
from probe.models.interventions import Intervention


def _eval(pe: str, seed: int, ood: float) -> EvalReport:
    return EvalReport(
        label=f"scan/{pe}/seed{seed}",
        path=f"/runs/scan/{pe}/seed{seed}",
        pe_options_at_inference={},
        task="scan",
        task_folder="scan",
        task_options={},
        pe=pe,
        seed=seed,
        n_examples=10,
        iid_accuracy=1.0,
        ood_accuracy=ood,
        buckets=[],
    )


def test_the_eval_ranking_counts_the_queries_every_pe_has_and_names_what_it_leaves_out():
    """NoPE's second seed scores best of all; it has no query of its own, so it moves nothing and is named."""
    reports = [_eval("nope", 0, 0.05), _eval("t5", 0, 0.06), _eval("alibi", 0, 0.04), _eval("nope", 1, 0.9)]
    ranking = pe_ranking(reports)
    assert list(ranking.scores) == ["t5", "nope", "alibi"]
    assert ranking.scores["nope"] == 0.5 and ranking.queries == [("scan", 0)]
    assert ranking.left_out == ["scan/nope/seed1"]
    assert "scan seed 0" in ranking.describe() and "scan/nope/seed1" in ranking.describe()


def test_the_eval_ranking_says_how_many_of_its_queries_a_tie_decides():
    """Rotary and NoPE both at 0% on scan seed 1: the tie order, not the models, puts Rotary ahead; said so."""
    reports = [_eval("nope", 0, 0.05), _eval("rotary", 0, 0.01), _eval("nope", 1, 0.0), _eval("rotary", 1, 0.0)]
    ranking = pe_ranking(reports)
    assert ranking.tied == 1 and ranking.to_json()["tied_queries"] == 1
    assert ranking.scores == {"nope": 0.75, "rotary": 0.75}
    assert "ties in 1 of them, broken as the authors' notebook breaks them" in ranking.describe()
    untied = pe_ranking(reports[:2])
    assert untied.tied == 0 and "ties" not in untied.describe()


def _outcome(
    intervention: Intervention, family: str, kind: str, iid: float, ood: float, valid: float | None = None
) -> Outcome:
    """One outcome; its validation slice scores ``valid`` (default: as its test does)."""
    stats = {"mean": ood, "low": ood - 0.01, "high": ood + 0.01, "n": 40}
    valid = ood if valid is None else valid
    return Outcome(intervention, family, kind, iid, stats, [{"at": 30, **stats}], valid=(valid, 0.0))


def _report() -> ExtrapolationReport:
    """ALiBi untouched at 96% IID; a per-head temperature that lifts OOD most but drops IID to 27.5%; a tuned
    temperature that settled on no change; a log-length rule that helps a little and keeps IID."""
    outcomes = [
        _outcome(Intervention(), "none", "none", 0.96, 0.065),
        _outcome(Intervention(log_length=20), "log-length", "fixed", 0.95, 0.08),
        _outcome(Intervention(), "temperature", "tuned", 0.96, 0.065),
        _outcome(Intervention(temperature=0.5), "head-temperature", "tuned", 0.275, 0.115),
    ]
    run = RunExtrapolation("scan/alibi/seed0", "alibi", "/runs/alibi", 0, 20, "valid", outcomes, {})
    return ExtrapolationReport([run], "exact match", Path("/runs"))


def test_an_intervention_that_drops_iid_is_flagged_everywhere_and_not_called_best(tmp_path):
    report = _report()
    data = report.to_json()
    run = data["runs"][0]
    assert [o["iid_dropped"] for o in run["outcomes"]] == [False, False, False, True]
    assert run["best"] == "log-length=20" and data["iid_margin"] == 0.05
    rows = report.to_rows()
    assert {r["intervention"] for r in rows if r["iid_dropped"]} == {"temperature=0.5"}
    markdown = report.to_markdown()
    assert "27.5% (-68.5 pts, dropped)" in markdown and "best on the validation slice that keeps IID" in markdown
    assert "log-length=20 (test +1.5 pts)" in markdown
    figure = extrapolation_figure(data["runs"], report.measure)
    assert [t.name for t in figure.data if "IID dropped" in t.name] == ["temperature=0.5 (tuned, IID dropped)"]


def test_a_tuned_value_of_no_change_is_printed_as_the_value(tmp_path):
    report = _report()
    tuned = report.to_json()["runs"][0]["outcomes"][2]
    assert tuned["shown"] == "temperature=1"
    assert "| tuned | temperature | temperature=1 |" in report.to_markdown()
    assert json.loads(json.dumps(report.to_json()))  # still plain JSON


@pytest.mark.parametrize(
    ("before", "after", "dropped"),
    [(1.0, 0.95, False), (0.95, 0.90, False), (0.8, 0.75, False), (0.95, 0.8995, True), (0.96, 0.275, True)],
)
def test_iid_is_dropped_by_more_than_five_points_however_the_floats_round(before, after, dropped):
    """10 of 200 examples is 5 points exactly: 1.0 - 0.95 and 0.95 - 0.90 round to either side of 0.05 in floats."""
    outcomes = [
        _outcome(Intervention(), "none", "none", before, 0.1),
        _outcome(Intervention(temperature=2), "t", "tuned", after, 0.2),
    ]
    run = RunExtrapolation("scan/nope/seed0", "nope", "/runs/nope", 0, 20, "valid", outcomes, {})
    assert run.iid_dropped(outcomes[1]) == dropped


def test_best_is_chosen_on_the_validation_slice_not_the_test():
    """A cap that scores highest on the test but below log-length on validation is not called best; one that
    scores no better than untouched on validation leaves no best at all."""
    outcomes = [
        _outcome(Intervention(), "none", "none", 0.96, 0.065, valid=0.07),
        _outcome(Intervention(log_length=20), "log-length", "fixed", 0.95, 0.08, valid=0.12),
        _outcome(Intervention(cap=19), "cap", "fixed", 0.96, 0.30, valid=0.09),
    ]
    run = RunExtrapolation("scan/alibi/seed0", "alibi", "/runs/alibi", 0, 20, "valid", outcomes, {})
    assert run.best() is outcomes[1]
    assert run.to_json()["outcomes"][2]["valid"] == [0.09, 0.0]
    outcomes[1].valid = outcomes[2].valid = (0.07, 0.0)
    assert run.best() is None
    outcomes[2].valid = (0.07, 0.5)  # a lower validation loss at the same exact match: a tie-break, not a gain
    assert run.best() is None


def test_a_language_model_that_loses_its_context_is_dropped_not_best():
    """Perplexity within T (the bucket at 1 x T) rising more than 5% flags the outcome, as IID does for tasks."""

    def lm(intervention, family, within, past, valid):
        buckets = [{"at": 1.0, "mean": within, "low": within, "high": within, "n": 4}]
        buckets.append({"at": 2.0, "mean": past, "low": past, "high": past, "n": 4})
        return Outcome(intervention, family, "tuned", within, buckets[1], buckets, valid=(-valid, 0.0))

    outcomes = [
        lm(Intervention(), "none", 10.0, 40.0, 4.0),
        lm(Intervention(temperature=2), "temperature", 22.0, 14.0, 2.0),  # the most help past T, ruins T
        lm(Intervention(log_length=16), "log-length", 10.4, 30.0, 3.0),  # 4% higher within T: kept
    ]
    run = RunExtrapolation("hf:tiny", "rotary", "hf:tiny", 0, 16, "valid", outcomes, {}, context=16)
    assert [run.iid_dropped(o) for o in outcomes] == [False, True, False]
    assert run.best() is outcomes[2]
    report = ExtrapolationReport([run], "perplexity", Path("/runs"))
    assert "22.00 (+120.0%, dropped)" in report.to_markdown() and "perplexity within T" in report.to_markdown()
