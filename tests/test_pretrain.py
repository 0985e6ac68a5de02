"""The pretraining study (issue #15): the corpus split and tokenizer, `probe pretrain`, `probe perplexity`."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from helpers import tiny_model

from probe.analysis.perplexity import PAPER_CONTEXTS, ScoringPlan, own_window_nll, perplexity_report, scored_nll
from probe.cli import main
from probe.corpus import CorpusSpec, SourceFile, find_sources, prepare_corpus, split_files
from probe.corpus.files import split_fraction
from probe.corpus.prepared import MANIFEST, corpus_of_run, load_corpus
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.runs.folders import run_dir
from probe.subjects.settings import ReadSettings
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig, learning_rate

CPU = torch.device("cpu")
MODEL = tiny_model(1, n_ctx=64)


def _write_corpus(folder, n_files: int = 40, seed: int = 0):
    """Small Python-like files, half of one line and half of several, some non-ASCII, plus files the
    corpus must skip."""
    rng = random.Random(seed)
    names = ["alpha", "beta", "gamma", "delta", "ünïcode", "value", "total", "count"]
    for i in range(n_files):
        lines = [
            f"def f{i}_{j}({rng.choice(names)}, x={j}):\n    return {rng.choice(names)} + x * {j}  # ok é\n"
            for j in range(1 if i % 2 else rng.randint(2, 12))
        ]
        path = folder / f"pkg{i % 3}" / f"module_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines), encoding="utf-8")
    (folder / "binary.bin").write_bytes(b"\x00\x01\x02")
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / "empty.py").write_text("")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return folder


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory):
    return _write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def code_runs(tmp_path_factory, corpus_folder):
    """NoPE and Rotary trained a few steps on the small corpus at context 16 (n_ctx 64 >= 2.5 x 16)."""
    root = tmp_path_factory.mktemp("runs")
    options = {"corpus": str(corpus_folder), "vocab_size": 300, "context": 16, "heldout": 0.25}
    paths = []
    for pe in ("nope", "rotary"):
        config = TrainConfig(
            task="code", pe=pe, steps=30, batch_size=8, log_every=10, eval_examples=8, task_options=options, model=MODEL
        )
        paths.append(
            train_run(config, run_dir(root, "code", pe, 0, CorpusSpec.from_options(options).given()), CPU).path
        )
    return root, paths


# -- the corpus ----------------------------------------------------------------------------------
def test_sources_skip_binary_undecodable_empty_and_hidden_files(corpus_folder):
    files, skipped = find_sources(str(corpus_folder))
    names = [f.name for f in files]
    assert len(files) == 40 and skipped == 3  # binary.bin, latin1.txt, empty.py; .git is not walked
    # relative: moving it keeps the split
    assert names == sorted(names) and all(name.startswith("pkg") for name in names)


def test_split_is_by_file_deterministic_and_independent_of_the_other_files(corpus_folder):
    files, _ = find_sources(str(corpus_folder))
    train, heldout = split_files(files, 0.25)
    assert {f.name for f in train}.isdisjoint({f.name for f in heldout}) and len(train) + len(heldout) == len(files)
    assert {f.name for f in split_files(list(reversed(files)), 0.25)[1]} == {f.name for f in heldout}
    import hashlib

    for f in files:  # the rule, computed here from its definition: SHA-256 of the salted name
        digest = hashlib.sha256(f"probe-corpus-split:{f.name}".encode()).digest()
        assert (f in heldout) == (int.from_bytes(digest[:8], "big") / 2**64 < 0.25)
    fewer = [f for f in files if f not in train[:5]]  # removing training files moves no file across
    assert split_files(fewer, 0.25)[1] == heldout


def test_a_handful_of_files_still_holds_one_out():
    files = [SourceFile(f"x/{i}.py", "pass\n") for i in range(3)]
    train, heldout = split_files(files, 0.001)
    assert len(heldout) == 1 and heldout[0] == min(files, key=lambda f: split_fraction(f.name)) and len(train) == 2


def test_tokenizer_round_trips_held_out_files_byte_exactly(tmp_path, corpus_folder):
    spec = CorpusSpec(corpus=str(corpus_folder), vocab_size=300, context=16, heldout=0.25)
    corpus = prepare_corpus(spec, tmp_path / "corpus")
    files = {f.name: f.text for f in find_sources(str(corpus_folder))[0]}
    assert corpus.heldout_names
    for index, name in enumerate(corpus.heldout_names):
        ids = corpus.heldout_file(index).tolist()
        assert corpus.tokenizer.decode(ids).encode("utf-8") == files[name].encode("utf-8")
    text = "Ω≈ç√ tabs\tand\r\nnewlines  \n\n"  # text the BPE never saw
    assert corpus.tokenizer.decode(corpus.tokenizer.encode(text)) == text
    sizes = corpus.summary()
    assert sizes["heldout_tokens"] == int(corpus.heldout_lengths().sum())
    assert sizes["train_tokens"] + sizes["train_files"] == corpus.train.numel()  # one end-of-file token per file
    assert sizes["train_bytes"] + sizes["heldout_bytes"] == sum(len(t.encode()) for t in files.values())


def test_training_windows_are_the_stream_cut_in_order(tmp_path, corpus_folder):
    corpus = prepare_corpus(CorpusSpec(corpus=str(corpus_folder), vocab_size=300, heldout=0.25), tmp_path / "c")
    windows = corpus.windows(16)
    n = corpus.train.numel() // 16
    assert windows.tokens.shape == (n, 16) and torch.equal(windows.tokens.flatten(), corpus.train[: n * 16].long())
    tokens, mask = windows.batch(torch.tensor([0, 3]))
    assert mask.shape == (2, 15) and mask.all()  # every next-token prediction is scored


def test_a_prepared_corpus_is_reused_and_a_different_spec_is_refused(tmp_path, corpus_folder):
    spec = CorpusSpec(corpus=str(corpus_folder), vocab_size=300, heldout=0.25)
    prepare_corpus(spec, tmp_path / "c")
    stamp = (tmp_path / "c" / MANIFEST).stat().st_mtime_ns
    prepare_corpus(CorpusSpec(corpus=str(corpus_folder), vocab_size=300, heldout=0.25, context=32), tmp_path / "c")
    assert (tmp_path / "c" / MANIFEST).stat().st_mtime_ns == stamp  # the context only cuts windows
    with pytest.raises(ProbeError, match="other settings"):
        prepare_corpus(CorpusSpec(corpus=str(corpus_folder), vocab_size=310, heldout=0.25), tmp_path / "c")


def test_cosine_schedule_is_the_half_cosine_after_warm_up():
    config = TrainConfig(task="code", steps=100, lr=2.0, warmup=0.1, schedule="cosine")
    assert learning_rate(4, config) == pytest.approx(1.0)
    for step in (10, 40, 99):
        assert learning_rate(step, config) == pytest.approx(1.0 + math.cos(math.pi * (step - 10) / 90))


# -- perplexity ----------------------------------------------------------------------------------
def test_protocol_scales_the_papers_columns_scored_tokens_and_buckets():
    assert ScoringPlan.scaled(1024) == ScoringPlan(1024, PAPER_CONTEXTS, 200, 250, 4500)
    small = ScoringPlan.scaled(128)
    assert small.contexts == (64, 80, 95, 110, 128, 150, 175, 200, 225, 256, 288, 320)
    assert (small.scored, small.bucket_width) == (25, 31)


@torch.no_grad()
def test_scored_nll_is_the_mean_cross_entropy_of_the_last_tokens(code_runs):
    _, (nope, _) = code_runs
    model = load_checkpoint(nope)
    generator = torch.Generator().manual_seed(0)
    files = [torch.randint(0, 300, (n,), generator=generator) for n in (40, 33, 57)]
    nll = scored_nll(model, files, context=32, scored=6, device=CPU)
    for f, row in zip(files, nll):
        window = f[-32:]
        log_probs = torch.log_softmax(model(window[None])[0].double(), -1)  # [32, vocab]
        expected = [-float(log_probs[p - 1, window[p]]) for p in range(26, 32)]  # predictions of the last 6
        assert row.tolist() == pytest.approx(expected, rel=1e-9)


def _authors_windows(ids: list[int], block: int, scored: int, bos: int) -> list[tuple[list[int], int]]:
    """(input, target) of each scored token as the authors' ``create_prediction_dataset`` builds them, written
    here from its index arithmetic: for j = -1, -2, ..., -scored, the slice [j - (block - 1), j + 1) of the
    file with BOS before it, only its last token scored; it stops at the first j whose slice starts before the
    file does."""
    out = []
    for j in range(-1, -scored - 1, -1):
        start, end = j - (block - 1), j + 1
        if start < -len(ids):
            break
        sample = [bos] + (ids[start:] if end == 0 else ids[start:end])
        out.append((sample[:-1], sample[-1]))
    return out


@torch.no_grad()
@pytest.mark.parametrize("bos", [0, None])
def test_own_windows_read_each_scored_token_as_the_authors_evaluation_does(code_runs, bos):
    _, (nope, _) = code_runs
    model = load_checkpoint(nope)
    generator = torch.Generator().manual_seed(1)
    files = [torch.randint(1, 300, (n,), generator=generator) for n in (40, 24, 21, 19)]
    context, scored = 20, 6
    nll = own_window_nll(model, files, context, scored, device=CPU, batch_size=5, bos=bos)  # [file, scored]
    assert nll.shape == (4, scored)
    for f, row in zip(files, nll):
        ids = f.tolist()
        if bos is None:  # no BOS: the `context` tokens before the scored one, where the file has them
            ends = [i for i in range(len(ids) - 1, len(ids) - 1 - scored, -1) if i >= context]
            windows = [(ids[i - context : i], ids[i]) for i in ends]
        else:
            windows = _authors_windows(ids, context, scored, bos)
        expected = [float("nan")] * scored
        for k, (window, target) in enumerate(windows):  # k-th from the end
            assert len(window) == context
            log_probs = torch.log_softmax(model(torch.tensor([window]))[0, -1].double(), -1)
            expected[scored - 1 - k] = -float(log_probs[target])
        assert row.tolist() == pytest.approx(expected, rel=1e-6, nan_ok=True)
    # the 40-token file has every window, the 19-token one none; the 21-token one 2 with BOS, 1 without
    assert nll[0].isfinite().all() and nll[3].isnan().all()
    assert nll[2].isfinite().sum() == (1 if bos is None else 2)


@torch.no_grad()
def test_report_is_the_mean_of_file_perplexities_over_each_bucket(code_runs):
    root, paths = code_runs
    report = perplexity_report(paths)
    protocol = report.protocol
    assert protocol.contexts == (8, 10, 12, 14, 16, 19, 22, 25, 28, 32, 36, 40) and protocol.scored == 3
    corpus = load_corpus(corpus_of_run(paths[0]))
    model = load_checkpoint(paths[0])
    rows = [r for r in report.to_rows() if r["run"] == "nope"]
    for row in rows:
        if row["bucket"] == "all":
            members = [i for i, n in enumerate(report.lengths.tolist()) if n >= 40]
        else:
            low, high = (int(x) for x in row["bucket"].strip("[)").split(", "))
            # a bucket reads only sizes all its files have
            assert high - low == protocol.bucket_width and row["context"] <= low
            members = [i for i, n in enumerate(report.lengths.tolist()) if low <= n < high]
        assert row["files"] == len(members)
        perplexities = []
        for i in members:  # exp(mean NLL of the last 3 tokens), read with the last `context` tokens, here by hand
            tokens = corpus.heldout_file(corpus.heldout_names.index(report.files[i]))
            window = tokens[-row["context"] :]
            log_probs = torch.log_softmax(model(window[None])[0].double(), -1)
            nll = [-float(log_probs[p - 1, window[p]]) for p in range(len(window) - 3, len(window))]
            perplexities.append(math.exp(sum(nll) / 3))
        # float32 logits of a batch of files against one file at a time: equal to float32 rounding
        assert row["perplexity"] == pytest.approx(sum(perplexities) / len(perplexities), rel=1e-6)
        assert row["low"] <= row["perplexity"] <= row["high"]
    assert any(r["bucket"] != "all" for r in rows)


@torch.no_grad()
def test_own_windows_report_scores_each_file_from_its_tokens_windows(code_runs, tmp_path):
    root, paths = code_runs
    report = perplexity_report(paths, max_files=5, windows="own", root=tmp_path)
    assert report.name == "perplexity+own-windows" and report.to_json()["protocol"]["windows"] == "own"
    assert "a window of its own" in report.to_markdown()
    corpus = load_corpus(corpus_of_run(paths[0]))
    model = load_checkpoint(paths[0])
    files = [corpus.heldout_file(corpus.heldout_names.index(name)) for name in report.files]
    plan = report.protocol
    for index, context in enumerate(plan.contexts):
        expected = own_window_nll(model, files, context, plan.scored, device=CPU).nanmean(1)  # [file]
        short = torch.tensor([len(f) < context for f in files])
        expected[short] = float("nan")
        assert torch.allclose(report.runs[0].nll[:, index], expected, rtol=1e-6, equal_nan=True)
    assert (report.runs[0].nll != perplexity_report(paths, max_files=5).runs[0].nll).any()
    with pytest.raises(ProbeError, match="unknown scoring windows 'sliding'"):
        perplexity_report(paths, windows="sliding")


def test_rope_scaling_applies_at_inference_to_rotary_runs_only(code_runs):
    _, paths = code_runs
    plain = perplexity_report(paths, max_files=4)
    scaled = perplexity_report(paths, ReadSettings(pe_options={"scaling": "linear", "factor": 2.0}), max_files=4)
    assert [r.label for r in scaled.runs] == ["nope", "rotary+factor=2+scaling=linear"]
    finite = ~plain.runs[1].nll.isnan()
    assert torch.equal(plain.runs[0].nll[finite], scaled.runs[0].nll[finite])  # NoPE has no such option
    yarn = perplexity_report(paths, ReadSettings(pe_options={"scaling": "yarn", "factor": 2.0}), max_files=4)
    assert yarn.runs[1].label == "rotary+factor=2+original_length=16+scaling=yarn"  # the training context
    assert not torch.allclose(plain.runs[1].nll[finite], scaled.runs[1].nll[finite])


# -- the commands --------------------------------------------------------------------------------
def test_pretrain_and_perplexity_commands_write_their_outputs(tmp_path, corpus_folder, capsys, monkeypatch):
    root = tmp_path / "ck"
    flags = ["--corpus", str(corpus_folder), "--context", "16", "--vocab-size", "300", "--heldout", "0.25"]
    model = [arg for key, value in MODEL.items() for arg in ("-m", f"{key}={value}")]
    assert (
        main(
            [
                "pretrain",
                *flags,
                "--steps",
                "12",
                "--batch-size",
                "4",
                "--jobs",
                "1",
                "--pe",
                "nope",
                "--pe",
                "alibi",
                *model,
                "--checkpoints",
                str(root),
                "--device",
                "cpu",
                "--json",
            ]
        )
        == 0
    )
    trained = json.loads(capsys.readouterr().out)
    assert [r["pe"] for r in trained] == ["nope", "alibi"] and all(r["heldout_perplexity"] > 1 for r in trained)
    folder = next(root.iterdir())
    assert folder.name.startswith(f"code+context=16+corpus={corpus_folder.name}-")
    assert (folder / "nope" / "seed0" / "tokenizer.json").is_file() and (folder / "corpus" / MANIFEST).is_file()
    assert main(["perplexity", *flags, "--checkpoints", str(root), "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in report["runs"]] == ["nope", "alibi"]
    for name in ("perplexity.json", "perplexity.csv", "perplexity.md", "perplexity.html"):
        assert (folder / "perplexity" / name).is_file()
    assert "| nope |" in (folder / "perplexity" / "perplexity.md").read_text()
    monkeypatch.setenv("COLUMNS", "100")  # twelve context sizes: the table folds, one block per model
    assert main(["perplexity", *flags, "--checkpoints", str(root), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100 and "…" not in "\n".join(lines)
    assert sum(line.strip().startswith("8 0.5x") for line in lines) == 2  # 0.5 T = 8 tokens, for each model


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no readable text files"),
        (
            lambda p: ((p / "bin").mkdir(), (p / "bin" / "a.dat").write_bytes(b"\0\1"))[0] or p / "bin",
            "no readable text files",
        ),
    ],
)
def test_bad_corpus_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, make, message):
    corpus = make(tmp_path)
    root = tmp_path / "ck"
    assert (
        main(["pretrain", "--corpus", str(corpus), "--checkpoints", str(root), "--steps", "1", "--device", "cpu"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not any(p.is_file() for p in root.rglob("*")) if root.exists() else True


def test_a_context_longer_than_the_model_allows_is_one_line(tmp_path, corpus_folder, capsys):
    flags = ["--corpus", str(corpus_folder), "--context", "16", "--vocab-size", "300", "--heldout", "0.25"]
    model = [arg for key, value in {**MODEL, "n_ctx": 32}.items() for arg in ("-m", f"{key}={value}")]
    root = tmp_path / "ck"
    assert (
        main(
            [
                "pretrain",
                *flags,
                "--steps",
                "4",
                "--batch-size",
                "4",
                "--jobs",
                "1",
                "--pe",
                "nope",
                *model,
                "--checkpoints",
                str(root),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["perplexity", *flags, "--checkpoints", str(root), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "accepts 32 tokens" in err[0] and "n_ctx=40" in err[0]
    assert not (next(root.iterdir()) / "perplexity").exists()


def test_a_training_context_longer_than_the_model_is_one_line(tmp_path, corpus_folder, capsys):
    assert (
        main(
            [
                "pretrain",
                "--corpus",
                str(corpus_folder),
                "--context",
                "64",
                "-m",
                "n_ctx=32",
                "--steps",
                "1",
                "--checkpoints",
                str(tmp_path / "ck"),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "context 64" in err[0] and "n_ctx=32" in err[0]
    assert not (tmp_path / "ck").exists()


def test_a_sweep_grid_of_code_runs_trains_them_as_pretrain_does(tmp_path, corpus_folder):
    from probe.studies.sweep import aggregate, expand_grid, prepare_corpora, run_one, run_state

    options = {"corpus": str(corpus_folder), "vocab_size": 300, "context": 16, "heldout": 0.25}
    grid = {
        "name": "t",
        "task": "code",
        "pe": ["nope", "alibi"],
        "seed": 0,
        "steps": 6,
        "batch_size": 4,
        "eval_examples": 4,
        "options": options,
        "model": MODEL,
    }
    runs = expand_grid(grid, tmp_path)
    pretrain_folder = run_dir(tmp_path, "code", "nope", 0, CorpusSpec.from_options(options).given())
    assert [r.path for r in runs][0] == pretrain_folder  # the folder `probe pretrain` would use
    prepare_corpora(runs)
    assert (corpus_of_run(runs[0].path) / MANIFEST).is_file()
    results = [run_one(r.to_dict(), "cpu", 1, evaluate=True) for r in runs]
    assert all(r["state"] == "done" and r["heldout_perplexity"] > 1 for r in results), results
    assert [run_state(r) for r in runs] == ["done", "done"]  # validated at training: no eval.json to wait for
    summary = aggregate({r.label: r.path for r in runs})
    assert summary["missing"] == [] and [p["pe"] for p in summary["pretrained"]] == ["nope", "alibi"]
    with pytest.raises(ProbeError, match="unknown option"):
        expand_grid({**grid, "options": {"vocab": 300}}, tmp_path)


def test_a_corpus_with_no_held_out_window_is_one_line_before_training(tmp_path, corpus_folder, capsys):
    """No held-out file as long as the training context: said before any step (it crashed at the first
    validation, in the attention layer, after the training)."""
    argv = ["pretrain", "--corpus", str(corpus_folder), "--context", "4096", "-m", "n_ctx=4096", "--steps", "1"]
    assert main([*argv, "--vocab-size", "300", "--checkpoints", str(tmp_path / "ck"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no held-out file of the corpus has 4096 tokens" in err[0]
