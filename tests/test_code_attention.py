"""`probe compare` / `probe distances` on pretrained code models: windows of held-out files at 1x and
2x the training context, on tiny code runs trained here on a corpus written here."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model

from probe.analysis import attended_distance_report, compare_runs
from probe.cli import main
from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import corpus_of_run, load_corpus
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.models.checkpoint import read_checkpoint_config
from probe.runs.folders import Run, run_dir
from probe.subjects import RunInfo, check_comparable, choose_windows, run_windows
from probe.subjects.settings import ReadSettings
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

T = 16  # training context
MODEL = tiny_model(2)
OPTIONS_ARGV = ["-o", "vocab_size=300", "-o", f"context={T}", "-o", "heldout=0.5"]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def code(tmp_path_factory, code_corpus):
    """Three runs on the shared code corpus (about half its files held out, by name): NoPE and Rotary with
    room for 2x the context, ALiBi with n_ctx 24 (< 2T)."""
    base, source = tmp_path_factory.mktemp("code"), code_corpus
    options = {"corpus": str(source), "vocab_size": 300, "context": T, "heldout": 0.5}
    root = base / "checkpoints"
    paths = {}
    for pe, n_ctx in (("nope", 64), ("rotary", 64), ("alibi", 24)):
        config = TrainConfig(
            task="code",
            pe=pe,
            steps=3,
            batch_size=4,
            eval_examples=2,
            task_options=options,
            model={**MODEL, "n_ctx": n_ctx},
        )
        paths[pe] = run_dir(root, "code", pe, 0, options)
        train_run(config, paths[pe], CPU)
    corpus = load_corpus(corpus_of_run(paths["nope"]))
    return SimpleNamespace(
        source=source,
        root=root,
        paths=paths,
        corpus=corpus,
        argv=["--task", "code", "-o", f"corpus={source}", *OPTIONS_ARGV, "--checkpoints", str(root)],
    )


def heldout_lengths(corpus) -> dict[str, int]:
    return dict(zip(corpus.heldout_names, corpus.heldout_lengths().tolist()))


def test_windows_are_the_last_tokens_of_long_enough_heldout_files(code):
    lengths = heldout_lengths(code.corpus)
    assert min(lengths.values()) < T and any(T <= n < 2 * T for n in lengths.values())  # the filter has work
    assert sum(n >= 2 * T for n in lengths.values()) > 3
    tokenizer = CodeTokenizer.from_json((code.paths["nope"] / "tokenizer.json").read_text())
    windows = choose_windows(code.corpus, T, n_per_bucket=3, seed=0)
    assert [(w.context, w.seen, w.label) for w in windows] == [(T, True, "1x"), (2 * T, False, "2x")]
    for w in windows:
        assert w.tokens.shape == (3, w.context) and w.tokens.dtype == torch.long and len(set(w.files)) == 3
        for name, row in zip(w.files, w.tokens):
            assert lengths[name] >= w.context
            ids = tokenizer.encode((code.source / Path(name).name).read_text())  # the file, tokenized here
            assert len(ids) == lengths[name] and row.tolist() == ids[-w.context :]

    everything = choose_windows(code.corpus, T, n_per_bucket=100, seed=0)
    assert [sorted(w.files) for w in everything] == [
        sorted(n for n, k in lengths.items() if k >= c) for c in (T, 2 * T)
    ]
    again = choose_windows(code.corpus, T, n_per_bucket=3, seed=0)
    assert all(w.files == v.files and torch.equal(w.tokens, v.tokens) for w, v in zip(windows, again))
    others = [choose_windows(code.corpus, T, n_per_bucket=3, seed=s) for s in range(1, 6)]
    assert any(o[1].files != windows[1].files for o in others)
    assert [w.context for w in choose_windows(code.corpus, T, lengths="seen")] == [T]
    assert [w.context for w in choose_windows(code.corpus, T, lengths="unseen")] == [2 * T]
    assert [w.context for w in choose_windows(code.corpus, T, multiples=(2.5, 0.5, 1))] == [8, 16, 40]

    # both models of a comparison read the same windows: each run's corpus gives the same ones
    per_run = [
        run_windows(code.paths[pe], read_checkpoint_config(code.paths[pe]), n_per_bucket=3) for pe in ("nope", "rotary")
    ]
    for w, v in zip(*per_run):
        assert w.files == v.files and torch.equal(w.tokens, v.tokens)


def test_window_choice_rejects_what_it_cannot_read(code):
    with pytest.raises(ProbeError, match="no held-out file .* has 160 tokens"):
        choose_windows(code.corpus, T, multiples=(1, 10))
    with pytest.raises(ProbeError, match="at least 1"):
        choose_windows(code.corpus, T, n_per_bucket=0)
    with pytest.raises(ProbeError, match="positive"):
        choose_windows(code.corpus, T, multiples=(1, -2))


def test_runs_on_other_corpora_are_not_compared(code, tmp_path):
    path = code.paths["nope"]
    config = read_checkpoint_config(path)
    other = json.loads(json.dumps(config))
    other["corpus"]["fingerprint"] = "0" * 64

    def info(run, config):
        return RunInfo.of(Run(run, config))

    with pytest.raises(ProbeError, match="different corpora"):
        check_comparable(info(path, config), config, info(path, other), other)
    other = json.loads(json.dumps(config))
    other["task"]["options"]["context"] = 2 * T
    with pytest.raises(ProbeError, match="training context"):
        check_comparable(info(path, config), config, info(path, other), other)
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    (copy / "tokenizer.json").write_text((copy / "tokenizer.json").read_text().replace('"f"', '"g"', 1))
    with pytest.raises(ProbeError, match="tokenizers differ"):
        check_comparable(info(path, config), config, info(copy, config), config)


def _jsd(p: list[float], q: list[float]) -> float:
    """Jensen-Shannon divergence (natural log), by its definition."""
    total = 0.0
    for a, b in zip(p, q):
        m = (a + b) / 2
        total += (a * math.log(a / m) if a > 0 else 0.0) / 2 + (b * math.log(b / m) if b > 0 else 0.0) / 2
    return total


def _maps(model, tokens: torch.Tensor) -> list[list[list[list[float]]]]:
    """[layer][head][query][key] attention probabilities of one window, from run_with_cache."""
    _, cache = model.run_with_cache(tokens[None])
    return [cache[f"blocks.{layer}.attn.hook_pattern"][0].double().tolist() for layer in range(model.cfg.n_layers)]


def test_layer_distance_is_zero_to_itself_and_the_plain_loop_to_another_model(code):
    nope, rotary = code.paths["nope"], code.paths["rotary"]
    itself = compare_runs(nope, nope, ReadSettings(n_per_bucket=3))
    assert itself.values.shape == (6, 2) and float(itself.values.abs().max()) < 1e-12

    result = compare_runs(nope, rotary, ReadSettings(n_per_bucket=3))
    assert [(b.length, b.seen, b.n_examples) for b in result.buckets] == [(T, True, 3), (2 * T, False, 3)]
    assert result.task == "code" and result.skipped == 0 and result.example_lengths == [T] * 3 + [2 * T] * 3
    models = [load_checkpoint(nope), load_checkpoint(rotary)]
    expected = []
    for w in choose_windows(code.corpus, T, n_per_bucket=3, seed=0):
        for tokens in w.tokens:
            maps_a, maps_b = (_maps(model, tokens) for model in models)
            row = []
            for layer_a, layer_b in zip(maps_a, maps_b):
                row.append(
                    min(
                        sum(_jsd(P[t][: t + 1], Q[t][: t + 1]) for t in range(w.context)) / w.context
                        for P in layer_a
                        for Q in layer_b
                    )
                )
            expected.append(row)
    expected = torch.tensor(expected, dtype=torch.float64)  # [window, layer]
    assert float(expected.min()) > 1e-4  # two different models: a test that can fail
    torch.testing.assert_close(result.values, expected, rtol=0, atol=1e-9)
    torch.testing.assert_close(result.buckets[0].per_layer.mean, expected[:3].mean(0), rtol=0, atol=1e-9)
    torch.testing.assert_close(result.buckets[1].per_layer.mean, expected[3:].mean(0), rtol=0, atol=1e-9)
    torch.testing.assert_close(result.overall.average.mean, expected.mean(), rtol=0, atol=1e-9)

    short = compare_runs(
        nope, code.paths["alibi"], ReadSettings(n_per_bucket=3)
    )  # n_ctx 24 < 2T: the 2x windows left out
    assert [b.length for b in short.buckets] == [T] and short.skipped == 3


def test_attended_distances_match_a_hand_count_on_one_window(code):
    nope = code.paths["nope"]
    report = attended_distance_report([nope], ReadSettings(n_per_bucket=1, lengths="seen"), bins=4)
    (result,) = report.results
    assert result.run.label == "NoPE @1x" and result.lengths == [T] and result.n_examples == 1
    assert result.n_queries == T * 2 * 2  # every query of the window, 2 layers x 2 heads
    (w,) = choose_windows(code.corpus, T, n_per_bucket=1, lengths="seen")
    maps = _maps(load_checkpoint(nope), w.tokens[0])
    argmax, weighted = [], []  # (d̄, weight) with 1-based t = q + 1, n = k + 1: d̄ = (t - n + 1) / t
    for layer in maps:
        for head in layer:
            for q, row in enumerate(head):
                k = max(range(q + 1), key=lambda key: (row[key], -key))  # ties to the earliest key
                argmax.append(((q - k + 1) / (q + 1), 1.0))
                weighted += [((q - key + 1) / (q + 1), row[key]) for key in range(q + 1)]
    for name, pairs in (("argmax", argmax), ("attention", weighted)):
        stats = result.stats[name]
        total = sum(weight for _, weight in pairs)
        mean = sum(d * weight for d, weight in pairs) / total
        assert stats.mean == pytest.approx(mean, abs=1e-9)
        mass = [0.0] * 4
        for d, weight in pairs:
            mass[min(int(d * 4), 3)] += weight / total
        assert stats.histogram.mass.tolist() == pytest.approx(mass, abs=1e-9)
        m2, m3, m4 = (sum(weight * (d - mean) ** k for d, weight in pairs) / total for k in (2, 3, 4))
        assert stats.bimodality == pytest.approx((m3**2 + m2**3) / (m2 * m4), abs=1e-9)


def test_attended_distances_at_both_contexts_by_default(code):
    runs = [Run(code.paths[pe], read_checkpoint_config(code.paths[pe])) for pe in ("nope", "alibi")]
    report = attended_distance_report(runs, ReadSettings(n_per_bucket=2))
    assert report.lengths == "all"
    assert [(r.run.label, r.lengths, r.n_examples, r.skipped) for r in report.results] == [
        ("NoPE @1x", [T], 2, 0),
        ("NoPE @2x", [2 * T], 2, 0),
        ("ALiBi @1x", [T], 2, 2),
    ]  # ALiBi: n_ctx 24 < 2T
    assert report.results[1].n_queries == 2 * 2 * T * 2 * 2
    for result in report.results:
        for stats in result.stats.values():
            assert float(stats.weights.sum()) == pytest.approx(result.n_queries)


def test_cli_compare_and_distances_on_code_runs(code, tmp_path, capsys, no_png):
    out = tmp_path / "compare"
    assert main(["compare", "nope", "rotary", *code.argv, "--n-per-bucket", "2", "--json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    (comparison,) = data["comparisons"]
    assert data["task"] == "code" and comparison["b"]["pe"] == "rotary"
    assert [(b["length"], b["seen"], b["n_examples"]) for b in comparison["buckets"]] == [
        (T, True, 2),
        (2 * T, False, 2),
    ]
    assert {"nope_vs_rotary.json", "nope_vs_rotary.csv", "nope_vs_rotary_layers.html"} <= {
        p.name for p in out.iterdir()
    }

    assert main(["compare", "nope", "alibi", *code.argv, "--n-per-bucket", "2"]) == 0  # writes beside the runs
    printed = " ".join(capsys.readouterr().out.split())  # as one line, however rich wrapped it
    assert "2 example(s) longer than the models' context were left out" in printed
    assert "probe pretrain" in printed  # the hint for a NoPE' baseline
    assert (code.paths["nope"].parents[1] / "compare" / "nope_vs_alibi.json").is_file()

    out = tmp_path / "distances"
    assert (
        main(
            [
                "distances",
                *code.argv,
                "--pe",
                "nope",
                "--pe",
                "rotary",
                "--n-per-bucket",
                "2",
                "--json",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["lengths"] == "all"
    assert [r["run"]["label"] for r in data["runs"]] == ["NoPE @1x", "NoPE @2x", "Rotary @1x", "Rotary @2x"]
    assert (out / "attended_distance.csv").is_file() and (out / "attended_distance.html").is_file()
    assert main(["distances", *code.argv, "--pe", "nope", "--lengths", "unseen", "--json", "--out", str(out)]) == 0
    assert [r["run"]["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["NoPE @2x"]


def test_cli_without_the_corpus_is_one_line_and_exit_2(code, tmp_path, capsys):
    root = tmp_path / "checkpoints"
    for pe in ("nope", "rotary"):  # the runs, not the corpus beside them
        shutil.copytree(code.paths[pe], root / code.paths[pe].relative_to(code.root))
    argv = [*code.argv[:-1], str(root)]
    for command in (["compare", "nope", "rotary", *argv], ["distances", *argv]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "no prepared corpus" in err and len(err.strip().splitlines()) == 1, err
