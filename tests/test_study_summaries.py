"""The Section 3 study in parts: its plan, a summary per scenario and seed written as it lands, the merge
that names what is missing, and the ranking with its intervals over seeds."""

from __future__ import annotations

import json
import re

import pytest
import torch
from test_reproduce import fake_evals

from probe.errors import ProbeError
from probe.reference import CATEGORIES
from probe.runs.provenance import code_version
from probe.studies import section6, section6_view
from probe.studies.reproduce import plan, scenarios
from probe.studies.reproduce_report import figures, markdown, report_of
from probe.studies.summaries import merge, read_summary, summary_name, write_summaries

PAPER_PES = ["nope", "t5", "alibi", "rotary", "ape"]


def test_section3_is_the_papers_17_scenarios_times_its_five_pes_without_nope_prime(tmp_path):
    runs = plan("section3", tmp_path, seeds=1)
    folders = scenarios(runs)
    assert len(folders) == 17
    assert all(sorted(r.config.pe for r in group) == sorted(PAPER_PES) for group in folders.values())
    assert {r.config.seed for r in runs} == {0}
    tasks = [group[0].config.task for group in folders.values()]
    assert sorted(set(tasks)) == sorted(t for group in CATEGORIES.values() for t in group)
    assert tasks.count("copy") == 5 and tasks.count("reverse") == 3 and tasks.count("sorting") == 2
    first = runs[0].config
    assert (first.preset, first.steps, first.batch_size, first.lr, first.protocol) == (
        "tiny",
        1500,
        32,
        1e-3,
        "authors",
    )
    assert {(r.config.preset, r.config.steps, r.config.protocol) for r in runs} == {("tiny", 1500, "authors")}


def _trained(tmp_path, seeds, ood):
    runs = plan("section3", tmp_path / "runs", seeds=seeds, tasks=["scan"])
    fake_evals(runs, ood)
    for run in runs:
        metrics = {"train_seconds": 12.5, "probe_versions": ["0.1.0+gaaaa", "0.1.0+gbbbb"]}  # resumed under other code
        (run.path / "config.json").write_text(json.dumps({"metrics": metrics}))
    return runs


def test_a_summary_is_written_per_seed_once_every_run_of_it_is_evaluated(tmp_path):
    runs = _trained(tmp_path, 2, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    (runs[-1].path / "eval.json").unlink()  # one run of seed 1 not evaluated yet
    written = write_summaries("section3", "scan+split=paper", runs, tmp_path / "summaries")
    assert [p.name for p in written] == [summary_name("scan+split=paper", 0)]
    summary, _ = read_summary(written[0])
    assert [row["pe"] for row in summary["runs"]] == PAPER_PES
    assert summary["recipe"]["steps"] == 1500 and summary["runs"][0]["train_seconds"] == 12.5
    assert summary["runs"][0]["probe_versions"] == ["0.1.0+gaaaa", "0.1.0+gbbbb"]
    assert summary["machine"]["probe"] == code_version()  # the code that wrote it
    assert (
        " ".join(summary["machine"]["cpu"].split()) == _lscpu_model()
        and summary["machine"]["torch"] == torch.__version__
    )
    assert summary["runs"][0]["evaluation"]["buckets"][1] == {
        "length": 30,
        "n": 5,
        "correct": 0,
        "accuracy": 0.5,
        "seen": False,
    }


def test_the_merge_names_every_part_it_expected_and_did_not_find(tmp_path):
    runs = _trained(tmp_path, 1, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    paths = write_summaries("section3", "scan+split=paper", runs, tmp_path / "summaries")
    merged = merge(paths, scenarios=["scan+split=paper", "pcfg"], seeds=[0, 1, 2], study="section3")
    assert merged.missing == [("scan+split=paper", 1), ("scan+split=paper", 2), ("pcfg", 0), ("pcfg", 1), ("pcfg", 2)]
    assert sorted(e.pe for e in merged.evaluations) == sorted(PAPER_PES)
    assert merged.seeds("scan+split=paper") == [0]


def test_a_merge_of_some_seeds_keeps_no_other_seeds_runs(tmp_path):
    """Seed 0 ranked while one scenario has landed seeds 1 and 2 too: that scenario counts once, at seed 0,
    not three times (the Section 3 report of seed 0 once counted copy count's three seeds)."""
    runs = _trained(tmp_path, 3, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    paths = write_summaries("section3", "scan+split=paper", runs, tmp_path / "summaries")
    assert len(paths) == 3
    seed0 = merge(paths, scenarios=["scan+split=paper"], seeds=[0], study="section3")
    assert {e.seed for e in seed0.evaluations} == {0} and len(seed0.evaluations) == 5
    assert set(seed0.train_seconds) == {("scan+split=paper", pe, 0) for pe in PAPER_PES}
    later = merge(paths, scenarios=["scan+split=paper"], seeds=[1, 2], study="section3")
    assert {e.seed for e in later.evaluations} == {1, 2} and later.missing == []
    assert len(merge(paths).evaluations) == 15  # no seeds named: every part


def test_two_summaries_of_one_part_are_an_error_and_a_broken_one_is_named(tmp_path):
    runs = _trained(tmp_path, 1, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    (path,) = write_summaries("section3", "scan+split=paper", runs, tmp_path / "a")
    copy = tmp_path / "b" / path.name
    copy.parent.mkdir()
    copy.write_text(path.read_text())
    with pytest.raises(ProbeError, match="both hold scan\\+split=paper at seed 0"):
        merge([path, copy])
    copy.write_text("{not json")
    with pytest.raises(ProbeError, match=re.escape(f"{copy}: not a readable study summary")):
        merge([path, copy])


def test_a_summary_holding_another_parts_runs_is_named_not_merged(tmp_path):
    """A seed-0 summary copied as seed 1 by hand (its runs still seed 0's) would add seed 0's runs a second time
    under seed 1: the merge names the file instead; so for a run of another scenario."""
    runs = _trained(tmp_path, 1, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    (path,) = write_summaries("section3", "scan+split=paper", runs, tmp_path / "a")
    data = json.loads(path.read_text())
    copied = tmp_path / "b" / path.name.replace("seed0", "seed1")
    copied.parent.mkdir()
    copied.write_text(json.dumps({**data, "seed": 1}))
    with pytest.raises(
        ProbeError, match="says scan\\+split=paper at seed 1, but holds a run of scan\\+split=paper at seed 0"
    ):
        merge([path, copied])
    data["runs"][2]["evaluation"]["task_folder"] = "copy+split=paper"
    copied.write_text(json.dumps(data))
    with pytest.raises(ProbeError, match="holds a run of copy\\+split=paper at seed 0"):
        read_summary(copied)
    assert len(merge([path]).evaluations) == 5


def test_the_report_of_merged_seeds_ranks_with_an_interval_and_says_which_orderings_hold(tmp_path):
    runs = _trained(tmp_path, 2, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1})
    seed1 = [r for r in runs if r.config.seed == 1]
    fake_evals(seed1, {"nope": 0.1, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.5})  # NoPE last at seed 1
    paths = write_summaries("section3", "scan+split=paper", runs, tmp_path / "summaries")
    merged = merge(paths)
    report = report_of(merged.evaluations, {}, scale="section3")
    classic = report["mrr_intervals"]["ours"]["classic length generalization"]
    assert classic["seeds"] == [0, 1] and classic["scenarios"] == 1
    nope = classic["pes"]["nope"]
    assert nope["mrr"] == pytest.approx((1 + 1 / 5) / 2)
    assert (nope["low"], nope["high"]) == pytest.approx((1 / 5, 1.0))
    line = next(x for x in report["paper_ordering"] if x.startswith("classic"))
    # MRR: NoPE (1 + 1/5)/2 = APE (1/5 + 1)/2 = 0.6 > T5 1/2 > ALiBi 1/3 > Rotary 1/4, and the seeds agree on
    # T5 above ALiBi and Rotary alone
    assert "holds for 4 of 6 pairs (not: APE ≥ NoPE, APE ≥ T5's Relative Bias)" in line
    assert "2 of 6 pairs apart beyond the seeds' intervals" in line
    table = markdown(report)
    assert "| NoPE | 0,1 | " in table and "| 30.0% [10.0%, 50.0%] |" in table  # the mean and each seed's extreme
    # the figure draws the ranking the lines print: NoPE's bar at its mean, its error bar the seeds' interval
    figure = figures(report)["mrr_ours"]
    nope_bar = next(trace for trace in figure.data if trace.name == "NoPE")
    assert list(nope_bar.y) == pytest.approx([(1 + 1 / 5) / 2])
    assert nope_bar.error_y.array[0] == pytest.approx(1.0 - 0.6) and nope_bar.error_y.arrayminus[0] == pytest.approx(
        0.4
    )
    assert "1 scenario, seed(s) 0, 1" in figure.layout.title.text


def _lscpu_model() -> str:
    """The CPU's model name as util-linux's ``lscpu`` reads it (an oracle apart from /proc/cpuinfo's parse)."""
    import shutil
    import subprocess

    if shutil.which("lscpu") is None:
        pytest.skip("no lscpu here")
    out = subprocess.run(["lscpu"], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    model = next(line.split(":", 1)[1] for line in out.splitlines() if line.startswith("Model name"))
    return " ".join(model.split())


def test_a_studys_cost_sums_every_landed_parts_training_and_timed_evaluations_every_rung_included(tmp_path):
    """Seed 0 of scan at two rungs and seed 1 at the second: five runs each, 12.5 s of training a run; the
    evaluations of seed 0's first rung timed at 30 s a run, the others written before evaluations were timed."""

    from probe.studies.summaries import part_costs

    folder = tmp_path / "summaries"
    for seeds, steps, timed in ((1, 1500, 30.0), (2, 4000, None)):
        runs = _trained(
            tmp_path / f"steps{steps}", seeds, {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1}
        )
        for run in runs:
            run.config.steps = steps
            if timed is not None:
                data = json.loads((run.path / "eval.json").read_text())
                (run.path / "eval.json").write_text(json.dumps(data | {"seconds": timed}))
        write_summaries("section3", "scan+split=paper", runs, folder, "" if steps == 1500 else "+steps4000")
    (folder / "other.json").write_text(json.dumps(json.loads(next(folder.glob("*.json")).read_text()) | {"study": "x"}))
    parts = part_costs(folder.glob("*.json"), "section3")
    assert sorted((p.seed, p.steps, p.runs, p.train_seconds, p.evaluation_seconds, p.timed) for p in parts) == [
        (0, 1500, 5, 62.5, 150.0, 5),
        (0, 4000, 5, 62.5, 0.0, 0),
        (1, 4000, 5, 62.5, 0.0, 0),
    ]
    table = section6.cost_table(parts)
    assert table["scan+split=paper"]["parts"] == [[0, 1500], [0, 4000], [1, 4000]]
    lines = section6_view._cost_lines(table)
    assert "| scan+split=paper | 0: 1,500, 0: 4,000, 1: 4,000 | 3.1 | 2.5 (5 of 15) |" in lines
    assert lines[-1] == "| all | | 3.1 (0.1 h) | 2.5 (5 of 15) |"


def test_the_section6_report_reads_each_task_s_floor_off_its_baseline():
    """The constant guess per task, as the formats' measures key it (sorting's variants apart), from the
    baseline's scenario: a task whose baseline is not measured has none."""
    guess = {
        "parity+template=authors+train_length=8": 0.48,
        "parity+scratchpad=full": 0.48,
        "sorting+template=authors+train_length=8+variant=multi-digit": 0.0,
        "lego+scratchpad=C": 0.49,
    }
    assert section6.floors(guess) == {"parity": 0.48, "sorting+variant=multi-digit": 0.0}
