"""The explorer's pages on a checkpoint folder with a run of every registered PE (the zoo included,
and one run with non-default PE options), each one picked in turn where a page picks runs.

The list of PEs comes from the registry: a new PE is covered by registering it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import FOLDER, TASK_OPTIONS, charts, run_page, texts, tiny_model

from probe.models.registry import PE_CLASSES, REGISTRY

OPTIONED = ("rotary", {"fraction": 0.5})  # a run whose folder name carries its PE options


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    """reverse with L = 4: one evaluated seed-0 run per registered PE, the optioned Rotary, NoPE seed 1."""
    from probe.analysis.evaluation import evaluate_run
    from probe.runs.folders import find_runs, run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    root = tmp_path_factory.mktemp("zoo")
    tiny = tiny_model(2)
    planned = [(pe, {}, 0) for pe in PE_CLASSES] + [(OPTIONED[0], OPTIONED[1], 0), ("nope", {}, 1)]
    for pe, options, seed in planned:
        config = TrainConfig(
            task="reverse",
            pe=pe,
            seed=seed,
            task_options=TASK_OPTIONS,
            pe_options=options,
            steps=3,
            batch_size=16,
            model=tiny,
            eval_examples=4,
        )
        train_run(config, run_dir(root, "reverse", pe, seed, TASK_OPTIONS, options), torch.device("cpu"))
    runs, broken = find_runs(root)
    assert not broken and len(runs) == len(planned)
    for run in runs:
        if run.seed == 0:
            evaluate_run(run, n_test=4, n_valid=4)
    return root


def _seed0_paths(root: Path) -> dict[str, str]:
    """Run folder name (``t5``, ``rotary+fraction=0.5``) -> the path a page's select box holds."""
    return {path.parent.name: str(path) for path in sorted((root / FOLDER).glob("*/seed0"))}


def test_the_models_page_lists_every_pe(zoo, monkeypatch):
    at = run_page("models", zoo, monkeypatch)
    table = "\n".join(frame.value.to_string() for frame in at.dataframe)
    for kind, entry in REGISTRY.items():
        assert kind in table or entry.label in table, kind
    assert charts(at) >= 1


def test_the_attention_page_draws_every_pe(zoo, monkeypatch):
    at = run_page("attention", zoo, monkeypatch)
    paths = _seed0_paths(zoo)
    assert set(paths) == set(PE_CLASSES) | {"rotary+fraction=0.5"}
    for name, path in paths.items():
        at.selectbox(key="attention-run").set_value(path).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert not at.error, (name, texts(at.error))
        assert charts(at) >= 1, name


def test_the_compare_page_compares_nope_with_every_pe(zoo, monkeypatch):
    at = run_page("compare", zoo, monkeypatch)
    at.button[0].click().run()  # the page computes only when asked
    for name, path in _seed0_paths(zoo).items():
        if name == "nope":
            continue
        at.selectbox(key="compare-b").set_value(path).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert not at.error, (name, texts(at.error))
        assert charts(at) == 1 + 2, name  # per-layer figure, head matrices of B and of the baseline


def test_the_distances_page_reads_every_pe_at_once(zoo, monkeypatch):
    at = run_page("distances", zoo, monkeypatch)
    at.button[0].click().run()  # the page computes only when asked
    everything = list(at.multiselect(key="distances-runs").options)
    at.multiselect(key="distances-runs").set_value(everything).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, texts(at.error)
    assert len(everything) == len(PE_CLASSES) + 2 and charts(at) >= 1
