"""The explorer (probe/explorer/explorer.py) under Streamlit's AppTest, and `probe app`'s own checks.

Every page runs without an exception on tiny checkpoints made here (two NoPE seeds, T5, a
folder whose config.json is broken, a run whose weights are corrupt) and on an empty folder.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import psutil  # the test extra's: finds the server under `probe app`
import pytest
import torch
from helpers import (
    EXPLORER,
    FOLDER,
    TASK_OPTIONS,
    TIMEOUT,
    assert_saved_report_shown,
    assert_stops,
    charts,
    run_page,
    running_app,
    texts,
    tiny_model,
)

from probe.analysis.chance import constant_guess
from probe.cli import main
from probe.explorer import PAGES as EXPLORER_PAGES
from probe.explorer import server as app_command
from probe.tasks import get

PAGES = tuple(EXPLORER_PAGES)
NOT_ON_TASK_RUNS = {"pretraining": "probe pretrain", "reproduction": "probe reproduce"}  # code runs, reports
# pages that compute only when their button is pressed, and what they say until then
ASKED = {
    "compare": "**Compare** collects both models' attention",
    "distances": "**Measure** collects every head's attention",
    "positions": "**Measure** fits the position probes",
    "extrapolation": "**Measure** evaluates each run",
}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_on_checkpoints(page, checkpoints, monkeypatch):
    at = run_page(page, checkpoints, monkeypatch)
    if page in ASKED:  # nothing is computed until the page's button is pressed
        assert charts(at) == 0 and ASKED[page] in texts(at.info)
        at.button[0].click().run()
        assert not at.exception, [e.value for e in at.exception]
    if page in NOT_ON_TASK_RUNS:  # nothing of theirs among task runs: they say which command makes it
        assert charts(at) == 0 and NOT_ON_TASK_RUNS[page] in texts(at.info)
        return
    assert charts(at) >= 1
    if page != "theorems":  # a broken folder is named on every page that reads checkpoints; the rest works
        assert "Broken checkpoint entry" in texts(at.error)
        assert "alibi" in texts(at.error) and "ape" in texts(at.error)
    if page == "models":
        assert len(at.dataframe) == 1
        assert "probe eval" in texts(at.info)  # nope seed 1 has no eval.json yet
    if page == "compare":  # NoPE vs T5 by default, NoPE' as the baseline
        assert at.selectbox(key="compare-a").value.endswith("nope/seed0")
        assert at.selectbox(key="compare-b").value.endswith("t5/seed0")
        assert charts(at) == 1 + 2  # per-layer figure, head matrices of B and of the baseline
    if page in (
        "distances",
        "positions",
    ):  # the corrupt rotary run is left out, with an error naming it; the rest works
        assert "Left out" in texts(at.error) and "rotary" in texts(at.error)
    if page == "positions":  # NoPE and T5 (seed 0) measured, one summary row each
        assert list(at.dataframe[0].value["model"]) == ["NoPE", "T5's Relative Bias"]
    if page == "theorems":
        assert "Every claim holds" in texts(at.success)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_without_checkpoints(page, tmp_path, monkeypatch):
    at = run_page(page, tmp_path, monkeypatch)
    if page == "theorems":
        assert charts(at) >= 1 and "Every claim holds" in texts(at.success)
    else:
        assert NOT_ON_TASK_RUNS.get(page, "probe train") in texts(at.info) and charts(at) == 0


def test_models_page_evaluates_runs_that_have_no_eval_json(checkpoints, tmp_path, monkeypatch):
    for pe, seed in (("nope", 1), ("rotary", 0)):  # a copy: the other tests keep their runs unevaluated
        shutil.copytree(checkpoints / FOLDER / pe / f"seed{seed}", tmp_path / FOLDER / pe / f"seed{seed}")
    at = run_page("models", tmp_path, monkeypatch)
    assert charts(at) == 0
    at.button(key=f"evaluate-{FOLDER}").click().run()
    assert not at.exception and "Cannot evaluate" in texts(at.error) and "rotary" in texts(at.error)
    assert (tmp_path / FOLDER / "nope" / "seed1" / "eval.json").is_file()
    at.run()
    assert not at.exception and charts(at) == 1


def test_models_page_decodes_a_runs_predictions_beside_the_gold(checkpoints, monkeypatch):
    """The page's table is what ``probe.show_predictions`` gives (with its scoring); a corrupt run is one line."""
    from probe.analysis.predictions import show_predictions
    from probe.runs.folders import find_runs

    at = run_page("models", checkpoints, monkeypatch)
    nope = checkpoints / FOLDER / "nope" / "seed0"
    at.selectbox(key=f"show-run-{FOLDER}").set_value(str(nope))
    at.number_input(key=f"show-n-{FOLDER}").set_value(1)
    at.button(key=f"show-{FOLDER}").click().run()
    assert not at.exception
    shown = at.dataframe[-1].value
    (run,) = [r for r in find_runs(checkpoints, "reverse", TASK_OPTIONS)[0] if r.path == nope]
    expected = show_predictions(run, per_length=1)
    assert list(shown["length"]) == [row.length for row in expected] == sorted({row.length for row in expected})
    assert list(shown["prediction"]) == [row.prediction for row in expected]
    assert list(shown["correct"]) == [row.correct for row in expected]
    assert "wrong_step" not in shown.columns  # reversal writes no scratchpad
    at.selectbox(key=f"show-run-{FOLDER}").set_value(str(checkpoints / FOLDER / "rotary" / "seed0"))
    at.button(key=f"show-{FOLDER}").click().run()
    assert not at.exception and "rotary" in texts(at.error)


def test_attention_reports_a_corrupt_checkpoint_and_goes_on(checkpoints, monkeypatch):
    at = run_page("attention", checkpoints, monkeypatch)
    at.selectbox(key="attention-run").set_value(str(checkpoints / FOLDER / "rotary" / "seed0")).run()
    assert not at.exception and "Cannot open" in texts(at.error) and charts(at) == 0
    at.selectbox(key="attention-run").set_value(str(checkpoints / FOLDER / "t5" / "seed0")).run()
    assert not at.exception and charts(at) == 2  # one figure per layer


def test_attention_on_an_exported_construction_takes_typed_examples(checkpoints, monkeypatch):
    at = run_page("attention", checkpoints, monkeypatch)
    at.selectbox(key="attention-run").set_value(str(checkpoints / "constructions" / "theorem")).run()
    assert not at.exception and at.radio(key="attention-mode").options == ["typed"]
    at.text_input(key="attention-input").input("w4 w5 w6")
    at.text_input(key="attention-output").input("w7").run()
    assert not at.exception and charts(at) == 2


def test_attention_typed_example_names_unknown_words(checkpoints, monkeypatch):
    at = run_page("attention", checkpoints, monkeypatch)
    at.radio(key="attention-mode").set_value("typed").run()
    at.text_input(key="attention-input").input("Reverse the following words: w1 florp w2 zzz .").run()
    assert not at.exception
    message = texts(at.error)
    assert "unknown word" in message and "'florp'" in message and "'zzz'" in message and "'w1'" not in message
    at.text_input(key="attention-input").input("Reverse the following words: w1 w2 .")
    at.text_input(key="attention-output").input("w2 w1").run()
    assert not at.exception and "unknown word" not in texts(at.error) and charts(at) == 2


def test_compare_head_matrix_follows_layer_and_bucket(checkpoints, monkeypatch):
    at = run_page("compare", checkpoints, monkeypatch)
    at.button[0].click().run()
    at.selectbox(key="layer").set_value(1).run()
    longest = int(at.select_slider(key="bucket").options[-1].split()[0])  # options read "12 (unseen)"
    at.select_slider(key="bucket").set_value(longest).run()
    assert not at.exception and charts(at) == 3


CODE_OPTIONS = {"vocab_size": 300, "context": 16, "heldout": 0.25}  # + the corpus folder
CODE_MODEL = tiny_model(2, n_ctx=64)


@pytest.fixture(scope="module")
def code_checkpoints(tmp_path_factory) -> tuple[Path, Path, list[Path]]:
    """NoPE and ALiBi code models trained a few steps at T = 16 on a folder of small Python files (the
    corpus prepared beside them, as `probe pretrain` does): (root, task folder, run folders)."""
    import random

    from probe.corpus import CorpusSpec
    from probe.runs.folders import run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    corpus, rng = tmp_path_factory.mktemp("code"), random.Random(0)
    for i in range(24):  # 1 to 4 lines of about 25 tokens: files in buckets below 2.5 T = 40 tokens and above
        lines = [
            f"def f{i}_{j}(x, y={j}):\n    return x * {rng.randint(0, 99)} + y  # {'ab' * j}\n"
            for j in range(1 + i % 4)
        ]
        (corpus / f"module_{i}.py").write_text("".join(lines))
    options = {"corpus": str(corpus), **CODE_OPTIONS}
    root, paths = tmp_path_factory.mktemp("code-checkpoints"), []
    for pe in ("nope", "alibi"):
        config = TrainConfig(
            task="code",
            pe=pe,
            steps=6,
            batch_size=4,
            log_every=3,
            eval_examples=4,
            task_options=options,
            model=CODE_MODEL,
        )
        paths.append(
            train_run(
                config, run_dir(root, "code", pe, 0, CorpusSpec.from_options(options).given()), torch.device("cpu")
            ).path
        )
    return root, paths[0].parent.parent, paths


def figure_of(chart) -> dict:
    return json.loads(chart.proto.spec)


def perplexity_table(at) -> dict[str, dict[int, float]]:
    """The page's table: model -> {context size: perplexity} (empty cells left out)."""
    table = at.dataframe[0].value
    return {
        row["model"]: {
            int(column.split()[0]): row[column]
            for column in table.columns[1:]
            if row[column] is not None and row[column] == row[column]
        }
        for _, row in table.iterrows()
    }


def expected_cells(report: dict, bucket: str = "all") -> dict[str, dict[int, float]]:
    cells: dict[str, dict[int, float]] = {}
    for row in report["rows"]:
        if row["bucket"] == bucket:
            cells.setdefault(row["run"], {})[row["context"]] = row["perplexity"]
    return cells


def test_pretraining_page_shows_a_saved_report_and_attention_on_a_held_out_file(
    code_checkpoints, tmp_path, monkeypatch
):
    from probe.analysis.perplexity import perplexity_report
    from probe.atomic import write_json_and_csv
    from probe.corpus.prepared import corpus_of_run, load_corpus
    from probe.models import load_checkpoint

    source, folder, paths = code_checkpoints
    root = tmp_path / "ck"
    shutil.copytree(source, root)  # the other tests see no report
    folder, paths = root / folder.name, [root / p.relative_to(source) for p in paths]
    report = perplexity_report(paths, max_files=20)
    write_json_and_csv(folder / "perplexity", "perplexity", report.to_json(), report.to_rows())  # as the command does
    (folder / "perplexity+scaling=yarn").mkdir()
    (folder / "perplexity+scaling=yarn" / "perplexity.json").write_text("{not json")
    own = perplexity_report(paths, max_files=20, windows="own").to_json()
    write_json_and_csv(folder / "perplexity+own-windows", "perplexity", own, own["rows"])
    saved = report.to_json()
    assert expected_cells(saved)  # the tiny corpus has files of 2.5 T = 40 tokens, so the "all" row is there

    at = run_page("pretraining", root, monkeypatch)
    assert at.selectbox(key="pretraining-report").options == [
        f"{folder.name}/perplexity",
        f"{folder.name}/perplexity+own-windows",
        f"{folder.name}/perplexity+scaling=yarn",
        "measure here",
    ]
    assert "tokens of each scored, read with the file's last c tokens;" in texts(at.caption)
    assert charts(at) == 2  # the perplexity curves, then one head's attention
    curves, attention = (figure_of(c) for c in at.get("plotly_chart"))
    assert {trace["name"] for trace in curves["data"]} == {"nope", "alibi"}
    table = perplexity_table(at)
    assert list(table) == ["nope", "alibi"]
    expected = expected_cells(saved)
    assert table.keys() == expected.keys() and all(table[m] == pytest.approx(expected[m]) for m in expected)

    # the attention of NoPE on the first held-out file of at least 2 T tokens, its last 2 T tokens, layer 0 head 0
    corpus = load_corpus(corpus_of_run(paths[0]))
    index = next(i for i, n in enumerate(corpus.heldout_lengths().tolist()) if n >= 32)
    assert at.selectbox(key="pretraining-file").value == index and at.selectbox(key="pretraining-context").value == 32
    model = load_checkpoint(paths[0])
    ids = corpus.heldout_file(index)[-32:]
    _, cache = model.run_with_cache(ids[None])
    heatmap = attention["data"][0]
    torch.testing.assert_close(torch.tensor(heatmap["z"]), cache["pattern", 0][0, 0], atol=1e-6, rtol=0)
    assert len(heatmap["z"]) == 32 and len(attention["layout"]["xaxis"]["ticktext"]) == 32
    assert "".join(attention["layout"]["xaxis"]["ticktext"]).replace("↵", "\n") == corpus.tokenizer.decode(ids.tolist())

    at.selectbox(key="pretraining-layer").set_value(1)
    at.selectbox(key="pretraining-head").set_value(1)
    at.selectbox(key="pretraining-context").set_value(16).run()
    assert not at.exception
    attention = figure_of(at.get("plotly_chart")[1])
    _, short = model.run_with_cache(ids[None, 16:])  # the file's last 16 tokens, read on their own
    torch.testing.assert_close(torch.tensor(attention["data"][0]["z"]), short["pattern", 1][0, 1], atol=1e-6, rtol=0)
    assert attention["layout"]["annotations"][0]["text"] == "head 1"

    bucket = next(r["bucket"] for r in saved["rows"] if r["bucket"] != "all")
    at.selectbox(key="pretraining-table").set_value(bucket).run()
    assert not at.exception and list(perplexity_table(at)) == ["nope", "alibi"]
    at.selectbox(key="pretraining-report").set_value(str(folder / "perplexity+own-windows")).run()
    assert not at.exception and "each read from a window of its own (the model's BOS" in texts(at.caption)
    expected = expected_cells(own, bucket)  # the bucket chosen above stays chosen: some sizes not read
    table = perplexity_table(at)
    assert table.keys() == expected.keys() and all(table[m] == pytest.approx(expected[m]) for m in expected)
    at.selectbox(key="pretraining-report").set_value(str(folder / "perplexity+scaling=yarn")).run()
    assert not at.exception and "not a `probe perplexity` report" in texts(at.error) and charts(at) == 1


def test_pretraining_page_measures_perplexity_when_no_report_exists(code_checkpoints, monkeypatch):
    root, _, paths = code_checkpoints
    at = run_page("pretraining", root, monkeypatch)
    assert at.selectbox(key="pretraining-report").options == ["measure here"]
    assert at.multiselect(key="pretraining-runs").value == [str(p) for p in paths]
    assert charts(at) == 2 and list(perplexity_table(at)) == ["nope", "alibi"]
    assert f"probe perplexity {paths[0]} {paths[1]} --max-files 50" in texts(at.caption)
    at.multiselect(key="pretraining-runs").unselect(str(paths[0]))
    at.button[0].click().run()  # the form's Measure
    assert not at.exception and list(perplexity_table(at)) == ["alibi"]


def test_pretraining_page_without_code_runs_says_what_to_run(tmp_path, monkeypatch):
    at = run_page("pretraining", tmp_path, monkeypatch)
    assert charts(at) == 0 and "probe pretrain" in texts(at.info) and "probe perplexity" in texts(at.info)


def test_probe_app_fails_in_one_line_without_the_explorer(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(app_command, "explorer_script", lambda: tmp_path / "explorer" / "explorer.py")
    assert main(["app", "--checkpoints", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "explorer is missing" in error and "explorer.py" in error


def test_probe_app_finds_the_explorer_of_this_checkout():
    assert app_command.explorer_script() == EXPLORER and EXPLORER.is_file()


def test_probe_app_rejects_a_bad_port(tmp_path, capsys):

    assert main(["app", "--port", "70000", "--checkpoints", str(tmp_path)]) == 2
    assert "--port" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["app", "--port", str(port), "--checkpoints", str(tmp_path)]) == 2
        assert "in use" in capsys.readouterr().err


def test_probe_app_starts_streamlit_on_localhost(tmp_path, monkeypatch):
    started = {}

    class Process:
        def __init__(self, command, env, start_new_session):
            started.update(command=command, env=env, start_new_session=start_new_session)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr("subprocess.Popen", Process)
    assert main(["app", "--port", "8765", "--checkpoints", str(tmp_path)]) == 0
    command = started["command"]
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4] == str(EXPLORER)
    settings = dict(zip(command[5::2], command[6::2]))
    assert settings == {
        "--server.address": "127.0.0.1",
        "--server.port": "8765",
        "--server.headless": "true",
        "--browser.gatherUsageStats": "false",
        "--client.toolbarMode": "minimal",
    }
    assert started["env"]["PROBE_CHECKPOINTS"] == str(tmp_path.resolve())
    assert started["start_new_session"]  # signals reach the server only through `probe app`


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_probe_app_stops_with_its_server_on_a_signal(signum, tmp_path):
    log = tmp_path / "probe-app.log"
    with running_app([sys.executable, "-m", "probe.cli"], tmp_path, log) as (process, url, server):
        assert_stops(process, url, server, signum, log)


def test_probe_app_under_nohup_outlives_a_hangup(tmp_path):
    log = tmp_path / "probe-app.log"
    with running_app(["nohup", sys.executable, "-m", "probe.cli"], tmp_path, log) as (process, url, server):
        process.send_signal(signal.SIGHUP)
        time.sleep(4 * app_command.POLL)  # long enough for a forwarded signal to be sent
        assert process.poll() is None and all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in server)
        assert_stops(process, url, server, signal.SIGTERM, log)


def test_models_page_shows_the_sweep_report_of_a_manifest(checkpoints, tmp_path, monkeypatch):
    from probe.studies import sweep

    grid = {"name": "mine", "task": "reverse", "pe": ["nope", "t5"], "seed": [0, 1], "options": TASK_OPTIONS}
    runs = sweep.expand_grid(grid, tmp_path)
    sweep.Manifest(sweep.manifest_path(tmp_path, "mine"), "mine", runs).write()
    for pe, seed in (("nope", 0), ("t5", 0), ("nope", 1)):  # t5 seed 1 never ran; nope seed 1 has no eval.json
        shutil.copytree(checkpoints / FOLDER / pe / f"seed{seed}", tmp_path / FOLDER / pe / f"seed{seed}")
    (tmp_path / "sweep-broken.json").write_text("{not json")
    at = run_page("models", tmp_path, monkeypatch)
    assert at.selectbox(key="sweep").options == ["broken", "mine"]
    at.selectbox(key="sweep").set_value(tmp_path / "sweep-mine.json").run()
    assert not at.exception and "2 of 4 runs evaluated" in texts(at.markdown)
    evals = {pe: json.loads((tmp_path / FOLDER / pe / "seed0" / "eval.json").read_text()) for pe in ("nope", "t5")}
    assert len(at.dataframe) == 4  # the runs, then the sweep's aggregate, mean reciprocal ranks and mean ranks
    table = at.dataframe[1].value
    names = {"nope": "NoPE", "t5": "T5's Relative Bias"}
    assert list(table["PE"]) == list(names.values()) and list(table["seeds"]) == [1, 1]
    assert list(table["OOD accuracy"]) == [f"{100 * evals[pe]['ood_accuracy']:.1f}%" for pe in ("nope", "t5")]
    ood = {pe: evals[pe]["ood_accuracy"] for pe in evals}  # one task: the better OOD accuracy ranks 1, a tie 1.5
    expected = {names[pe]: 1.5 if ood["nope"] == ood["t5"] else 1 + (ood[pe] < max(ood.values())) for pe in ood}
    ranks = at.dataframe[3].value
    assert {pe: float(ranks[pe].iloc[0]) for pe in expected} == expected
    # one query (the task at seed 0): the better PE scores 1, the other 1/2; a tie goes against NoPE
    first = "t5" if ood["t5"] >= ood["nope"] else "nope"
    reciprocal = at.dataframe[2].value
    assert {pe: float(reciprocal[names[pe]].iloc[0]) for pe in names} == {
        pe: 1.0 if pe == first else 0.5 for pe in names
    }
    assert charts(at) == 1 + 3  # the Models chart, then the sweep's accuracy by length, MRR and mean ranks
    assert "2 run(s) of this sweep have no eval.json" in texts(at.info)
    at.selectbox(key="sweep").set_value(tmp_path / "sweep-broken.json").run()
    assert not at.exception and "not a sweep manifest" in texts(at.error)


def test_extrapolation_page_shows_what_probe_extrapolate_saved_without_computing(checkpoints, tmp_path, monkeypatch):
    """The command's extrapolation.json is shown as it is; a run re-published since is not; nothing is measured."""
    import os

    import probe.extrapolation.extrapolate

    root = tmp_path / "ck"
    shutil.copytree(checkpoints, root)
    folder = root / FOLDER
    runs = [folder / "nope" / "seed0", folder / "t5" / "seed0"]
    assert main(["extrapolate", *map(str, runs), "--family", "temperature", "--n-valid", "2", "--n-iid", "4"]) == 0
    saved = folder / "extrapolation" / "extrapolation.json"
    later = saved.stat().st_mtime + 60
    os.utime(runs[1] / "model.safetensors", (later, later))  # T5 re-published after the report was written

    def refuse(*args, **kwargs):
        raise AssertionError("the page computed instead of showing the saved report")

    monkeypatch.setattr(probe.extrapolation.extrapolate, "extrapolate", refuse)
    at = run_page("extrapolation", root, monkeypatch)
    assert "Saved by `probe extrapolate`" in texts(at.caption)
    assert charts(at) == 1 and [m.value for m in at.markdown if m.value.startswith("**NoPE**")]
    assert not [m.value for m in at.markdown if m.value.startswith("**T5")]


def test_a_long_computation_stops_once_its_session_has_closed(monkeypatch):
    """The explorer's progress callback raises at the next step when the session is gone, and not before."""
    from types import SimpleNamespace

    from streamlit.runtime import Runtime

    from probe.explorer import shared

    active = {"s1": True}
    monkeypatch.setattr(
        "streamlit.runtime.scriptrunner.get_script_run_ctx", lambda *a, **k: SimpleNamespace(session_id="s1")
    )
    monkeypatch.setattr(Runtime, "exists", staticmethod(lambda: True))
    monkeypatch.setattr(Runtime, "instance", staticmethod(lambda: SimpleNamespace(is_active_session=active.get)))
    check = shared.stop_when_closed()
    check("nope: untouched", 0, 5)
    active["s1"] = False
    with pytest.raises(shared.SessionClosed):
        check("nope: temperature", 1, 5)


# the library call each page's cached measure makes: (module, name)
ENTRY_POINTS = {
    "compare": ("probe.analysis", "compare_report"),
    "distances": ("probe.analysis", "attended_distance_report"),
    "positions": ("probe.analysis.positions", "positions_report"),
}


@pytest.mark.parametrize("page", ENTRY_POINTS)
def test_analysis_pages_compute_only_when_their_button_is_pressed(page, checkpoints, monkeypatch):
    """Opening the page computes nothing and says what the button will do; pressing it computes once per model,
    and a rerun from another widget keeps the result."""
    import importlib

    import streamlit as st

    module, name = ENTRY_POINTS[page]
    real, calls = getattr(importlib.import_module(module), name), []

    def counted(*args, **kwargs):  # counts what was measured (a corrupt run fails anew on every rerun)
        report = real(*args, **kwargs)
        calls.append(args)
        return report

    monkeypatch.setattr(f"{module}.{name}", counted)
    st.cache_data.clear()  # what earlier tests measured is not taken for this page's work
    at = run_page(page, checkpoints, monkeypatch)
    assert not calls and charts(at) == 0 and ASKED[page] in texts(at.info)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert calls and charts(at) >= 1 and f"probe {page}" in texts(at.caption)
    asked = len(calls)
    at.run()  # a rerun (another widget): the result stays, computed once
    assert charts(at) >= 1 and len(calls) == asked


SAVED_BY = {  # the command each page shows the saved results of, with quick settings
    "compare": ["compare", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
    "distances": ["distances", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
    "positions": ["positions", "nope/seed0", "t5/seed0", "--n-per-bucket", "2"],
}


@pytest.mark.parametrize("page", SAVED_BY)
def test_analysis_pages_show_what_their_command_saved_without_computing(page, checkpoints, tmp_path, monkeypatch):
    """The command's JSON beside the runs is drawn as it is, naming the command; a run re-published since is
    left out (Distances, Positions) or not shown as saved (Compare); nothing is measured."""
    import importlib
    import os

    root = tmp_path / "ck"
    shutil.copytree(checkpoints, root)
    folder = root / FOLDER
    command, *runs, option, value = SAVED_BY[page]
    assert main([command, *(str(folder / run) for run in runs), option, value]) == 0

    def refuse(*args, **kwargs):
        raise AssertionError("the page computed instead of showing the saved report")

    module, name = ENTRY_POINTS[page]
    monkeypatch.setattr(importlib.import_module(module), name, refuse)
    at = run_page(page, root, monkeypatch)
    assert_saved_report_shown(at, page)
    saved = next((folder / page).glob("*.json")).stat().st_mtime
    later = saved + 60
    os.utime(folder / "t5" / "seed0" / "model.safetensors", (later, later))  # T5 re-published since
    at = run_page(page, root, monkeypatch)
    if page == "compare":
        assert charts(at) == 0 and ASKED[page] in texts(at.info)
    else:
        column = "run" if page == "distances" else "model"
        assert list(at.dataframe[0].value[column]) == ["NoPE"]


def test_models_page_names_the_floor_a_constant_guess_sets_on_parity(tmp_path, monkeypatch):
    """A parity run, trained and evaluated on 60 test examples: its tab says what a constant guess scores on
    those examples' unseen lengths (parity's answer is Yes or No; the number tests/test_chance.py checks)."""
    parity = ["--task", "parity", "-o", "train_length=4"]
    model = [arg for key, value in tiny_model(1).items() for arg in ("-m", f"{key}={value}")]
    argv = ["train", *parity, "--pe", "nope", "--steps", "2", *model, "--no-eval", "--checkpoints", str(tmp_path)]
    assert main(argv) == 0
    assert main(["eval", *parity, "--checkpoints", str(tmp_path), "--n", "60", "--valid", "10"]) == 0

    guess = constant_guess(get("parity", train_length=4), 60)
    at = run_page("models", tmp_path, monkeypatch)
    assert not at.exception
    assert f"A constant guess (the commonest training answer) scores {100 * guess:.1f}%" in texts(at.caption)


def test_reproduction_page_shows_the_section6_report_with_its_figures(tmp_path, monkeypatch):
    """A `probe reproduce --scale section6` report (of the committed summaries, as a sitting writes it): the page
    shows its Section 6 block, the claims among it, and draws its figures beside the per-scenario ones."""
    from probe.studies.reproduce import ladder, plan, summaries_report
    from probe.studies.reproduce_report import figures, write_report
    from probe.studies.section6 import study_report

    summaries = Path(__file__).resolve().parents[1] / "bench" / "results" / "section6"
    runs = plan("section6", tmp_path / "runs", seeds=2)
    report = summaries_report(runs, summaries, scale="section6", seeds=2, rule=ladder("section6"))
    report["section6"] = study_report(summaries, [0, 1])
    write_report(report, tmp_path / "runs" / "report")
    at = run_page("reproduction", tmp_path / "runs", monkeypatch)
    assert "Scratchpad helps solely on addition" in texts(at.markdown)
    assert charts(at) == len(figures(report)) and {"section6_formats", "section6_attended"} <= set(figures(report))


def _pick_runs_script(root: str, from_seed: dict) -> None:
    from probe.explorer import shared
    from probe.runs.folders import find_runs

    runs, _ = find_runs(root)
    shared.pick_runs(
        {str(r.path): r for r in runs if shared.has_task(r) and r.seed >= from_seed.get(r.pe, 99)}, key="runs"
    )


def test_pick_runs_starts_with_each_pes_lowest_seed(checkpoints):
    """One run a PE to begin with, its lowest seed, whether or not that is seed 0 (the pages drew seed 0 alone, or
    compared by PE kind, not by its name with options)."""
    from streamlit.testing.v1 import AppTest

    def chosen(from_seed: dict) -> list[str]:
        at = AppTest.from_function(_pick_runs_script, args=(str(checkpoints), from_seed), default_timeout=TIMEOUT)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return sorted(_below(checkpoints, path) for path in at.multiselect(key="runs").value)

    assert chosen({"nope": 0, "t5": 0}) == ["nope/seed0", "t5/seed0"]
    assert chosen({"nope": 1, "t5": 0}) == ["nope/seed1", "t5/seed0"]  # no seed 0: NoPE is still drawn


@pytest.mark.parametrize("page", ["distances", "positions", "extrapolation"])
def test_analysis_pages_start_with_one_run_a_pe(page, checkpoints, monkeypatch):
    at = run_page(page, checkpoints, monkeypatch)
    chosen = sorted(_below(checkpoints, path) for path in at.multiselect(key=f"{page}-runs").value)
    assert chosen == ["nope/seed0", "rotary/seed0", "t5/seed0"]  # NoPE's seed 1 is there too


def _below(root: Path, path: str) -> str:
    """``PE/seedN`` of a run's path under ``root`` (its task folder left out)."""
    return Path(path).relative_to(root).as_posix().split("/", 1)[1]


@pytest.mark.parametrize("page", ["distances", "positions", "extrapolation"])
def test_analysis_pages_with_no_run_picked_say_what_to_pick(page, checkpoints, monkeypatch):
    at = run_page(page, checkpoints, monkeypatch)
    at.multiselect(key=f"{page}-runs").set_value([])
    at.button[0].click().run()  # the form's Measure: its widgets take their values when it is sent
    assert not at.exception and "Pick at least one run." in texts(at.info)  # task runs: no hf: model to type
    assert charts(at) == 0


def test_corpus_flags_repeat_a_code_folders_corpus_options_in_the_commands_order():
    from probe.explorer.shared import corpus_flags

    options = {"context": 64, "lr": 0.001, "corpus": "stdlib", "heldout": 0.1}
    assert corpus_flags(options) == " -o corpus=stdlib -o heldout=0.1 -o context=64"
    assert corpus_flags({}) == ""
