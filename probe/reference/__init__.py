"""The paper's published numbers: the authors' released per-run results, shipped as data.

``paper_results.json`` holds, for every final run of the authors' SCAN, PCFG, copy and reverse
experiments (T5-base decoder, 3 seeds per PE), the exact match on the held-out IID split and on
the test split (unseen lengths only), overall and per length bucket, with the file and run id it
came from (McGill-NLP/length-generalization, ``results/classic.jsonl`` and
``results/sanity_check.jsonl``; rebuilt with ``python -m probe.reference.build``). The math and
reasoning tasks' file (``results/scratchpad_f.jsonl``) is not in the stored copy of that
repository, so those tasks have no reference here.

``DATASETS`` maps each of the authors' dataset splits to the task and options that rebuild it in
probe; ``CATEGORIES`` is the paper's grouping of its tasks (Figure mrr-per-category), the one list
that the sweep report and ``probe reproduce`` rank within.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from statistics import mean
from typing import Any

RESULTS_FILE = Path(__file__).with_name("paper_results.json")
SOURCE_FILES = ("results/classic.jsonl", "results/sanity_check.jsonl")
PE_NAMES = {"none": "nope", "abs_sinusoid": "ape", "t5_relative_bias": "t5", "alibi": "alibi", "rotary": "rotary"}

DATASETS: dict[str, dict[str, Any]] = {
    "scan-mdlen_tr25_ts48": {"task": "scan", "options": {"split": "paper"}},
    "pcfg-md_productivity": {"task": "pcfg", "options": {}},
    "s2s_copy-rsc_tr20_ts40": {"task": "copy", "options": {"split": "paper", "variant": "count"}},
    "s2s_copy-rdc_tr20_ts40": {"task": "copy", "options": {"split": "paper", "variant": "replace"}},
    "s2s_copy-rsc2x_tr20_ts40": {"task": "copy", "options": {"split": "paper", "variant": "count-2x"}},
    "s2s_copy-cmc_tr20_ts40": {"task": "copy", "options": {"split": "paper", "variant": "random"}},
    "s2s_copy-cmc2x_tr20_ts40": {"task": "copy", "options": {"split": "paper", "variant": "random-2x"}},
    "s2s_reverse-mc_tr20_ts40": {"task": "reverse", "options": {"split": "paper", "variant": "random"}},
    "s2s_reverse-mc2x_tr20_ts40": {"task": "reverse", "options": {"split": "paper", "variant": "random-2x"}},
    "s2s_reverse-mcrv_tr20_ts40": {"task": "reverse", "options": {"split": "paper", "variant": "twice"}},
}
"""The authors' dataset split -> probe task and options."""

CATEGORIES: dict[str, tuple[str, ...]] = {  # Figure mrr-per-category: the paper's three groups of tasks
    "primitive": ("copy", "reverse"),
    "mathematical & reasoning": ("addition", "polynomial", "sorting", "summation", "parity", "lego"),
    "classic length generalization": ("scan", "pcfg"),
}


SCRATCHPAD_GROUP = "with scratchpad"
"""Runs with a scratchpad: a group of their own, outside the paper's three (Section 6 asks of them apart)."""


def category(task: str, options: dict[str, Any]) -> str:
    """The paper's group of a task; runs with a scratchpad form a group of their own (:data:`SCRATCHPAD_GROUP`)."""
    if options.get("scratchpad"):
        return SCRATCHPAD_GROUP
    return next((name for name, tasks in CATEGORIES.items() if task in tasks), "other")


@cache
def paper_results() -> dict[str, Any]:
    """The whole reference file: ``source`` (repository, commit, files), ``datasets``, ``runs``."""
    return json.loads(RESULTS_FILE.read_text())


def dataset_for(task: str, options: dict[str, Any]) -> str | None:
    """The authors' dataset split that ``task`` with ``options`` rebuilds, if any (options not named
    in the mapping must be at their defaults, which the caller resolves)."""
    for name, spec in DATASETS.items():
        if spec["task"] == task and all(options.get(k) == v for k, v in spec["options"].items()):
            return name
    return None


def paper_runs(dataset: str) -> list[dict[str, Any]]:
    """The released runs of one dataset split, every PE and seed."""
    return [run for run in paper_results()["runs"] if run["dataset"] == dataset]


def paper_summary(dataset: str) -> dict[str, dict[str, Any]]:
    """Per PE: mean IID and OOD exact match over seeds, the seeds, and the mean per OOD length."""
    summary: dict[str, dict[str, Any]] = {}
    for pe in dict.fromkeys(run["pe"] for run in paper_runs(dataset)):
        runs = [run for run in paper_runs(dataset) if run["pe"] == pe]
        lengths = sorted({int(k) for run in runs for k in run["ood_buckets"]})
        summary[pe] = {
            "iid": mean(run["iid"] for run in runs),
            "ood": mean(run["ood"] for run in runs),
            "seeds": [run["seed"] for run in runs],
            "ood_by_length": {
                n: mean(run["ood_buckets"][str(n)] for run in runs if str(n) in run["ood_buckets"]) for n in lengths
            },
        }
    return summary
