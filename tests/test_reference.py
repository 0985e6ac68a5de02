"""The authors' released results shipped in probe.reference, against values copied by hand."""

from __future__ import annotations

import pytest

from probe.reference import DATASETS, dataset_for, paper_results, paper_runs, paper_summary
from probe.tasks import get


def test_source_is_recorded():
    source = paper_results()["source"]
    assert source["repository"].endswith("McGill-NLP/length-generalization") and len(source["commit"]) == 40


@pytest.mark.parametrize(
    "dataset, pe, seed, ood, iid",
    [
        # results/classic.jsonl and results/sanity_check.jsonl, read by hand
        ("scan-mdlen_tr25_ts48", "nope", 146317, 0.8284, 1),
        ("scan-mdlen_tr25_ts48", "t5", 234054, 0.7899, 1),
        ("scan-mdlen_tr25_ts48", "ape", 256788, 0.0721, 1),
        ("scan-mdlen_tr25_ts48", "alibi", 234054, 0.4627, 0.9302),
        ("s2s_copy-rsc_tr20_ts40", "nope", 146317, 0.9835, 0.9959),
        ("s2s_copy-rsc_tr20_ts40", "rotary", 146317, 0.0006, 0.9959),
    ],
)
def test_values_copied_by_hand(dataset, pe, seed, ood, iid):
    (run,) = [r for r in paper_runs(dataset) if r["pe"] == pe and r["seed"] == seed]
    assert (run["ood"], run["iid"]) == (ood, iid)


def test_every_dataset_has_three_seeds_of_five_pes_and_rebuilds_in_probe():
    for name, spec in DATASETS.items():
        runs = paper_runs(name)
        assert sorted({r["pe"] for r in runs}) == ["alibi", "ape", "nope", "rotary", "t5"]
        assert len(runs) == 15
        task = get(spec["task"], **spec["options"])
        assert dataset_for(task.name, task.options) == name


def test_scan_summary_is_the_paper_ordering():
    summary = paper_summary("scan-mdlen_tr25_ts48")
    assert summary["nope"]["ood"] == pytest.approx((0.771 + 0.8284 + 0.7924) / 3)
    assert sorted(summary, key=lambda pe: -summary[pe]["ood"]) == ["t5", "nope", "alibi", "rotary", "ape"]
    assert list(summary["nope"]["ood_by_length"]) == [26, 27, 28, 30, 32, 33, 36, 40, 48]


def test_the_paper_categories_group_its_ten_tasks_once_and_any_other_task_apart():
    """Figure mrr-per-category's three groups, read by hand; a task added beside the ten ranks in "other"."""
    from probe.reference import CATEGORIES, category
    from probe.tasks import TASKS

    paper = {
        "primitive": {"copy", "reverse"},
        "mathematical & reasoning": {"addition", "polynomial", "sorting", "summation", "parity", "lego"},
        "classic length generalization": {"scan", "pcfg"},
    }
    grouped = [task for tasks in CATEGORIES.values() for task in tasks]
    assert {group: set(tasks) for group, tasks in CATEGORIES.items()} == paper and len(grouped) == len(set(grouped))
    assert set(grouped) <= set(TASKS)
    for name in TASKS:
        assert category(name, {}) == next((group for group, tasks in paper.items() if name in tasks), "other")
