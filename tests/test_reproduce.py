"""`probe reproduce`: the study's plan, the report beside the paper's numbers, its files, its page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from probe.atomic import atomic_write_json
from probe.cli import main
from probe.studies.reproduce import STUDIES, default_task, plan
from probe.studies.reproduce_report import build_report, find_reports, markdown, read_report, write_report
from probe.tasks import get

SECTION6 = Path(__file__).parent.parent / "bench" / "results" / "section6"

PAPER_SCAN_OOD = {"nope": 0.797, "t5": 0.798, "alibi": 0.438, "rotary": 0.283, "ape": 0.057}  # rounded, for reading


def test_plan_is_every_pe_at_every_seed_plus_nope_prime(tmp_path):
    runs = plan("reduced", tmp_path, seeds=2, tasks=["scan"])
    pairs = sorted((r.config.pe, r.config.seed) for r in runs)
    assert pairs == sorted([(pe, s) for pe in ("nope", "t5", "alibi", "rotary", "ape") for s in (0, 1)] + [("nope", 2)])
    assert all(
        r.config.task_options == {"split": "paper"} and r.path.parent.parent.name == "scan+split=paper" for r in runs
    )
    every = plan("reduced", tmp_path)
    assert {r.path.parent.parent.name for r in every} >= {
        "copy+split=paper+variant=count",
        "reverse+split=paper+variant=twice",
    }


def fake_evals(runs, ood: dict[str, float], nope_prime: float | None = None, iid: float = 1.0) -> None:
    """An eval.json per run, as `probe eval` writes it, with the given OOD accuracy per PE (NoPE' apart)
    and IID accuracy."""
    task = get("scan", split="paper")
    for run in runs:
        run.path.mkdir(parents=True, exist_ok=True)
        acc = nope_prime if nope_prime is not None and run.config.seed == 1 else ood[run.config.pe]
        atomic_write_json(
            run.path / "eval.json",
            {
                "label": run.label,
                "path": str(run.path),
                "task": "scan",
                "task_folder": run.path.parent.parent.name,
                "task_options": task.options,
                "pe": run.config.pe,
                "seed": run.config.seed,
                "n_examples": 10,
                "iid_accuracy": iid,
                "ood_accuracy": acc,
                "buckets": [
                    {"length": 25, "n": 5, "correct": 5, "accuracy": 1.0, "seen": True},
                    {"length": 30, "n": 5, "correct": 0, "accuracy": acc, "seen": False},
                ],
            },
        )


def test_a_study_selected_on_validation_reports_the_best_step_and_the_last_beside_it(tmp_path):
    runs = plan("reduced", tmp_path, tasks=["scan"])
    fake_evals(runs, {"nope": 0.3, "t5": 0.6, "alibi": 0.45, "rotary": 0.3, "ape": 0.0})
    nope = next(run for run in runs if run.config.pe == "nope" and run.config.seed == 0)
    written = json.loads((nope.path / "eval.json").read_text())
    written.update(selected_step=3400, last={"step": 4000, "iid_accuracy": 0.92, "ood_accuracy": 0.2})
    atomic_write_json(nope.path / "eval.json", written)
    report = build_report(runs, {}, scale="reduced")
    ours = report["tasks"]["scan+split=paper"]["ours"]
    assert ours["nope"]["selected_steps"] == [3400] and ours["nope"]["last_ood"] == pytest.approx(0.2)
    assert ours["t5"]["selected_steps"] == [] and ours["t5"]["last_ood"] is None
    lines = markdown(report).splitlines()
    assert any(
        line.startswith("| NoPE |") and line.endswith("| best step 3400; last step 92.0% / 20.0% |") for line in lines
    )
    table = [line for line in lines if line.startswith("|")]
    assert table[0].endswith("| selected on IID validation (last step IID / OOD) |")
    assert {line.count("|") for line in table} == {8}  # every row has the header's cells, T5's selection empty


def test_report_sets_the_paper_beside_ours_and_says_where_they_differ(tmp_path):
    runs = plan("reduced", tmp_path, tasks=["scan"])
    ours = {"nope": 0.1, "t5": 0.6, "alibi": 0.45, "rotary": 0.3, "ape": 0.0}
    fake_evals(runs, ours, nope_prime=0.3)
    report = build_report(runs, {}, scale="reduced")
    entry = report["tasks"]["scan+split=paper"]
    assert entry["paper_dataset"] == "scan-mdlen_tr25_ts48"
    for pe, value in PAPER_SCAN_OOD.items():
        assert entry["paper"][pe]["ood"] == pytest.approx(value, abs=0.001)
    assert entry["ours"]["nope"]["seeds"] == [0]  # NoPE' (seed 1) is the baseline, not a second NoPE seed
    assert entry["ours"]["nope"]["accuracy"] == [1.0, 0.1] and entry["baseline"]["ood"] == 0.3
    notes = " ".join(report["notes"])
    assert "nope reaches 10.0% OOD where the paper's reaches 79.7%" in notes
    assert "we rank alibi above nope (45.0% vs 10.0% OOD); the paper ranks nope above alibi (79.7% vs 43.8%)" in notes
    # the paper's near-tie is no inversion
    assert "rank t5 above nope" not in notes and "rank alibi above t5" not in notes
    assert report["mrr"]["ours"]["overall"] == pytest.approx(
        {"t5": 1, "alibi": 1 / 2, "rotary": 1 / 3, "nope": 1 / 4, "ape": 1 / 5}
    )
    text = markdown(report)
    assert "| NoPE | 0 | 100.0% | 10.0% | 100.0% | 79.7% |" in text
    assert "| NoPE' (the baseline seed) | 1 | 100.0% | 30.0% | | |" in text


def test_written_report_is_self_contained_and_found(tmp_path):
    runs = plan("reduced", tmp_path / "runs", tasks=["scan"])
    fake_evals(runs, {"nope": 0.8, "t5": 0.8, "alibi": 0.4, "rotary": 0.3, "ape": 0.05})
    written = write_report(build_report(runs, {}, scale="reduced"), tmp_path / "runs" / "report")
    html = (tmp_path / "runs" / "report" / "report.html").read_text()
    assert "<script src=" not in html.replace("\n", "") and "Plotly.newPlot" in html  # plotly.js inlined: works offline
    assert html.count('class="plotly-graph-div"') == 3  # accuracy by length, MRR ours, MRR paper
    assert find_reports(tmp_path / "runs") == [tmp_path / "runs" / "report"]
    assert read_report(written[0].parent)["scale"] == "reduced"
    assert "nothing flagged" in (tmp_path / "runs" / "report" / "summary.md").read_text()


def test_dry_run_says_what_it_would_train_and_writes_nothing(tmp_path, capsys):
    assert main(["reproduce", "--dry-run", "--steps", "20", "--checkpoints", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["runs"]) == 6 and out["estimated_training_seconds"] > 0
    assert not (tmp_path / "r").exists()


def test_the_default_study_is_small_at_4000_steps_of_64(tmp_path):
    config = plan("reduced", tmp_path, tasks=["scan"])[0].config
    assert (config.preset, config.steps, config.batch_size, config.dropout, config.lr) == ("small", 4000, 64, 0.1, 5e-4)


@pytest.mark.parametrize("jobs, threads, wall", [(1, 1, 600.0), (2, 1, 300.0), (4, 1, 200.0)])
def test_dry_run_prices_with_the_threads_each_side_by_side_run_gets(jobs, threads, wall, tmp_path, capsys, monkeypatch):
    """On 4 cores, every run trains on one thread whatever --jobs is (its weights must not depend on it):
    the estimate times its steps that way, and the wall time shares the 6 runs among the jobs."""
    import os

    import probe.studies.sweep

    asked: list[int] = []

    def estimate_cost(runs, *, device, threads, on_measure):
        asked.append(threads)
        return {"seconds": [100.0] * len(runs), "total_seconds": 100.0 * len(runs), "source": "given"}

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(probe.studies.sweep, "estimate_cost", estimate_cost)
    assert main(["reproduce", "--dry-run", "--jobs", str(jobs), "--checkpoints", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert asked == [threads] and out["threads_per_job"] == threads
    assert out["jobs"] == jobs and out["estimated_training_seconds"] == wall
    assert out["machine"]["cpus"] == 4 and out["machine"]["torch"] == torch.__version__  # what the price measured


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "nosuch"], "the reduced study has no task 'nosuch'"),
        (["--scale", "section6", "--task", "sortng"], "no task 'sortng'; did you mean 'sorting'?"),
        (["--seeds", "0"], "--seeds must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    assert main(["reproduce", *argv, "--checkpoints", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_reproduction_page_shows_a_report(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    runs = plan("reduced", tmp_path, tasks=["scan"])
    fake_evals(runs, {"nope": 0.8, "t5": 0.8, "alibi": 0.4, "rotary": 0.3, "ape": 0.05})
    write_report(build_report(runs, {}, scale="reduced"), tmp_path / "report")
    monkeypatch.setenv("PROBE_CHECKPOINTS", str(tmp_path))
    at = AppTest.from_file(str(Path(__file__).parents[1] / "probe" / "explorer" / "explorer.py"), default_timeout=120)
    at.run()
    at.switch_page("views/reproduction.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 3
    assert "79.7%" in "\n".join(str(m.value) for m in at.markdown)


def test_reproduction_page_without_a_report_says_how_to_make_one(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PROBE_CHECKPOINTS", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(Path(__file__).parents[1] / "probe" / "explorer" / "explorer.py"), default_timeout=120)
    at.run()
    at.switch_page("views/reproduction.py").run()
    assert not at.exception and "probe reproduce" in "\n".join(str(i.value) for i in at.info)


def test_disagreements_name_gaps_and_inversions_but_not_our_ties():
    from probe.studies.reproduce_report import disagreements

    paper = {"nope": {"ood": 0.80}, "rotary": {"ood": 0.28}, "ape": {"ood": 0.06}}
    ours = {"nope": {"ood": 0.0}, "rotary": {"ood": 0.0004}, "ape": {"ood": 0.30}}
    notes = disagreements(ours, paper, "scan")
    assert any("nope reaches 0.0% OOD where the paper's reaches 80.0%" in note for note in notes)
    assert any("we rank ape above rotary" in note for note in notes)  # 30% vs 0.04%: a real inversion
    assert not any("we rank rotary above nope" in note for note in notes)  # 0.04% vs 0.0% is a tie


def test_scenarios_the_paper_has_no_run_of_are_counted_in_one_note_when_none_has_one():
    """Section 6's scenarios (L = 8, scratchpads) rebuild none of the paper's released splits: its report, from
    the committed summaries, says so in one note, counting them; a scenario the paper has keeps its own notes."""
    from probe.studies.reproduce import merged_report
    from probe.studies.section6 import RULE, STUDY, planned

    report, merged = merged_report(SECTION6, list(planned()), [0, 1], study=STUDY, rule=RULE)
    landed = list(dict.fromkeys(e.task_folder for e in merged.evaluations))
    assert len(landed) == 27 and not any(entry["paper"] for entry in report["tasks"].values())
    assert report["notes"] == [
        "the paper's released results hold no run of any of the 27 scenarios here to compare with."
    ]
    assert markdown(report).count("hold no run") == 1


def test_scenarios_the_paper_has_no_run_of_are_named_beside_those_it_has():
    from probe.studies.reproduce_report import _unmatched

    tasks = {"scan+split=paper": {"paper": {"nope": {"ood": 0.797}}}, "addition+scratchpad=full": {"paper": None}}
    assert _unmatched(tasks) == [
        "the paper's released results hold no run to compare with of: addition+scratchpad=full."
    ]
    assert _unmatched({"addition+scratchpad=full": {"paper": None}}) == [
        "the paper's released results hold no run to compare with of: addition+scratchpad=full."
    ]
    assert _unmatched({"scan+split=paper": tasks["scan+split=paper"]}) == []


def test_overall_ranks_the_papers_groups_and_leaves_the_runs_with_a_scratchpad_to_their_own():
    """By hand: NoPE first on the one task without a scratchpad, last (ties at 0% break NoPE last) on the one
    with: pooled, NoPE's overall MRR would be (1 + 1/5) / 2 = 0.6; Section 4's ranking reads it at 1."""
    from probe.reference import SCRATCHPAD_GROUP
    from probe.studies.ranks import mean_reciprocal_ranks, paper_ordering, rank_intervals

    plain = {("scan", 0): {"nope": 0.9, "t5": 0.5, "alibi": 0.3, "rotary": 0.2, "ape": 0.1}}
    padded = {("addition+scratchpad=full", 0): {"nope": 0.0, "t5": 0.0, "alibi": 0.7, "rotary": 0.0, "ape": 0.0}}
    queries = {"classic length generalization": plain, SCRATCHPAD_GROUP: padded}
    intervals = rank_intervals(queries)
    assert intervals["overall"]["scenarios"] == 1 and intervals["overall"]["pes"]["nope"]["mrr"] == 1.0
    assert mean_reciprocal_ranks(queries)["overall"]["nope"] == 1.0
    assert intervals[SCRATCHPAD_GROUP]["pes"]["alibi"]["mrr"] == 1.0  # ranked, in a group of its own
    # overall pools one category here: the same ranking under a second name, read once
    assert [line.split(" (")[0] for line in paper_ordering(intervals)] == ["classic length generalization"]
    two = {**queries, "mathematical & reasoning": {("parity", 0): {**plain[("scan", 0)], "nope": 0.0}}}
    assert [line.split(" (")[0] for line in paper_ordering(rank_intervals(two))] == [
        "classic length generalization",
        "mathematical & reasoning",
        "overall",
    ]


def test_a_reports_rank_lines_read_an_overall_that_repeats_a_category_once():
    from probe.studies.ranks import rank_intervals
    from probe.studies.reproduce_report import rank_lines

    scores = {"nope": 0.9, "t5": 0.5, "alibi": 0.3, "rotary": 0.2, "ape": 0.1}
    one = rank_intervals({"classic length generalization": {("scan", 0): scores, ("copy", 0): scores}})
    assert one["overall"] == one["classic length generalization"]  # the JSON keeps the key its readers read
    assert [line.split(" (")[0] for line in rank_lines(one, "ours")] == ["- ours, classic length generalization"]
    two = rank_intervals(
        {
            "classic length generalization": {("scan", 0): scores},
            "mathematical & reasoning": {("parity", 0): {**scores, "nope": 0.0}},
        }
    )
    assert [line.split(" (")[0] for line in rank_lines(two, "ours")] == [
        "- ours, classic length generalization",
        "- ours, mathematical & reasoning",
        "- ours, overall",
    ]


def test_a_section6_reports_overall_ranking_is_its_tasks_without_a_scratchpad():
    """The committed Section 6 summaries: the report's overall MRR rests on the scenarios without a scratchpad
    alone, the paper's ordering is not read of the scratchpad formats, the Markdown says so, and an overall that is
    the one category without a scratchpad again is read once, in the text and the figure."""
    from scipy.stats import rankdata

    from probe.reference import SCRATCHPAD_GROUP
    from probe.studies.reproduce import merged_report
    from probe.studies.reproduce_report import figures
    from probe.studies.section6 import RULE, STUDY, planned

    report, merged = merged_report(SECTION6, list(planned()), [0], study=STUDY, rule=RULE)
    ours = report["mrr_intervals"]["ours"]
    plain = [folder for folder, entry in report["tasks"].items() if entry["category"] != SCRATCHPAD_GROUP]
    assert ours["overall"]["scenarios"] == len(plain) == 7 and ours[SCRATCHPAD_GROUP]["scenarios"] == 20
    assert not any(line.startswith(SCRATCHPAD_GROUP) for line in report["paper_ordering"])
    text = markdown(report)  # overall is the one category without a scratchpad again: read once
    assert f"The runs {SCRATCHPAD_GROUP} are ranked on their own" in text and "Overall leaves out" not in text
    assert "- ours, overall" not in text and text.count("- ours, mathematical & reasoning (7 scenarios") == 1
    bars = figures(report)["mrr_ours"].data[0].x  # one group of bars per category
    assert list(bars) == [SCRATCHPAD_GROUP, "mathematical & reasoning"]
    # the mean rank (ties share), by scipy over the same seven tasks' OOD at seed 0
    pes = sorted(report["mean_rank"]["ours"])
    ood = {(e.task_folder, e.pe): e.ood_accuracy for e in merged.evaluations if e.task_folder in plain}
    ranks = [rankdata([-ood[(folder, pe)] for pe in pes]) for folder in plain]  # 1 = best
    want = {pe: sum(r[i] for r in ranks) / len(ranks) for i, pe in enumerate(pes)}
    assert report["mean_rank"]["ours"] == pytest.approx(want)


def test_a_scenario_the_paper_has_no_run_of_has_no_empty_columns():
    """Section 6's scenarios (no released run): their tables hold ours alone, every row as wide as its header; a
    scenario the paper has keeps its columns (test_report_sets_the_paper_beside_ours_and_says_where_they_differ)."""
    from probe.studies.reproduce import merged_report
    from probe.studies.section6 import RULE, STUDY, planned

    report, _ = merged_report(SECTION6, list(planned()), [0], study=STUDY, rule=RULE)
    text = markdown(report)
    assert "(paper)" not in text
    scenario = text.split("## addition+scratchpad=full ", 1)[1].split("\n## ", 1)[0]
    table = [line for line in scenario.splitlines() if line.startswith("|")]
    assert table[0].startswith("| PE | seeds | IID (ours) | OOD (ours) |") and len(table) == 2 + 5
    assert {line.count("|") for line in table} == {table[0].count("|")}
    # its grid scores no run at its last step (eval_last = false): the selection's column names the step alone
    assert table[0].endswith("| selected on IID validation |") and "last step" not in text


def test_a_study_trains_scan_by_default_where_it_has_scan_else_its_first_task():
    """`probe reproduce --scale section6` with no --task trains a task of its own (it has no SCAN)."""
    assert [default_task(scale) for scale in ("reduced", "section3", "section6")] == ["scan", "scan", "addition"]
    chosen = plan("section6", "checkpoints", tasks=[default_task("section6")])
    assert {run.config.task for run in chosen} == {"addition"}


@pytest.mark.parametrize("scale", sorted(STUDIES))
def test_a_scratchpads_baseline_is_in_its_words(scale):
    """A format's gain is read against the no-scratchpad runs of its task key at its L: they must be written
    and scored in the same template, or the gain mixes the wording and the scoring rule with the scratchpad."""
    from probe.studies.formats import task_key_of

    templates: dict[tuple[str, int, bool], set[str]] = {}
    for run in plan(scale, "checkpoints"):
        options = run.config.task_options
        task = get(run.config.task, **options)
        if "template" not in task.options:
            continue  # a task with no scratchpad formats
        key = (task_key_of(run.config.task, options), task.options["train_length"], bool(task.scratchpad))
        templates.setdefault(key, set()).add(task.template)
    pairs = [(k, t) for k, t in templates.items() if k[2] and (k[0], k[1], False) in templates]
    assert pairs or scale in ("reduced", "section3")
    for (key, length, _), scratchpad_templates in pairs:
        assert templates[(key, length, False)] == scratchpad_templates, (scale, key, length)


def test_section3_ranks_ours_again_on_the_scenarios_the_papers_overall_rests_on():
    """The committed Section 3 summaries: the like-for-like row ranks ours on the ten scenarios the paper's released
    runs hold, the same ten its overall rests on; NoPE's MRR there, ties broken in the notebook's order, by scipy's
    ordinal ranks over every (scenario, seed) of them."""
    from scipy.stats import rankdata

    from probe.analysis.evaluation import TIE_ORDER
    from probe.studies.reproduce import ladder, merged_report, plan, scenarios

    section3 = SECTION6.parent / "section3"
    report, merged = merged_report(
        section3,
        list(scenarios(plan("section3", "/nonexistent", seeds=1))),
        [0, 1, 2],
        study="section3",
        rule=ladder("section3"),
    )
    like = report["mrr_on_papers_scenarios"]
    assert like["first"]["scenarios"] == report["mrr_intervals"]["paper"]["overall"]["scenarios"] == 10
    assert report["mrr_intervals"]["ours"]["overall"]["scenarios"] == 17
    matched = {folder for folder, entry in report["tasks"].items() if entry["paper"]}
    pes = [pe for pe in TIE_ORDER if pe in like["first"]["pes"]]
    reciprocal = []
    for e in merged.evaluations:
        if e.task_folder in matched and e.pe == "nope":
            row = {
                r.pe: r.ood_accuracy for r in merged.evaluations if (r.task_folder, r.seed) == (e.task_folder, e.seed)
            }
            ranks = rankdata([-row[pe] for pe in pes], method="ordinal")  # ties: the earlier in TIE_ORDER first
            reciprocal.append(1 / ranks[pes.index("nope")])
    assert len(reciprocal) == 30
    assert like["first"]["pes"]["nope"]["mrr"] == pytest.approx(sum(reciprocal) / 30)
    assert like["shared"]["scenarios"] == 10


def test_dry_run_names_the_run_folders_a_sitting_would_fail(tmp_path, capsys, monkeypatch):
    """A run of the study's folder trained otherwise, or damaged, is neither done nor to train: the dry run names
    each with the line training would fail it with, where its count alone once read as a run left."""
    import probe.studies.sweep

    monkeypatch.setattr(
        probe.studies.sweep,
        "estimate_cost",
        lambda runs, **_: {"seconds": [1.0] * len(runs), "total_seconds": float(len(runs)), "source": "given"},
    )
    nope, t5 = (r.path for r in plan("reduced", tmp_path, tasks=["scan"], steps=20)[:2])
    train = ["train", "--task", "scan", "--split", "paper", "--pe", "nope", "--steps", "1", "--batch-size", "2"]
    tiny = ["-m", "d_model=16", "-m", "n_layers=1", "-m", "n_heads=2", "-m", "d_mlp=32"]
    assert main([*train, *tiny, "--no-eval", "--checkpoints", str(tmp_path), "--json"]) == 0
    assert (nope / "config.json").is_file()
    t5.mkdir(parents=True)
    (t5 / "config.json").write_text("{not json")
    capsys.readouterr()
    assert main(["reproduce", "--dry-run", "--steps", "20", "--checkpoints", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    blocked = {Path(b["path"]): b["why"] for b in json.loads(captured.out)["blocked"]}
    assert set(blocked) == {nope, t5}
    assert "other settings (" in blocked[nope] and "steps 1, asked 20;" in blocked[nope]
    assert "config.json" in blocked[t5]
    assert "2 run folder(s) hold other runs" in captured.err
