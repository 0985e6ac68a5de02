"""The Section 3 study's recipe rule (grids/section3.toml's [ladder]): seed 0 climbs while the median PE's
IID stays under the bar, the other seeds train at the rung it stops at, and the merge of the summaries keeps
each scenario's chosen rung. Hand-worked cases; the trainer is a stand-in that writes evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_reproduce import fake_evals

from probe.errors import ProbeError
from probe.studies.ladder import Ladder
from probe.studies.reproduce import (
    chosen_runs,
    ladder,
    plan,
    rung_plan,
    scenarios,
    summaries_report,
    train_and_evaluate,
)
from probe.studies.summaries import Landed, merge, read_summary, summary_name, write_summaries
from probe.tasks import get

RULE = Ladder((1500, 4000), 0.95)
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
OOD = {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1}


def test_section3_declares_the_rule_stated_before_its_first_run():
    assert ladder("section3") == RULE
    assert ladder("reduced") is None


def test_section6_applies_section3s_rule_to_the_subset_chosen_before_its_first_run(tmp_path):
    """The same rule, and the issue's floor: the full format and computation only (C) on every math and
    reasoning task, every format on addition; each task's baseline without a scratchpad at the same L, every
    example in the authors' wording."""
    assert ladder("section6") == RULE
    runs = plan("section6", tmp_path, seeds=1)
    formats: dict[str, set[str]] = {}
    for run in runs:
        options = run.config.task_options
        key = "+".join([run.config.task, *([options["variant"]] if "variant" in options else [])])
        formats.setdefault(key, set()).add(options.get("scratchpad") or "none")
        assert run.config.steps == 1500 and run.config.preset == "tiny" and run.config.pack_width == 1
        assert (
            get(run.config.task, **options).template == "authors" and get(run.config.task, **options).train_length == 8
        )
    addition = {"none", "full", "C", "C+O", "C+O+V+R", "I+O+V+R", "I+C+V+R", "I+C+O+R", "I+C+O+V"}
    assert formats.pop("addition") == addition  # C+O: the minimal format of the authors' ranked runs
    assert formats == {
        **{task: {"none", "full", "C"} for task in ("parity", "summation", "polynomial")},
        **{task: {"none", "I+C+O+R", "C"} for task in ("lego", "sorting+single-token", "sorting+multi-digit")},
    }
    assert len(runs) == 27 * 5


@pytest.mark.parametrize(
    ("iid", "steps", "higher"),
    [
        ([0.2, 0.9, 0.94, 1.0, 1.0], 1500, 4000),  # median 0.94: under the bar
        ([0.2, 0.3, 0.95, 1.0, 1.0], 1500, None),  # median 0.95: at the bar
        ([0.1, 0.1, 0.1, 0.1, 0.1], 4000, None),  # the last rung: no higher
    ],
)
def test_a_scenario_climbs_while_its_median_pe_is_under_the_bar(iid, steps, higher):
    assert RULE.climbs(iid, steps) == higher


def test_the_chosen_rung_is_the_first_at_the_bar_else_the_last_and_undecided_until_trained():
    assert RULE.chosen({1500: 0.97}) == 1500
    assert RULE.chosen({1500: 0.97, 4000: 0.99}) == 1500  # a later rung trained anyway changes nothing
    assert RULE.chosen({1500: 0.5}) is None  # rung 2 due
    assert RULE.chosen({1500: 0.5, 4000: 0.9}) == 4000  # under the bar at the last rung: reported there
    assert RULE.chosen({}) is None


def test_the_rung_due_is_the_chosen_one_else_the_first_not_read():
    assert RULE.due({}) == 1500
    assert RULE.due({1500: 0.97}) == 1500
    assert RULE.due({1500: 0.5}) == 4000  # seed 0 climbs: every seed's next training is at 4000
    assert RULE.due({1500: 0.5, 4000: 0.9}) == 4000


@pytest.mark.parametrize(
    "table", [{"steps": []}, {"steps": [4000, 1500], "median_iid": 0.9}, {"steps": [10], "median_iid": 1.5}]
)
def test_a_malformed_ladder_is_one_line(table):
    with pytest.raises(ProbeError, match=r"\[ladder\]"):
        Ladder.from_grid(table)


def test_later_rungs_live_beside_the_study_and_their_summaries_are_tagged(tmp_path):
    assert RULE.root(tmp_path / "study", 1500) == tmp_path / "study"
    assert RULE.root(tmp_path / "study", 4000) == tmp_path / "study-steps4000"
    assert (RULE.tag(1500), RULE.tag(4000)) == ("", "+steps4000")


def _stand_in(iid_of, events=None):
    """A trainer that 'trains' a queue by writing each run's evaluation in turn, its IID set by (task, steps),
    and says so as each run ends (``events``, if given, records each run trained)."""
    trained = []

    def train(runs, finished):
        trained.append([(r.config.task, r.config.seed, r.config.steps) for r in runs])
        for run in runs:
            fake_evals([run], OOD, iid=iid_of[(run.config.task, run.config.steps)])
            if events is not None:
                events.append(("trained", run.config.task))
            finished(run)
        return []

    return train, trained


def test_seed_0_climbs_first_and_the_other_seeds_train_only_at_the_rung_chosen(tmp_path):
    root = tmp_path / "section3"
    runs = plan("section3", root, seeds=3, tasks=["scan", "parity"])
    rung = rung_plan("section3", root, RULE, seeds=3, tasks=["scan", "parity"])
    train, trained = _stand_in({("scan", 1500): 0.9, ("scan", 4000): 0.97, ("parity", 1500): 1.0})
    landed = []
    train_and_evaluate(
        runs,
        "cpu",
        train,
        rule=RULE,
        rung=rung,
        on_scenario=lambda s, group, tag: landed.append((s, tag, sorted({r.config.seed for r in group}))),
    )
    phases = [list(dict.fromkeys(batch)) for batch in trained]
    assert phases == [
        [("scan", 0, 1500), ("parity", 0, 1500)],
        [("scan", 0, 4000)],  # scan's median 0.9 < 0.95 at rung 1; parity's 1.0 stays
        # seed by seed, each seed's scenarios in the study's order: a second seed of each before a third of any
        [("scan", 1, 4000), ("parity", 1, 1500), ("scan", 2, 4000), ("parity", 2, 1500)],
    ]
    assert all(batch.count(part) == 5 for batch in trained for part in batch)  # every PE of each part
    scan, parity, climbed = "scan+split=paper", "parity+train_length=8", "+steps4000"
    assert landed == [(scan, "", [0]), (parity, "", [0]), (scan, climbed, [0])] + [
        (scenario, tag, [seed]) for seed in (1, 2) for scenario, tag in ((scan, climbed), (parity, ""))
    ]
    assert (tmp_path / "section3-steps4000" / scan / "nope" / "seed2" / "eval.json").is_file()
    assert not (tmp_path / "section3-steps4000" / parity).exists()
    final = chosen_runs(runs, RULE, rung)
    assert {(r.config.task, r.config.steps) for r in final} == {("scan", 4000), ("parity", 1500)}
    assert len(final) == len(runs) == 2 * 3 * 5


def test_a_scenario_lands_as_its_last_run_ends_while_the_next_scenarios_runs_train(tmp_path):
    """One queue for the phase, but each scenario evaluated and summarised as soon as its own runs have ended
    (the sitting told as each evaluation starts: a scratchpad's takes minutes)."""
    events: list[tuple[str, str]] = []
    train, trained = _stand_in({("scan", 1500): 1.0, ("parity", 1500): 1.0}, events)
    runs = plan("section3", tmp_path, seeds=1, tasks=["scan", "parity"])
    train_and_evaluate(
        runs,
        "cpu",
        train,
        on_scenario=lambda s, group, tag: events.append(("landed", s)),
        evaluating=lambda s: events.append(("evaluating", s)),
    )
    assert len(trained) == 1  # one queue
    assert events == [
        *[("trained", "scan")] * 5,
        ("evaluating", "scan+split=paper"),
        ("landed", "scan+split=paper"),
        *[("trained", "parity")] * 5,
        ("evaluating", "parity+train_length=8"),
        ("landed", "parity+train_length=8"),
    ]


def test_a_trainer_that_reports_no_run_lands_every_scenario_when_it_returns(tmp_path):
    """A cluster's phase says nothing run by run: its scenarios land, evaluated, after it, in the study's order."""
    events: list[tuple[str, str]] = []
    stand_in, _ = _stand_in({("scan", 1500): 1.0, ("parity", 1500): 1.0}, events)
    runs = plan("section3", tmp_path, seeds=1, tasks=["scan", "parity"])

    def silent(queue, finished):
        return stand_in(queue, lambda run: None)

    train_and_evaluate(runs, "cpu", silent, on_scenario=lambda s, group, tag: events.append(("landed", s)))
    assert events[10:] == [("landed", "scan+split=paper"), ("landed", "parity+train_length=8")]
    assert all(event[0] == "trained" for event in events[:10])


def test_the_merge_keeps_each_scenarios_chosen_rung_and_names_what_is_missing_there(tmp_path):
    root, summaries = tmp_path / "section3", tmp_path / "summaries"
    runs = plan("section3", root, seeds=2, tasks=["scan"])
    rung = rung_plan("section3", root, RULE, seeds=2, tasks=["scan"])
    train, _ = _stand_in({("scan", 1500): 0.9, ("scan", 4000): 0.96})
    paths = []

    def on_scenario(scenario, group, tag):
        for run in group:
            metrics = {"train_seconds": 1.0, "forward_precision": "float32"}
            (run.path / "config.json").write_text(json.dumps({"metrics": metrics}))
        paths.extend(write_summaries("section3", scenario, group, summaries, tag))

    train_and_evaluate(runs, "cpu", train, rule=RULE, rung=rung, on_scenario=on_scenario)
    names = sorted(p.name for p in set(paths))
    assert names == [
        "scan+split=paper+seed0.json",
        "scan+split=paper+steps4000+seed0.json",
        "scan+split=paper+steps4000+seed1.json",
    ]
    merged = merge(paths, scenarios=["scan+split=paper"], seeds=[0, 1, 2], study="section3", rule=RULE)
    assert merged.rungs["scan+split=paper"] == {
        "median_iid_seed0": {1500: 0.9, 4000: 0.96},
        "chosen": 4000,
        "kept": 4000,
    }
    assert {e.iid_accuracy for e in merged.evaluations} == {0.96} and len(merged.evaluations) == 10
    assert merged.missing == [("scan+split=paper", 2)]
    assert [r["steps"] for r in merged.recipes["scan+split=paper"]] == [4000]
    with pytest.raises(ProbeError, match="both hold scan\\+split=paper at seed 0"):
        merge(paths)  # without the rule, two rungs of one part are two answers to one question
    rung1 = merge([summaries / "scan+split=paper+seed0.json"], rule=RULE)
    assert rung1.rungs["scan+split=paper"]["chosen"] is None and rung1.rungs["scan+split=paper"]["kept"] == 1500


def test_the_dry_run_states_the_rule_and_prices_its_worst_case(tmp_path, capsys, monkeypatch):
    """5 runs of 100 s on 1 job: 500 s a seed at rung 1; if every scenario climbs, seed 0's first rung
    and then 3 seeds at 4000/1500 the cost: 500 + 3 x 1333 s = 4500 s = 1:15:00."""
    import probe.studies.sweep
    from probe.cli import main

    def estimate_cost(runs, *, device, threads, on_measure):
        return {"seconds": [100.0] * len(runs), "total_seconds": 100.0 * len(runs), "source": "given"}

    monkeypatch.setattr(probe.studies.sweep, "estimate_cost", estimate_cost)
    argv = ["reproduce", "--scale", "section3", "--task", "scan", "--seeds", "3", "--jobs", "1", "--dry-run"]
    assert main([*argv, "--checkpoints", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "recipe rule: seed 0 of a scenario trains again at 4000 steps" in out
    assert "under 95% IID" in out and "at most about 1.2 h if all climb" in out


def _priced_at_100s_a_run(monkeypatch) -> list:
    """The runs a dry run prices, each at 100 s (the machine's speed left out)."""
    import probe.studies.sweep

    priced = []

    def estimate_cost(runs, *, device, threads, on_measure):
        priced.extend(runs)
        return {"seconds": [100.0] * len(runs), "total_seconds": 100.0 * len(runs), "source": "given"}

    monkeypatch.setattr(probe.studies.sweep, "estimate_cost", estimate_cost)
    return priced


def _summarising(folder):
    def on_scenario(scenario, group, tag):
        for run in group:
            metrics = {"train_seconds": 1.0, "forward_precision": "float32"}
            (run.path / "config.json").write_text(json.dumps({"metrics": metrics}))
        write_summaries("section3", scenario, group, folder, tag)

    return on_scenario


def test_a_later_sitting_without_checkpoints_trains_only_the_parts_with_no_summary(tmp_path):
    """Seed 0 in one sitting; its checkpoints gone (a new clone); seeds 1 and 2 in the next, at the rung the
    rule read from seed 0's committed summaries, seed 0 not trained again; the report holds both sittings."""
    summaries, tasks = tmp_path / "summaries", ["scan", "parity"]
    iid = {("scan", 1500): 0.9, ("scan", 4000): 0.97, ("parity", 1500): 1.0}
    first = tmp_path / "sitting1"
    train, _ = _stand_in(iid)
    runs = plan("section3", first, seeds=1, tasks=tasks)
    rung = rung_plan("section3", first, RULE, seeds=1, tasks=tasks)
    train_and_evaluate(runs, "cpu", train, rule=RULE, rung=rung, on_scenario=_summarising(summaries))

    second = tmp_path / "sitting2"  # nothing of sitting 1's run folders
    train, trained = _stand_in(iid)
    runs = plan("section3", second, seeds=3, tasks=tasks)
    rung = rung_plan("section3", second, RULE, seeds=3, tasks=tasks)
    landed = Landed(summaries, "section3")
    study = {"rule": RULE, "rung": rung, "on_scenario": _summarising(summaries), "landed": landed}
    train_and_evaluate(runs, "cpu", train, **study)
    assert [sorted(set(batch)) for batch in trained] == [
        [("parity", 1, 1500), ("parity", 2, 1500), ("scan", 1, 4000), ("scan", 2, 4000)],
    ]
    report = summaries_report(runs, summaries, scale="section3", seeds=3, rule=RULE)
    assert report["missing"] == []
    assert sorted(report["tasks"]) == ["parity+train_length=8", "scan+split=paper"]

    train, trained = _stand_in(iid)
    train_and_evaluate(runs, "cpu", train, **study)  # a third sitting: everything landed, nothing trains
    assert trained == []


def test_a_landed_summary_of_another_recipe_is_one_line_not_a_silent_reuse(tmp_path):
    summaries = tmp_path / "summaries"
    train, _ = _stand_in({("scan", 1500): 1.0})
    runs = plan("section3", tmp_path / "a", seeds=1, tasks=["scan"])
    train_and_evaluate(runs, "cpu", train, on_scenario=_summarising(summaries))
    other = plan("section3", tmp_path / "b", seeds=1, tasks=["scan"], steps=1000)
    with pytest.raises(ProbeError, match="is not this part of the section3 study as planned"):
        train_and_evaluate(other, "cpu", train, landed=Landed(summaries, "section3"))


def _landed_scan(tmp_path, edit=None):
    """Seed 0 of scan, summarised as a sitting on a CPU writes it, then ``edit``-ed as a summary trained
    otherwise would read; the folder of summaries."""
    summaries = tmp_path / "summaries"
    train, _ = _stand_in({("scan", 1500): 1.0})
    runs = plan("section3", tmp_path / "a", seeds=1, tasks=["scan"])
    train_and_evaluate(runs, "cpu", train, on_scenario=_summarising(summaries))
    if edit is not None:
        path = summaries / "scan+split=paper+seed0.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return summaries


def _trains(summaries, tmp_path, device_type="cpu", precision=None):
    """What a second sitting of the same plan trains, reading the summaries as it would on ``device_type``
    (with the grid's precision set to ``precision``, where given)."""
    train, trained = _stand_in({("scan", 1500): 1.0})
    runs = plan("section3", tmp_path / "b", seeds=1, tasks=["scan"])
    for run in runs:
        run.config.precision = precision or run.config.precision
    train_and_evaluate(runs, "cpu", train, landed=Landed(summaries, "section3", device_type))
    return trained


def test_a_landed_summary_trained_with_other_settings_is_one_line_not_a_silent_reuse(tmp_path):
    """Its recipe alike, a setting the report does not show (weight decay here) changed after it landed."""
    assert _trains(_landed_scan(tmp_path), tmp_path) == []
    summaries = _landed_scan(tmp_path, lambda data: data["settings"].update(weight_decay=0.1))
    with pytest.raises(ProbeError, match=r"as planned \(what differs: settings\)"):
        _trains(summaries, tmp_path)


def test_a_landed_summary_in_another_precision_is_one_line_not_a_silent_reuse(tmp_path):
    """A CPU's float32 parts continued on a GPU, where the grids' precision auto trains in bf16, or a part
    trained in bf16 read by a float32 sitting: the study would mix numerics without saying so."""
    with pytest.raises(ProbeError, match=r"as planned \(what differs: precision\)"):
        _trains(_landed_scan(tmp_path), tmp_path, device_type="cuda")
    bf16 = _landed_scan(tmp_path, lambda data: data["runs"][2].update(forward_precision="bf16"))
    with pytest.raises(ProbeError, match=r"as planned \(what differs: precision\)"):
        _trains(bf16, tmp_path)
    assert _trains(_landed_scan(tmp_path), tmp_path, device_type="cuda", precision="float32") == []
    assert _trains(_landed_scan(tmp_path), tmp_path, precision="float32") == []  # auto is float32 here


def test_a_summary_written_before_settings_and_precision_were_recorded_is_read_on_its_recipe(tmp_path):
    """Such summaries (every one committed before) trained in float32 on CPUs: reused by a CPU sitting whose
    recipe is theirs, refused by one whose recipe is not, and by a GPU's (auto there is bf16)."""

    def legacy(data):
        del data["settings"]
        for row in data["runs"]:
            del row["forward_precision"]

    summaries = _landed_scan(tmp_path, legacy)
    assert _trains(summaries, tmp_path) == []
    with pytest.raises(ProbeError, match=r"as planned \(what differs: precision\)"):
        _trains(summaries, tmp_path, device_type="cuda")
    data = json.loads((summaries / "scan+split=paper+seed0.json").read_text())
    data["recipe"]["lr"] = 0.01
    (summaries / "scan+split=paper+seed0.json").write_text(json.dumps(data))
    with pytest.raises(ProbeError, match=r"as planned \(what differs: recipe\)"):
        _trains(summaries, tmp_path)


COMMITTED = [("section3", "section3"), ("section3", "section3_epyc"), ("section6", "section6")]


@pytest.mark.parametrize("study, folder", COMMITTED)
def test_every_committed_summary_is_the_part_todays_plan_trains_on_a_cpu(tmp_path, study, folder):
    """The committed parts stay reusable, and reused only where the grids as they stand would train them alike:
    a grid changed in any setting since they landed fails here rather than mixing recipes in a later sitting."""
    committed = RESULTS / folder
    planned: dict[int, dict] = {}
    for path in sorted(committed.glob("*.json")):
        data, _ = read_summary(path)
        scenario, seed, steps = data["scenario"], data["seed"], data["recipe"]["steps"]
        if steps not in planned:
            planned[steps] = scenarios(plan(study, tmp_path / str(steps), seeds=4, steps=steps))
        assert path.name == summary_name(scenario, seed, RULE.tag(steps))
        part = (scenario, seed, RULE.tag(steps), planned[steps][scenario])
        if data["options"].get("scratchpad") and "decode_positions" not in data["runs"][0]["evaluation"]["asked"]:
            with pytest.raises(ProbeError, match=r"what differs: scoring\)"):  # evaluated before decoding ran on
                Landed(committed, study).iid(*part)
        else:
            assert Landed(committed, study).iid(*part) is not None
    assert planned, f"no summaries in {committed}"


def test_a_scratchpad_part_is_reused_only_where_its_answers_were_decoded_as_far_as_the_authors_decode(tmp_path):
    """Addition's full format, seed 0, as committed (evaluated to the authors' 1,500 positions) and as it was
    first written (its evaluations asked nothing of how far they decoded: stopped at the gold's length); and its
    baseline as committed (its answer read, decoded to the authors' 256 positions) and as first scored, token
    for token (kept under superseded/)."""
    from probe.tasks.decoding import PLAIN_POSITIONS, SCRATCHPAD_POSITIONS

    committed = RESULTS / "section6"
    planned = scenarios(plan("section6", tmp_path / "runs", seeds=1))
    landed = Landed(tmp_path, "section6")
    baseline = "addition+template=authors+train_length=8"
    (tmp_path / f"{baseline}+seed0.json").write_text((committed / "superseded" / f"{baseline}+seed0.json").read_text())
    with pytest.raises(ProbeError, match=r"as planned \(what differs: scoring\)"):
        landed.iid(baseline, 0, "", planned[baseline])
    for name in ("addition+scratchpad=full", baseline):
        (tmp_path / f"{name}+seed0.json").write_text((committed / f"{name}+seed0.json").read_text())
    assert landed.iid(baseline, 0, "", planned[baseline])
    data = json.loads((tmp_path / f"{baseline}+seed0.json").read_text())
    assert {row["evaluation"]["asked"]["decode_positions"] for row in data["runs"]} == {PLAIN_POSITIONS}
    full = planned["addition+scratchpad=full"]
    data = json.loads((tmp_path / "addition+scratchpad=full+seed0.json").read_text())
    assert {row["evaluation"]["asked"]["decode_positions"] for row in data["runs"]} == {SCRATCHPAD_POSITIONS}
    assert landed.iid("addition+scratchpad=full", 0, "", full) == [row["iid"] for row in data["runs"]]
    for row in data["runs"]:
        del row["evaluation"]["asked"]["decode_positions"]
    (tmp_path / "addition+scratchpad=full+seed0.json").write_text(json.dumps(data))
    with pytest.raises(ProbeError, match=r"as planned \(what differs: scoring\)"):
        landed.iid("addition+scratchpad=full", 0, "", full)


def test_a_summary_of_another_scenario_or_seed_under_this_parts_name_is_one_line(tmp_path):
    """Same study, recipe and PEs, but another part's runs in the file: read as this part, its IID would
    choose this scenario's rung."""
    summaries = tmp_path / "summaries"
    train, _ = _stand_in({("parity", 1500): 1.0, ("scan", 1500): 1.0})
    parity = plan("section3", tmp_path / "a", seeds=2, tasks=["parity"])
    train_and_evaluate(parity, "cpu", train, on_scenario=_summarising(summaries))
    (summaries / "parity+train_length=8+seed0.json").rename(summaries / "scan+split=paper+seed0.json")
    (summaries / "parity+train_length=8+seed1.json").rename(summaries / "parity+train_length=8+seed0.json")
    for task, differs in (("scan", "scenario"), ("parity", "seed")):
        runs = plan("section3", tmp_path / task, seeds=1, tasks=[task])
        with pytest.raises(ProbeError, match=rf"as planned \(what differs: {differs}\)"):
            train_and_evaluate(runs, "cpu", train, landed=Landed(summaries, "section3"))


def test_the_dry_run_of_a_later_sitting_prices_what_is_left_at_the_rungs_seed_0_reached(tmp_path, capsys, monkeypatch):
    from probe.cli import main

    summaries, tasks = tmp_path / "summaries", ["scan", "parity"]
    train, _ = _stand_in({("scan", 1500): 0.9, ("scan", 4000): 0.97, ("parity", 1500): 1.0})
    first = tmp_path / "sitting1"
    runs = plan("section3", first, seeds=1, tasks=tasks)
    rung = rung_plan("section3", first, RULE, seeds=1, tasks=tasks)
    train_and_evaluate(runs, "cpu", train, rule=RULE, rung=rung, on_scenario=_summarising(summaries))
    priced = _priced_at_100s_a_run(monkeypatch)
    argv = ["reproduce", "--scale", "section3", "--task", "scan", "--task", "parity", "--seeds", "3", "--jobs", "1"]
    where = ["--checkpoints", str(tmp_path / "sitting2"), "--summaries", str(summaries), "--dry-run"]
    assert main([*argv, *where]) == 0
    assert sorted({(r.config.task, r.config.seed, r.config.steps) for r in priced}) == [
        ("parity", 1, 1500),
        ("parity", 2, 1500),
        ("scan", 1, 4000),
        ("scan", 2, 4000),
    ]
    assert len(priced) == 4 * 5
    out = " ".join(capsys.readouterr().out.split())
    assert "scan+split=paper: 10 of 15 runs left" in out and "the price above is what is left" in out


def test_the_dry_run_prices_a_scenario_the_rule_sends_on_at_its_next_rung_seed_0_included(
    tmp_path, capsys, monkeypatch
):
    """SCAN's seed 0 landed at rung 1 under the bar (median 0.9): rung 2 is due. What is left is seed 0 at
    4,000 steps and the other seeds there too (at the least they can cost), never seeds 1 and 2 at 1,500,
    which the study will not train."""
    from probe.cli import main
    from probe.studies.ladder import Ladder

    summaries = tmp_path / "summaries"
    first = tmp_path / "sitting1"
    train, _ = _stand_in({("scan", 1500): 0.9})
    runs = plan("section3", first, seeds=1, tasks=["scan"])
    one_rung = Ladder((1500,), 0.95)  # a sitting stopped after seed 0's first rung landed
    rung = rung_plan("section3", first, one_rung, seeds=1, tasks=["scan"])
    train_and_evaluate(runs, "cpu", train, rule=one_rung, rung=rung, on_scenario=_summarising(summaries))
    priced = _priced_at_100s_a_run(monkeypatch)
    argv = ["reproduce", "--scale", "section3", "--task", "scan", "--seeds", "3", "--jobs", "1"]
    assert main([*argv, "--checkpoints", str(tmp_path / "sitting2"), "--summaries", str(summaries), "--dry-run"]) == 0
    assert sorted({(r.config.seed, r.config.steps) for r in priced}) == [(0, 4000), (1, 4000), (2, 4000)]
    assert len(priced) == 3 * 5
    assert all(r.path.parent.parent.parent.name == "sitting2-steps4000" for r in priced)
    out = " ".join(capsys.readouterr().out.split())
    assert "what is left, each scenario at the rung it trains at next" in out and "if all climb" not in out


def test_the_dry_run_shows_a_finished_scenario_at_the_rung_it_was_trained_at(tmp_path, capsys, monkeypatch):
    """SCAN climbed to 4,000 steps and every seed landed there: its line says 4000 steps, not rung 1's 1500."""
    from probe.cli import main

    summaries = tmp_path / "summaries"
    train, _ = _stand_in({("scan", 1500): 0.9, ("scan", 4000): 0.97})
    runs = plan("section3", tmp_path / "sitting1", seeds=2, tasks=["scan"])
    rung = rung_plan("section3", tmp_path / "sitting1", RULE, seeds=2, tasks=["scan"])
    train_and_evaluate(runs, "cpu", train, rule=RULE, rung=rung, on_scenario=_summarising(summaries))
    _priced_at_100s_a_run(monkeypatch)
    argv = ["reproduce", "--scale", "section3", "--task", "scan", "--seeds", "2", "--jobs", "1", "--dry-run"]
    assert main([*argv, "--checkpoints", str(tmp_path / "sitting2"), "--summaries", str(summaries)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "scan+split=paper: 0 of 10 runs left, preset tiny, 4000 steps of 32" in out


def test_runs_trained_before_the_sitting_land_while_the_workers_train_the_others(tmp_path, monkeypatch):
    """A sitting that resumes with runs trained but not evaluated (a sitting stopped first, a scoring change)
    hands them to be evaluated once the workers have their runs, not before: otherwise every core but the
    evaluating one waits for as long as those evaluations take."""
    import probe.studies.reproduce as reproduce
    import probe.training.parallel as parallel

    runs = plan("section3", tmp_path, seeds=1, tasks=["scan", "parity"])
    before = [r.path for r in runs if r.config.task == "scan"]
    monkeypatch.setattr(reproduce, "run_state", lambda r: "evaluate" if r.path in before else "new")
    events: list[tuple[str, object]] = []

    def train_parallel(pairs, device, *, jobs, on_event, engine, on_done, beside):
        events.append(("workers start", [path for _, path in pairs]))
        for work in beside:
            work()
        for i, (_, path) in enumerate(pairs):
            events.append(("trained", path))
            on_done(i)
        return []

    monkeypatch.setattr(parallel, "train_parallel", train_parallel)
    train = reproduce.local_trainer(torch.device("cpu"), jobs=2)
    train(runs, lambda run: events.append(("finished", run.path)))
    parity = [r.path for r in runs if r.config.task == "parity"]
    assert events == [
        ("workers start", parity),
        *[("finished", path) for path in before],
        *[event for path in parity for event in (("trained", path), ("finished", path))],
    ]
