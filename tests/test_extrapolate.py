"""`probe extrapolate` on task runs: the validation slice stays out of the test, tuned interventions are
scored on it alone, the scores are greedy decoding's, and the outputs are written and read back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_model

from probe.cli import main
from probe.extrapolation.extrapolate import extrapolate
from probe.extrapolation.plan import VALID_SHARE, Settings
from probe.extrapolation.tasks import score_examples
from probe.extrapolation.tuning import Score, grid_search, validation_split
from probe.models.attach import attached
from probe.models.interventions import Intervention
from probe.runs.folders import load_run, run_dir
from probe.subjects.examples import task_of
from probe.tasks.batches import encode
from probe.tasks.decoding import evaluate_examples
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

OPTIONS = {"train_length": 4}
PES = ("nope", "rotary", "t5")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Reverse runs (L = 4) of NoPE, Rotary and T5, trained 150 steps: partly right on seen lengths."""
    root = tmp_path_factory.mktemp("extrapolate")
    paths = []
    for pe in PES:
        config = TrainConfig(
            task="reverse", pe=pe, seed=0, task_options=OPTIONS, steps=150, batch_size=32, lr=3e-3,
            model=tiny_model(), eval_examples=4,
        )  # fmt: skip
        paths.append(run_dir(root, "reverse", pe, 0, OPTIONS))
        train_run(config, paths[-1], torch.device("cpu"))
    return paths


@pytest.fixture(scope="module")
def report(runs):
    return extrapolate([str(p) for p in runs], Settings(n_valid=20, n_iid=40, batch_size=64))


def test_the_validation_split_is_deterministic_disjoint_and_per_length():
    items = [(length, i) for length in (5, 6, 7) for i in range(30)]
    valid, test = validation_split(items, lambda x: f"{x}", lambda x: x[0], 0.2, 4)
    again, _ = validation_split(list(reversed(items)), lambda x: f"{x}", lambda x: x[0], 0.2, 4)
    assert sorted(valid) == sorted(again)  # the order given does not matter
    assert not set(valid) & set(test) and len(valid) + len(test) == len(items)
    assert [sum(1 for v in valid if v[0] == length) for length in (5, 6, 7)] == [4, 4, 4]  # 20% of 30 = 6, at most 4
    assert validation_split([(9, 0)], str, lambda x: x[0], 0.2, 4) == ([], [(9, 0)])  # one example: all test


def test_identical_items_fall_on_one_side_of_the_validation_split():
    """Copy's count variant repeats examples; one held for tuning and also scored would leak. Unique items split as
    the hash orders them (the first 20% by SHA-256 of the key, computed here), duplicates together."""
    import hashlib

    unique = [f"u{i}" for i in range(10)]
    by_hash = sorted(unique, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    assert validation_split(unique, str, lambda _: 0, 0.2, 4)[0] == [k for k in unique if k in by_hash[:2]]
    repeated = [f"w{i % 7}" for i in range(40)]  # 7 distinct items, 5 or 6 copies each
    valid, test = validation_split(repeated, str, lambda _: 0, 0.2, 20)
    assert valid and test and not set(valid) & set(test) and len(valid) + len(test) == 40
    assert len(valid) <= 8  # whole keys while they fit 20% of 40
    assert validation_split(["w"] * 5, str, lambda _: 0, 0.2, 4) == ([], ["w"] * 5)  # one key: all of it is test


def test_grid_search_takes_the_best_validation_score_and_the_mildest_on_a_tie():
    grid = [Intervention(temperature=t) for t in (1.0, 0.8, 1.25, 0.5)]
    scores = {1.0: Score(0.2), 0.8: Score(0.5, -1.0), 1.25: Score(0.5, -0.5), 0.5: Score(0.5, -0.5)}
    tuned = grid_search("temperature", grid, lambda i: scores[i.temperature])
    assert tuned.intervention.temperature == 1.25  # 0.5 ties it and comes later
    assert [t["validation"] for t in tuned.tried] == [0.2, 0.5, 0.5, 0.5]


def test_every_run_is_read_untouched_then_under_fixed_rules_then_tuned(report, runs):
    by_pe = {r.pe: r for r in report.runs}
    assert set(by_pe) == set(PES)
    for run in report.runs:
        assert run.baseline.kind == "none" and run.baseline.intervention.is_identity
        kinds = [o.kind for o in run.outcomes]
        assert kinds == sorted(kinds, key=("none", "fixed", "tuned").index)
        assert {o.family for o in run.outcomes if o.kind == "tuned"} == {"temperature", "window", "head-temperature"}
        for o in run.outcomes:
            assert o.test["low"] <= o.test["mean"] <= o.test["high"]
            assert sum(b["n"] for b in o.buckets) == o.test["n"]
            assert all(b["at"] > 4 for b in o.buckets)  # unseen lengths only
    assert "cap" in by_pe["nope"].skipped and "rope" in by_pe["t5"].skipped
    assert {o.family for o in by_pe["rotary"].outcomes} >= {"cap", "rope", "log-length"}
    rope = next(o for o in by_pe["rotary"].outcomes if o.family == "rope").intervention
    assert rope.rope["scaling"] == "yarn" and rope.rope["original_length"] == by_pe["rotary"].trained_length


def test_tuning_scores_are_the_validation_examples_and_the_test_leaves_them_out(report, runs):
    run = next(r for r in report.runs if r.pe == "nope")
    task, tokenizer = task_of(json.loads((runs[0] / "config.json").read_text()))
    unseen = [e for e in task.examples("test") if not task.is_seen(e.length)]
    valid, test = validation_split(unseen, lambda e: f"{e.source}\t{e.target}", lambda e: e.length, VALID_SHARE, 20)
    assert run.baseline.test["n"] == len(test) == len(unseen) - len(valid)
    model = load_run(runs[0])
    data = encode(valid, tokenizer)
    tuned = next(o for o in run.outcomes if o.family == "temperature").tuning
    for tried in tuned["tried"][:3]:
        t = float(tried["intervention"].split("=")[1]) if tried["intervention"] != "none" else 1.0
        hooks = [
            (f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook, t=t: s / t) for layer in range(model.cfg.n_layers)
        ]
        tokens, mask = data.batch(torch.arange(len(data)))
        with torch.no_grad():
            logits = model.run_with_hooks(tokens, fwd_hooks=hooks)[:, :-1]
        losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * mask
        nll = (losses.sum(1) / mask.sum(1)).mean()
        exact = ((logits.argmax(-1) == tokens[:, 1:]) | ~mask).all(1).double().mean()
        assert tried["tie_break"] == pytest.approx(-float(nll), rel=1e-4)
        assert tried["validation"] == pytest.approx(float(exact))


@pytest.mark.parametrize("intervention", [Intervention(window=3, sinks=1), Intervention(log_length=6, temperature=0.7)])
def test_teacher_forced_scores_are_greedy_decodings_exact_match_under_an_intervention(runs, intervention):
    model = load_run(runs[1])  # rotary
    task, tokenizer = task_of(json.loads((runs[1] / "config.json").read_text()))
    examples = task.examples("test", n=60, seed=0)
    with attached(model, intervention):
        correct, _ = score_examples(model, encode(examples, tokenizer), torch.device("cpu"), 16)
        decoded = evaluate_examples(model, tokenizer, examples, batch_size=16)  # token by token, KV cache
    assert correct.tolist() == decoded.correct
    assert 0 < sum(decoded.correct) < len(examples)  # neither all right nor all wrong: the check can fail


def test_outputs_are_written_and_the_command_prints_the_table(runs, tmp_path, capsys, monkeypatch):
    import plotly.graph_objects as go

    monkeypatch.setattr(go.Figure, "write_image", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no png")))
    code = main(
        ["extrapolate", str(runs[0]), "--family", "log-length", "--family", "temperature", "--n-valid", "10",
         "--n-iid", "20", "--intervention", "window=4+sinks=1", "--out", str(tmp_path), "--json"]
    )  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    names = [o["intervention"]["name"] for o in data["runs"][0]["outcomes"]]
    assert names[:3] == ["none", "log-length=17", "window=4+sinks=1"]
    assert {Path(f).name for f in data["files"]} >= {
        "extrapolation.json", "extrapolation.csv", "extrapolation.md", "extrapolation_nope.html",
    }  # fmt: skip
    markdown = (tmp_path / "extrapolation.md").read_text()
    assert "| fixed | log-length | log-length=17 |" in markdown and "| tuned | temperature |" in markdown


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--intervention", "warp=2"], "unknown intervention 'warp'"),
        (["--intervention", "window=0"], "window must be at least 1"),
        (["--n-valid", "0"], "--n-valid must be at least 1"),
    ],
)
def test_bad_input_is_one_line(runs, capsys, argv, says):
    assert main(["extrapolate", str(runs[0]), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err


def test_an_intervened_eval_is_recorded_beside_the_plain_one(runs, capsys):
    assert main(["eval", str(runs[0]), "--n", "40", "--valid", "20", "--intervene", "window=5+sinks=1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["runs"][0]
    assert data["intervention"] == {"name": "window=5+sinks=1", "window": 5, "sinks": 1}
    assert data["label"].endswith("under window=5+sinks=1")
    assert (runs[0] / "eval+window=5+sinks=1.json").is_file()


def test_the_explorer_page_evaluates_a_run_and_draws_a_figure_per_pe(runs, tmp_path, monkeypatch):
    import shutil

    from helpers import charts, run_page, texts

    root = tmp_path / "checkpoints"
    shutil.copytree(runs[1], run_dir(root, "reverse", "rotary", 0, OPTIONS))
    at = run_page("extrapolation", root, monkeypatch)
    assert charts(at) == 0  # nothing saved, nothing computed until asked
    at.button[0].click().run()  # the form's Measure
    assert not at.exception and not at.error, texts(at.error)
    assert charts(at) == 1
    table = at.dataframe[0].value
    assert list(table["family"])[:4] == ["none", "log-length", "cap", "rope"]
    assert "probe extrapolate" in texts(at.caption)


def test_fitted_head_temperatures_are_written_as_a_file_intervene_reads_back(report, tmp_path, monkeypatch):
    import plotly.graph_objects as go

    from probe.models.interventions import parse_intervention

    monkeypatch.setattr(go.Figure, "write_image", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no png")))
    files = [Path(f) for f in report.write(tmp_path) if Path(f).name.startswith("head_temperatures_")]
    assert len(files) == len(report.runs)
    run = report.runs[0]
    fitted = next(o for o in run.outcomes if o.family == "head-temperature").intervention
    written = next(f for f in files if run.label.replace(" ", "-") in f.name)
    assert parse_intervention(f"head-temperature={written}").head_temperatures == fitted.head_temperatures


def test_an_intervention_given_that_a_run_cannot_take_is_listed_as_not_applicable(runs, tmp_path, capsys, monkeypatch):
    import plotly.graph_objects as go

    monkeypatch.setattr(go.Figure, "write_image", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no png")))
    argv = ["extrapolate", str(runs[0]), str(runs[1]), "--family", "log-length", "--intervention", "cap=3"]
    argv += ["--intervention", "scaling=linear+factor=2", "--n-valid", "5", "--n-iid", "10", "--out", str(tmp_path)]
    assert main([*argv, "--json"]) == 0
    nope, rotary = json.loads(capsys.readouterr().out)["runs"]
    assert nope["skipped"] == {
        "cap=3": "no relative distance to cap",
        "factor=2+scaling=linear": "no rotary positions to scale",
    }
    assert [o["intervention"]["name"] for o in rotary["outcomes"]] == [
        "none", "log-length=17", "cap=3", "factor=2+scaling=linear",
    ]  # fmt: skip


def test_the_plan_is_said_first_and_the_progress_counts_its_steps_from_the_first(runs, capsys, monkeypatch):
    """--dry-run prints each model's steps and an estimate, and evaluates none; a real call's progress hears
    every planned step, numbered over all models, with the total known from the first call."""
    import probe.extrapolation.extrapolate as module

    real = module.extrapolate_one
    monkeypatch.setattr(module, "extrapolate_one", lambda *a: pytest.fail("--dry-run loaded a model"))
    assert main(["extrapolate", *map(str, runs), "--family", "cap", "--family", "temperature", "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "3 model(s), 8 steps in all" in out  # untouched + temperature each; cap for Rotary and T5
    assert "NoPE: untouched, tuning a temperature" in out
    assert "Rotary, T5's Relative Bias: untouched, cap, tuning a temperature" in out
    assert re.search(r"about \d+ (s|min \d+ s) here \(one pass over the first run's test examples, timed now\)", out)

    monkeypatch.setattr(module, "extrapolate_one", real)
    heard = []
    settings = Settings(families=("cap", "temperature"), n_valid=2, n_iid=4, progress=lambda *a: heard.append(a))
    extrapolate(runs, settings)
    assert [(done, total) for _, done, total in heard] == [(i, 8) for i in range(8)]
    assert heard[0][0] == "NoPE: untouched" and heard[-1][0].endswith("tuning a temperature")


def test_the_estimate_counts_each_steps_reads_from_the_data(runs):
    """NoPE under cap and temperature: untouched and the tuned pick each read test and IID; the grid reads the
    validation slice once per temperature; no cap (NoPE has no distance)."""
    from probe.extrapolation.extrapolate import plan
    from probe.extrapolation.tasks import task_reads, task_sets
    from probe.extrapolation.tuning import TEMPERATURES
    from probe.subjects.resolve import resolve

    settings = Settings(families=("cap", "temperature"), n_valid=2, n_iid=4)
    (nope,) = plan(runs[:1], settings)
    assert nope.steps == ["untouched", "tuning a temperature"] and "cap" in nope.skipped
    valid, test, iid, _ = task_sets(resolve(runs[0]), settings)
    assert len(iid) == 4 and 0 < len(valid) <= 2 * len({e.length for e in valid})
    assert task_reads(resolve(runs[0]), settings, nope) == 2 * (len(test) + 4) + len(TEMPERATURES) * len(valid)
