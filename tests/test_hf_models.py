"""Models TransformerLens loads from Hugging Face files (``hf:FOLDER``, ``hf:ID``), analysed beside probe's
runs: tiny random GPT-2 (learned positions), GPT-NeoX (rotary), BLOOM (ALiBi) and Llama (rotary, a
tokenizer that adds BOS) built here with ``transformers``, on a corpus written here. The oracles are
``transformers`` itself: its eager attention probabilities and its logits."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import heads_scaled_by_hand, tiny_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BloomConfig,
    BloomForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from probe.analysis import attended_distance_report, compare_report
from probe.analysis.patterns import run_patterns
from probe.analysis.perplexity import perplexity_report
from probe.cli import main
from probe.errors import ProbeError
from probe.models.hf import load_external
from probe.models.hf_attention import logits_of
from probe.runs.folders import run_dir
from probe.subjects import choose_windows, paired_layers, resolve
from probe.subjects.readings import TextReading
from probe.subjects.settings import ReadSettings
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

T = 16  # the context every analysis here reads at (1x), and 2x
N_POSITIONS = 24  # GPT-2's learned table: it reads 1x, not 2x
OPTIONS = {"corpus": None, "heldout": 0.5, "context": T}  # corpus: the fixture's folder
WIDTH = dict(initializer_range=0.5)  # large weights: peaked attention, so the oracles can fail


def _bpe(texts: list[str], vocab_size: int, specials: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _save(model, tokenizer: PreTrainedTokenizerFast, folder: Path) -> str:
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return f"hf:{folder}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, code_corpus):
    """A corpus of 40 small Python files and four models: GPT-2 (3 layers), GPT-NeoX and BLOOM (2 layers)
    share a byte-level BPE that adds nothing; Llama (3 layers) has its own, which adds <s> in front."""
    base, source = tmp_path_factory.mktemp("hf"), code_corpus
    texts = [p.read_text() for p in sorted(source.iterdir())]
    shared = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(texts, 300, ["<|endoftext|>"]), eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    own = _bpe(texts, 280, ["<s>", "</s>"])
    own.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", own.token_to_id("<s>"))]
    )
    llama_tokenizer = PreTrainedTokenizerFast(tokenizer_object=own, bos_token="<s>", eos_token="</s>")
    ids = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    names = {
        "gpt2": _save(
            GPT2LMHeadModel(
                GPT2Config(
                    vocab_size=len(shared), n_positions=N_POSITIONS, n_embd=32, n_layer=3, n_head=4, **ids, **WIDTH
                )
            ),
            shared,
            base / "gpt2",
        ),
        "neox": _save(
            GPTNeoXForCausalLM(
                GPTNeoXConfig(
                    vocab_size=len(shared),
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=N_POSITIONS,
                    **ids,
                    **WIDTH,
                )
            ),
            shared,
            base / "neox",
        ),
        "bloom": _save(
            BloomForCausalLM(BloomConfig(vocab_size=len(shared), hidden_size=32, n_layer=2, n_head=4, **ids, **WIDTH)),
            shared,
            base / "bloom",
        ),
        "llama": _save(
            LlamaForCausalLM(
                LlamaConfig(
                    vocab_size=len(llama_tokenizer),
                    hidden_size=32,
                    num_hidden_layers=3,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    intermediate_size=64,
                    max_position_embeddings=N_POSITIONS,
                    bos_token_id=0,
                    eos_token_id=1,
                    pad_token_id=1,
                    **WIDTH,
                )
            ),
            llama_tokenizer,
            base / "llama",
        ),
    }
    return SimpleNamespace(
        base=base,
        source=source,
        names=names,
        options={**OPTIONS, "corpus": str(source)},
        argv=["-o", f"corpus={source}", "-o", "heldout=0.5", "-o", f"context={T}"],
    )


def hf_model(name: str):
    """The model as ``transformers`` loads it, with eager attention (the probabilities it returns)."""
    return AutoModelForCausalLM.from_pretrained(name.removeprefix("hf:"), attn_implementation="eager").eval()


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


# -- loading and the attention hooks -------------------------------------------------------------
@pytest.mark.parametrize(
    "family, positions, layers",
    [("gpt2", "standard", 3), ("neox", "rotary", 2), ("bloom", "alibi", 2), ("llama", "rotary", 3)],
)
def test_hook_patterns_are_the_attention_transformers_returns(tiny, family, positions, layers):
    loaded = load_external(tiny.names[family])
    assert (loaded.positions, loaded.bridge.cfg.n_layers) == (positions, layers)
    assert loaded.max_length == (N_POSITIONS if family == "gpt2" else None)  # a learned table stops there
    assert loaded.bos_id == (0 if family == "llama" else None)  # only Llama's tokenizer adds <s> by itself
    tokens = torch.randint(1, len(loaded.tokenizer), (2, 20), generator=torch.Generator().manual_seed(1))
    maps = run_patterns(loaded.bridge, tokens)  # [batch, layer, head, query, key]
    with torch.no_grad():
        expected = torch.stack(hf_model(tiny.names[family])(tokens, output_attentions=True).attentions, dim=1)
    assert maps.shape == (2, layers, 4, 20, 20)
    assert float(expected.amax(-1).mean()) > 0.5  # peaked maps: a wrong layer or head would show
    torch.testing.assert_close(maps, expected, rtol=0, atol=2e-5)  # float32 rounding, at logits this large


# -- perplexity ---------------------------------------------------------------------------------
def oracle_nll(
    name: str, texts: list[str], contexts: tuple[int, ...], scored: int, longest: int | None
) -> torch.Tensor:
    """[file, context] mean NLL of each text's last ``scored`` tokens read as its last c tokens, from the
    model's own logits and tokenizer (its BOS in front where it adds one); NaN where it cannot be read."""
    model, tokenizer = hf_model(name), AutoTokenizer.from_pretrained(name.removeprefix("hf:"))
    adds_bos = len(tokenizer.encode("a")) > len(tokenizer.encode("a", add_special_tokens=False))
    bos = tokenizer.encode("a")[0] if adds_bos else None
    out = torch.full((len(texts), len(contexts)), float("nan"), dtype=torch.float64)
    for i, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for j, c in enumerate(contexts):
            if len(ids) < c or (longest is not None and c > longest):
                continue
            window = ([bos] + ids[-(c - 1) :]) if bos is not None else ids[-c:]
            with torch.no_grad():
                logits = model(torch.tensor([window])).logits[0].double()  # [c, vocab]
            log_probs = logits[-scored - 1 : -1].log_softmax(-1)  # predictions of the last `scored` tokens
            out[i, j] = -log_probs[torch.arange(scored), torch.tensor(window[-scored:])].mean()
    return out


def test_perplexity_is_exp_of_the_mean_nll_of_the_models_own_logits(tiny):
    names = [tiny.names[f] for f in ("gpt2", "neox", "bloom")]
    report = perplexity_report(names, ReadSettings(options=tiny.options))
    protocol = report.protocol
    assert protocol.train_context == T and protocol.contexts[-1] == 40 and protocol.scored == 3
    texts = [(tiny.source / name).read_text() for name in report.files]
    for name, run in zip(names, report.runs):
        expected = oracle_nll(name, texts, protocol.contexts, protocol.scored, N_POSITIONS if "gpt2" in name else None)
        assert run.label == name and torch.isfinite(expected).any()
        torch.testing.assert_close(run.nll, expected, rtol=1e-5, atol=1e-5, equal_nan=True)  # float32 logits
    rows = [row for row in report.to_rows() if row["bucket"] == "all"]
    assert {row["run"] for row in rows} == set(names)
    assert max(row["context"] for row in rows if row["run"] == names[0]) <= N_POSITIONS  # GPT-2: "-" beyond
    assert max(row["context"] for row in rows if row["run"] == names[1]) == 40
    for row in rows:
        run = report.runs[names.index(row["run"])]
        values = run.nll[report.lengths >= 40, protocol.contexts.index(row["context"])]
        assert math.isfinite(row["perplexity"])
        assert row["pooled_perplexity"] == pytest.approx(math.exp(float(values.mean())), rel=1e-9)
        assert row["perplexity"] == pytest.approx(float(values.exp().mean()), rel=1e-6)


def test_perplexity_puts_the_bos_its_tokenizer_adds_in_front(tiny):
    name = tiny.names["llama"]
    report = perplexity_report([name], ReadSettings(options=tiny.options), max_files=6)
    texts = [(tiny.source / n).read_text() for n in report.files]
    expected = oracle_nll(name, texts, report.protocol.contexts, report.protocol.scored, None)
    torch.testing.assert_close(report.runs[0].nll, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


# -- distances and compare ----------------------------------------------------------------------
def test_distances_on_every_family_are_finite_distributions(tiny):
    names = [tiny.names[f] for f in ("gpt2", "neox", "bloom", "llama")]
    report = attended_distance_report(names, ReadSettings(options=tiny.options, n_per_bucket=3))
    found = [(r.run.label, r.lengths, r.n_examples, r.skipped) for r in report.results]
    assert (
        found
        == [(names[0] + " @1x", [T], 3, 3)]
        + [  # GPT-2 cannot read 2T: its 3 windows left out
            (n + f" @{m}x", [m * T], 3, 0) for n in names[1:] for m in (1, 2)
        ]
    )
    for result in report.results:
        for stats in result.stats.values():
            assert math.isfinite(stats.bimodality) and 0 < stats.mean <= 1
            assert float(stats.histogram.mass.sum()) == pytest.approx(1.0)
            assert float(stats.weights.sum()) == pytest.approx(result.n_queries)


def test_attended_distance_matches_a_hand_count_from_transformers_attention(tiny):
    name = tiny.names["llama"]
    (result,) = attended_distance_report(
        [name], ReadSettings(options=tiny.options, n_per_bucket=1, lengths="seen")
    ).results
    subject = resolve(name)
    loaded = subject.load(torch.device("cpu"))
    reading = TextReading([subject], tiny.options)
    (w,) = choose_windows(reading.tokenized(loaded), T, n_per_bucket=1, lengths="seen", bos=loaded.bos_id)
    assert int(w.tokens[0, 0]) == 0  # <s> in front
    with torch.no_grad():
        maps = hf_model(name)(w.tokens, output_attentions=True).attentions  # [layer]: [1, head, query, key]
    distances = [
        (q - int(row.argmax()) + 1) / (q + 1) for layer in maps for head in layer[0] for q, row in enumerate(head)
    ]
    assert result.stats["argmax"].mean == pytest.approx(sum(distances) / len(distances), abs=1e-9)


def _jsd(p: torch.Tensor, q: torch.Tensor) -> float:
    """Jensen-Shannon divergence of two distributions (natural log), by its definition."""
    m = (p + q) / 2
    return float(((p * (p / m).log()).nansum() + (q * (q / m).log()).nansum()) / 2)


def test_compare_pairs_layers_by_relative_depth_on_transformers_attention(tiny):
    gpt2, neox, bloom = (tiny.names[f] for f in ("gpt2", "neox", "bloom"))
    report = compare_report(gpt2, [neox, bloom], ReadSettings(options=tiny.options, n_per_bucket=2))
    assert report.baseline is None and [r.label for r in report.comparisons] == [neox, bloom]
    result = report.comparisons[0]
    assert result.paired == [0, 1, 1] and result.n_layers == 3  # A's 3 layers on B's 2
    assert [b.length for b in result.buckets] == [T] and result.skipped == 2  # GPT-2 reads 1x only
    assert result.to_json()["layers_b"] == [0, 1, 1] and [r["layer_b"] for r in result.to_rows()[:4]] == [0, 1, 1, ""]
    subject = resolve(gpt2)
    reading = TextReading([subject], tiny.options)
    (w,) = choose_windows(reading.tokenized(subject.load(torch.device("cpu"))), T, n_per_bucket=2, lengths="seen")
    with torch.no_grad():
        maps_a = hf_model(gpt2)(w.tokens, output_attentions=True).attentions
        maps_b = hf_model(neox)(w.tokens, output_attentions=True).attentions
    expected = torch.tensor(
        [
            [
                min(
                    sum(_jsd(P[t, : t + 1].double(), Q[t, : t + 1].double()) for t in range(T)) / T
                    for P in maps_a[layer][k]
                    for Q in maps_b[other][k]
                )
                for layer, other in enumerate([0, 1, 1])
            ]
            for k in range(2)
        ],
        dtype=torch.float64,
    )
    assert float(expected.min()) > 1e-3  # two different models: a test that can fail
    torch.testing.assert_close(result.values, expected, rtol=0, atol=1e-5)  # [window, layer]; float32 maps

    backwards = compare_report(neox, [gpt2], ReadSettings(options=tiny.options, n_per_bucket=2)).comparisons[0]
    assert backwards.paired == [0, 2] and backwards.n_layers == 2


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (3, 2, [0, 1, 1]),
        (2, 3, [0, 2]),
        (1, 4, [0]),
        (4, 1, [0, 0, 0, 0]),
        (5, 5, [0, 1, 2, 3, 4]),
        (5, 3, [0, 1, 1, 2, 2]),
        (12, 24, None),
    ],
)
def test_paired_layers_is_the_same_relative_depth(a, b, expected):
    pairs = paired_layers(a, b)
    if expected is not None:
        assert pairs == expected
    assert len(pairs) == a and pairs[0] == 0 and (a == 1 or pairs[-1] == b - 1)
    assert pairs == sorted(pairs) and all(0 <= m < b for m in pairs)
    if a > 1:  # within half a layer of l (L_B - 1) / (L_A - 1)
        assert all(abs(m - layer * (b - 1) / (a - 1)) <= 0.5 for layer, m in enumerate(pairs))


def test_models_with_different_tokenizers_are_not_compared(tiny, capsys):
    with pytest.raises(ProbeError, match="tokenizers differ"):
        compare_report(tiny.names["gpt2"], [tiny.names["llama"]], ReadSettings(options=tiny.options))
    assert main(["compare", tiny.names["gpt2"], tiny.names["llama"], *tiny.argv]) == 2
    assert "tokenizers differ" in one_line_error(capsys)
    assert main(["perplexity", tiny.names["neox"], tiny.names["llama"], "--corpus", str(tiny.source)]) == 2
    assert "tokenizers differ" in one_line_error(capsys)


# -- the commands -------------------------------------------------------------------------------
def test_commands_write_their_outputs_beside_the_runs_folder(tiny, tmp_path, capsys, no_png):
    root = tmp_path / "checkpoints"
    gpt2, neox = tiny.names["gpt2"], tiny.names["neox"]
    argv = ["--corpus", str(tiny.source), "--heldout", "0.5", "--context", str(T), "--checkpoints", str(root)]
    assert main(["perplexity", gpt2, neox, *argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["runs"]] == [gpt2, neox] and data["protocol"]["train_context"] == T
    assert all(math.isfinite(row["perplexity"]) for row in data["rows"])
    (folder,) = (root).iterdir()  # the code folder of these corpus options, where probe's runs of it live
    assert folder.name.startswith("code+context=16+corpus=src-") and "heldout=0.5" in folder.name
    (written,) = [p for p in folder.iterdir() if p.name.startswith("perplexity+hf-gpt2-")]
    assert {"perplexity.json", "perplexity.csv", "perplexity.md"} <= {p.name for p in written.iterdir()}

    assert main(["compare", gpt2, neox, *tiny.argv, "--n-per-bucket", "2", "--checkpoints", str(root)]) == 0
    out = capsys.readouterr().out
    assert "L2:1" in out and "A's L2 with B's L1" in out
    (csv,) = (folder / "compare").glob("hf-gpt2-3L-32d-*_vs_hf-gpt_neox-2L-32d-*.csv")  # named by the models
    header = "a,b,pe_a,seed_a,pe_b,seed_b,metric,length,seen,n_examples,layer,layer_b,"
    assert csv.read_text().splitlines()[0].startswith(header)

    assert main(["distances", neox, *tiny.argv, "--n-per-bucket", "2", "--checkpoints", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run"]["label"] for r in data["runs"]] == [f"{neox} @1x", f"{neox} @2x"]
    assert any(Path(f).name.startswith("attended_distance_hf-gpt_neox-2L-32d-") for f in data["files"])


@pytest.fixture(scope="module")
def code_runs(tiny, tmp_path_factory):
    """NoPE and ALiBi code runs trained two steps on the fixture's corpus at T (its prepared corpus beside them)."""
    root = tmp_path_factory.mktemp("checkpoints")
    options = {"corpus": str(tiny.source), "vocab_size": 300, "context": T, "heldout": 0.5}
    paths = []
    for pe in ("nope", "alibi"):
        config = TrainConfig(
            task="code",
            pe=pe,
            steps=2,
            batch_size=4,
            eval_examples=2,
            task_options=options,
            model=tiny_model(2, n_ctx=2 * T),
        )
        paths.append(train_run(config, run_dir(root, "code", pe, 0, options), torch.device("cpu")).path)
    return SimpleNamespace(
        root=root, paths=paths, argv=[*tiny.argv, "-o", "vocab_size=300", "--checkpoints", str(root)]
    )


def test_hf_models_beside_a_probe_code_run(tiny, code_runs, capsys):
    """A code run reads its own corpus's held-out files; an hf: model reads the same files with its tokenizer."""
    nope = str(code_runs.paths[0])
    report = attended_distance_report([nope, tiny.names["bloom"]], ReadSettings(n_per_bucket=2))
    assert [r.run.label for r in report.results] == [
        "NoPE @1x",
        "NoPE @2x",
        tiny.names["bloom"] + " @1x",
        tiny.names["bloom"] + " @2x",
    ]
    assert main(["compare", nope, tiny.names["bloom"], "--task", "code"]) == 2
    assert "tokenizers differ" in one_line_error(capsys)
    assert main(["compare", tiny.names["bloom"], "nope", *code_runs.argv]) == 2  # the run found by its PE name
    assert "tokenizers differ" in one_line_error(capsys)


@pytest.fixture(scope="module")
def with_bos(code_runs, tmp_path_factory):
    """The NoPE code run as if trained with a BOS at the start of every block (as `probe import` records the
    released models': ``imported.bos_token_id``), in a copy of its task folder; and an hf: NeoX that shares its
    tokenizer and adds no BOS."""
    from probe.corpus.bpe import CodeTokenizer

    base = tmp_path_factory.mktemp("bos")
    nope = code_runs.paths[0]
    task_folder = shutil.copytree(nope.parents[1], base / nope.parents[1].name)
    run = task_folder / nope.parent.name / nope.name
    tokenizer = CodeTokenizer.from_json((run / "tokenizer.json").read_text())
    config = json.loads((run / "config.json").read_text())
    config["imported"] = {"bos_token_id": tokenizer.eof_id}
    (run / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    neox = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        **WIDTH,
    )
    hf = _save(GPTNeoXForCausalLM(neox), tokenizer.to_hf(), base / "neox")
    return SimpleNamespace(run=str(run), bos=tokenizer.eof_id, hf=hf, plain=str(nope))


def test_each_model_reads_held_out_text_with_its_own_bos(with_bos):
    """Beside an hf: model, a code run trained with a BOS reads its windows with it (as it does alone), and the
    hf: model, whose tokenizer adds none, without it, whichever comes first."""
    from probe.analysis.perplexity import read_contexts
    from probe.corpus.prepared import corpus_of_run, load_corpus
    from probe.models import load_checkpoint

    plain = perplexity_report([with_bos.hf, with_bos.plain], max_files=6).runs[0].nll  # no BOS anywhere
    corpus = load_corpus(corpus_of_run(with_bos.run))
    for names in ([with_bos.hf, with_bos.run], [with_bos.run, with_bos.hf]):
        report = perplexity_report(names, max_files=6)
        nll = {r.path: r.nll for r in report.runs}
        files = [corpus.heldout_file(corpus.heldout_names.index(name)) for name in report.files]
        model = load_checkpoint(with_bos.run)
        expected = read_contexts(
            model, files, report.protocol, device=torch.device("cpu"), bos=with_bos.bos, max_length=model.cfg.n_ctx
        )
        assert torch.isfinite(expected).any()
        torch.testing.assert_close(nll[with_bos.run], expected, equal_nan=True)
        torch.testing.assert_close(nll[with_bos.hf], plain, equal_nan=True)
    alone, beside = (
        attended_distance_report(names, ReadSettings(n_per_bucket=2))
        for names in ([with_bos.run], [with_bos.run, with_bos.hf])
    )
    for a, b in zip(alone.results, beside.results, strict=False):  # the hf: model's results come after
        assert a.run.label == b.run.label
        for weighting, stats in a.stats.items():
            torch.testing.assert_close(stats.histogram.mass, b.stats[weighting].histogram.mass)


def test_models_that_start_their_windows_differently_are_not_compared(with_bos, capsys):
    """Compared models read the same windows: a BOS one of them puts first and the other does not is one line."""
    assert main(["compare", with_bos.run, with_bos.hf, "--task", "code", "--n-per-bucket", "2"]) == 2
    assert "same windows" in one_line_error(capsys)


# -- the explorer -------------------------------------------------------------------------------
def test_explorer_measures_the_perplexity_of_hf_models_beside_code_runs(tiny, code_runs, monkeypatch, no_png):
    from helpers import run_page, texts

    gpt2, neox = tiny.names["gpt2"], tiny.names["neox"]
    at = run_page("pretraining", code_runs.root, monkeypatch)
    at.text_input(key="pretraining-hf").set_value(f"{gpt2} {neox}")
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert [row["model"] for _, row in at.dataframe[0].value.iterrows()] == [gpt2, neox]
    assert f"probe perplexity {gpt2} {neox} --corpus {tiny.source}" in texts(at.caption)
    at.text_input(key="pretraining-hf").set_value(f"{gpt2} {tiny.names['llama']}")
    at.button[0].click().run()
    assert not at.exception and "tokenizers differ" in texts(at.error)
    at.text_input(key="pretraining-hf").set_value("gpt2")
    at.button[0].click().run()
    assert "`gpt2` is not hf:ID or hf:FOLDER" in texts(at.error)


def test_explorer_lists_a_perplexity_report_of_hf_models(tiny, code_runs, monkeypatch, no_png):
    from helpers import run_page

    argv = [
        "--corpus",
        str(tiny.source),
        "--heldout",
        "0.5",
        "--vocab-size",
        "300",
        "--context",
        str(T),
        "--checkpoints",
        str(code_runs.root),
    ]
    assert main(["perplexity", tiny.names["bloom"], *argv]) == 0
    at = run_page("pretraining", code_runs.root, monkeypatch)
    (saved,) = [o for o in at.selectbox(key="pretraining-report").options if "perplexity+hf-bloom-" in o]
    at.selectbox(key="pretraining-report").set_value(str(code_runs.root / saved)).run()
    assert not at.exception and [row["model"] for _, row in at.dataframe[0].value.iterrows()] == [tiny.names["bloom"]]


def page_table(at) -> list[dict]:
    return [dict(row) for _, row in at.dataframe[0].value.iterrows()]


def test_explorer_compares_code_runs_and_hf_models(tiny, code_runs, monkeypatch, no_png):
    from helpers import run_page, texts

    nope, alibi = (str(p) for p in code_runs.paths)
    gpt2, neox = tiny.names["gpt2"], tiny.names["neox"]
    at = run_page("compare", code_runs.root, monkeypatch)
    at.button[0].click().run()  # the page computes only when asked
    assert not at.error and len(at.get("plotly_chart")) >= 2
    assert (at.selectbox(key="compare-a").value, at.selectbox(key="compare-b").value) == (nope, alibi)
    assert at.select_slider(key="bucket").options == ["all buckets", f"{T}", f"{2 * T} (unseen)"]  # 1x and 2x T
    expected = compare_report(nope, [alibi], baseline=False).comparisons[0].overall  # 10 windows per context size
    (row,) = page_table(at)
    assert row["A vs"] == "ALiBi"
    assert [row["layer 0"], row["layer 1"]] == pytest.approx(expected.per_layer.mean.tolist())

    at.text_input(key="compare-hf").set_value(f"{gpt2} {neox}").run()
    at.selectbox(key="compare-a").set_value(gpt2)
    at.selectbox(key="compare-b").set_value(neox)
    at.number_input(key="n").set_value(2)
    at.button[0].click().run()  # the form's Compare
    assert not at.exception and not at.error
    expected = compare_report(gpt2, [neox], ReadSettings(options=tiny.options, n_per_bucket=2)).comparisons[0].overall
    (row,) = page_table(at)
    assert row["A vs"] == neox
    assert [row[f"layer {layer}"] for layer in range(3)] == pytest.approx(expected.per_layer.mean.tolist())
    assert "A's L2 with B's L1" in texts(at.caption)  # 3 layers of GPT-2 on 2 of GPT-NeoX
    assert f"probe compare {gpt2} {neox} -o corpus={tiny.source} -o heldout=0.5 -o context={T}" in texts(at.caption)

    at.selectbox(key="compare-b").set_value(nope)
    at.button[0].click().run()
    assert not at.exception and "tokenizers differ" in texts(at.error)
    at.text_input(key="compare-hf").set_value("gpt2").run()
    assert not at.exception and [e.value for e in at.error] == ["`gpt2` is not hf:ID or hf:FOLDER; left out"]


def test_explorer_measures_attended_distances_of_code_runs_and_hf_models(tiny, code_runs, monkeypatch, no_png):
    from helpers import run_page, texts

    gpt2 = tiny.names["gpt2"]
    at = run_page("distances", code_runs.root, monkeypatch)
    at.button[0].click().run()  # the page computes only when asked
    assert not at.error and len(at.get("plotly_chart")) == 1 and at.selectbox(key="which_lengths").value == "all"
    assert [row["run"] for row in page_table(at)] == ["ALiBi @1x", "ALiBi @2x", "NoPE @1x", "NoPE @2x"]

    at.text_input(key="distances-hf").set_value(gpt2)
    at.number_input(key="per_bucket").set_value(2)
    at.button[0].click().run()  # the form's Measure
    assert not at.exception and not at.error
    rows = page_table(at)
    assert [row["run"] for row in rows] == ["ALiBi @1x", "ALiBi @2x", "NoPE @1x", "NoPE @2x", f"{gpt2} @1x"]
    (expected,) = attended_distance_report(
        [gpt2], ReadSettings(options=tiny.options, n_per_bucket=2, lengths="all")
    ).results
    assert rows[-1]["bimodality (arg-max)"] == pytest.approx(expected.stats["argmax"].bimodality)
    assert rows[-1]["left out (too long)"] == 2  # GPT-2's table of 24 positions cannot read 2T
    assert f"{gpt2} -o corpus={tiny.source} -o heldout=0.5 -o context={T}" in texts(at.caption)

    at.text_input(key="distances-hf").set_value(f"gpt2 {gpt2}")
    at.button[0].click().run()
    assert not at.exception and [e.value for e in at.error] == ["`gpt2` is not hf:ID or hf:FOLDER; left out"]
    assert [row["run"] for row in page_table(at)][-1] == f"{gpt2} @1x"


# -- bad input: one line, exit 2 ----------------------------------------------------------------
def test_a_hub_id_in_the_local_cache_loads_offline(tiny, tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = tmp_path / "hub" / "models--probe-test--tiny-neox" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny.names["neox"].removeprefix("hf:"), snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_external("hf:probe-test/tiny-neox")
    assert loaded.folder == snapshot and loaded.bridge.cfg.n_layers == 2


def test_a_hub_id_not_in_the_cache_is_one_line_saying_how_to_fetch_it(tiny, tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    assert main(["perplexity", "hf:EleutherAI/pythia-70m", "--corpus", str(tiny.source)]) == 2
    err = one_line_error(capsys)
    assert "not in the local Hugging Face cache" in err and "hf download EleutherAI/pythia-70m" in err


@pytest.mark.parametrize(
    "target, message",
    [
        ("missing", "there is no folder"),
        ("empty", "not a Hugging Face model folder (no config.json)"),
        ("notes.txt", "not a Hugging Face model folder (no config.json)"),
        ("bare", "no tokenizer could be read"),  # a config.json and nothing else
    ],
)
def test_a_folder_that_is_not_a_model_is_one_line(tmp_path, capsys, target, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text("{}")
    assert main(["distances", f"hf:{tmp_path / target}"]) == 2
    assert message in one_line_error(capsys)


def test_a_model_folder_transformer_lens_cannot_load_is_one_line(tiny, tmp_path, capsys):
    folder = tmp_path / "broken"
    shutil.copytree(tiny.names["gpt2"].removeprefix("hf:"), folder)
    (folder / "model.safetensors").unlink()
    assert main(["perplexity", f"hf:{folder}", "--corpus", str(tiny.source)]) == 2
    assert "TransformerLens cannot load" in one_line_error(capsys)
    assert main(["compare", f"hf:{folder}", tiny.names["gpt2"], "--task", "scan"]) == 2
    assert "read on held-out code" in one_line_error(capsys)


def _not_causal(tiny, folder: Path, model) -> str:
    """``model`` (random weights) saved to ``folder`` with the fixture's shared tokenizer, spelt hf:FOLDER."""
    return _save(model, AutoTokenizer.from_pretrained(tiny.names["gpt2"].removeprefix("hf:")), folder)


def test_a_model_that_is_not_causal_is_refused_at_load_in_one_line(tiny, tmp_path, capsys):
    """A masked LM or an encoder-decoder reads the tokens after each one: its next-token losses (and the attention
    of its encoder) are not a causal language model's. Before, perplexity printed a table and exited 0."""
    from transformers import BertConfig, BertForMaskedLM, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    vocab = 300
    bert = _not_causal(
        tiny,
        tmp_path / "bert",
        BertForMaskedLM(
            BertConfig(
                vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
            )
        ),
    )
    t5 = _not_causal(
        tiny,
        tmp_path / "t5",
        T5ForConditionalGeneration(T5Config(vocab_size=vocab, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2)),
    )
    capsys.readouterr()  # transformers' bar saving them
    out = ["--out", str(tmp_path / "out")]
    for name, says in ((bert, "BertForMaskedLM is not a causal language model"), (t5, "is an encoder-decoder")):
        assert main(["perplexity", name, "--corpus", str(tiny.source), "--context", str(T), *out]) == 2
        assert says in one_line_error(capsys)
        assert main(["distances", name, *tiny.argv, "--n-per-bucket", "2", *out]) == 2  # every command loads here
        assert says in one_line_error(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "config, causal",
    [
        ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, True),
        ({"architectures": ["SomeRemoteForCausalLM"], "model_type": "remote"}, True),  # trust_remote_code decoders
        ({"model_type": "llama"}, True),  # no architectures: the model type's causal LM
        ({"architectures": ["BertLMHeadModel"], "model_type": "bert", "is_decoder": True}, True),
        ({"architectures": ["BertLMHeadModel"], "model_type": "bert"}, False),  # BERT without its causal mask
        ({"model_type": "bert"}, False),
        ({"architectures": ["RobertaForMaskedLM"], "model_type": "roberta"}, False),
        ({"architectures": ["LLaDAModelLM"], "model_type": "llada"}, False),  # a diffusion LM reads both ways
        ({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5"}, False),  # seq2seq without the flag
        ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "is_encoder_decoder": True}, False),
        ({}, True),  # nothing to tell: TransformerLens says what it cannot load
    ],
)
def test_a_causal_language_model_is_told_from_its_config(config, causal):
    from probe.models.hf import check_causal

    if causal:
        check_causal("hf:x", config)
    else:
        with pytest.raises(ProbeError, match="hf:x: .*(not a causal language model|encoder-decoder)"):
            check_causal("hf:x", config)


def test_a_context_no_learned_position_reaches_is_one_line_before_anything_is_read(tiny, tmp_path, capsys):
    """GPT-2's table of 24 positions reads no context size of T = 100 (50 ... 250). Before, a table of dashes and
    an IndexError writing the empty CSV."""
    argv = ["perplexity", tiny.names["gpt2"], "--corpus", str(tiny.source), "--context", "100"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = one_line_error(capsys)
    assert f"reads at most {N_POSITIONS} tokens" in err and "smallest context asked, 50" in err
    assert not (tmp_path / "out").exists()


# -- one resolver ---------------------------------------------------------------------------------
def test_every_name_resolves_once_into_its_kind_of_subject(tiny, code_runs, checkpoints):
    from helpers import FOLDER, TASK_OPTIONS

    from probe.subjects.resolve import resolve, resolve_all
    from probe.subjects.subject import CodeRun, HfModel, TaskRun

    task_run = resolve("t5", root=checkpoints, task="reverse", options=TASK_OPTIONS)
    assert isinstance(task_run, TaskRun) and task_run.path == checkpoints / FOLDER / "t5" / "seed0"
    assert task_run.config["pe"] == "t5" and task_run.info.label == "T5's Relative Bias"
    code = resolve(code_runs.paths[0])
    assert isinstance(code, CodeRun) and code.info.pe == "nope"
    hf = resolve(tiny.names["gpt2"])
    assert isinstance(hf, HfModel) and hf.path is None and hf.other_seed() is None
    # beside an hf: model, a PE name is a code run of the corpus options
    options = {"corpus": str(tiny.source), "vocab_size": 300, "context": T, "heldout": 0.5}
    subjects = resolve_all([tiny.names["gpt2"], "alibi"], root=code_runs.root, options=options)
    assert isinstance(subjects[1], CodeRun) and subjects[1].path == code_runs.paths[1]
    with pytest.raises(ProbeError, match="not a code model"):
        resolve_all([tiny.names["gpt2"], str(task_run.path)])
    with pytest.raises(ProbeError, match="neither a positional encoding"):
        resolve("alibbi", root=checkpoints)


@pytest.mark.parametrize(
    "command, extra",
    [
        (["compare", "nope", "t5"], ["--n-per-bucket", "2"]),
        (["eval", "nope", "t5"], ["--n", "4", "--valid", "4"]),
        (["distances", "--pe", "nope", "--pe", "t5"], ["--n-per-bucket", "2"]),
        (["positions", "--pe", "nope", "--pe", "t5"], ["--n-per-bucket", "2", "--resamples", "5"]),
    ],
)
def test_a_command_reads_each_config_json_once(checkpoints, monkeypatch, no_png, tmp_path, command, extra):
    """The resolver (or the search for a task's runs) reads each run's config.json; loading passes it on."""
    from helpers import FOLDER, TASK_OPTIONS

    reads: dict[str, int] = {}
    read_text = Path.read_text

    def counting(self, *args, **kwargs):
        if self.name == "config.json":
            reads[str(self.parent)] = reads.get(str(self.parent), 0) + 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    task = ["--task", "reverse", "-o", f"train_length={TASK_OPTIONS['train_length']}"]
    if command[0] == "eval":  # run folders: the fixture's corrupt run would stop an evaluation of every run
        command = ["eval", *(str(checkpoints / FOLDER / pe / "seed0") for pe in command[1:])]
    out = [] if command[0] == "eval" else ["--out", str(tmp_path)]
    assert main([*command, *task, *extra, "--checkpoints", str(checkpoints), *out]) == 0
    read = sorted(Path(p).parent.name + "/" + Path(p).name for p in reads)
    assert {"nope/seed0", "t5/seed0"} <= set(read) and set(reads.values()) == {1}, reads


def test_explorer_lists_code_runs_on_models_and_does_not_offer_them_on_attention(code_runs, monkeypatch, no_png):
    from helpers import run_page, texts

    at = run_page("models", code_runs.root, monkeypatch)
    assert not at.exception
    listed = "\n".join(frame.value.to_string() for frame in at.dataframe)
    assert all(str(path) in listed for path in code_runs.paths)
    at = run_page("attention", code_runs.root, monkeypatch)  # only code runs here: nothing to pick
    assert not at.exception and not at.error and not at.selectbox
    assert "Pretraining" in texts(at.caption)


def test_outputs_about_a_local_model_are_named_after_the_model_not_its_folder(tiny, tmp_path):
    """A folder called `hf` says nothing: its config's Hub id, else its architecture and size, name it."""
    import re

    from probe.models.hf import file_name

    folder = tmp_path / "hf"
    shutil.copytree(tiny.names["llama"].removeprefix("hf:"), folder)
    assert re.fullmatch(r"hf-llama-3L-32d-[0-9a-f]{8}", file_name(f"hf:{folder}"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": "HuggingFaceTB/SmolLM-135M"}))
    assert re.fullmatch(r"hf-HuggingFaceTB--SmolLM-135M-[0-9a-f]{8}", file_name(f"hf:{folder}"))
    assert file_name("hf:EleutherAI/pythia-70m") == "hf-EleutherAI--pythia-70m"  # a Hub id names itself


def test_a_context_whose_attention_maps_do_not_fit_is_one_line_before_any_window_is_read(
    tiny, monkeypatch, capsys, tmp_path
):
    """Where the smallest step (one window through one layer: heads x c^2 cells, the model's working copies and
    the analysis's float64 one, 64 bytes a cell) exceeds the free memory: the estimate and what lowers it,
    exit 2, before any forward pass; never the kernel's OOM killer."""
    import probe.analysis.distances as distances
    import probe.subjects.memory as memory

    neox = tiny.names["neox"]  # 4 heads, Rotary: reads 2T = 32 tokens, 4 x 32 x 32 x 64 bytes = 256 KiB
    monkeypatch.setattr(memory, "available_memory", lambda: 160 * 1024)
    read, read_layers = [], distances.read_layers
    monkeypatch.setattr(distances, "read_layers", lambda *args: read.append(args))
    assert main(["distances", neox, *tiny.argv, "--n-per-bucket", "1"]) == 2
    line = one_line_error(capsys)
    assert "one layer of one 32-token input of " in line and "needs 256.0 KiB (4 maps of 32x32" in line
    assert "160.0 KiB free here; read at most about 25 tokens" in line and "-o context=N" in line and not read
    monkeypatch.setattr(distances, "read_layers", read_layers)
    monkeypatch.setattr(memory, "available_memory", lambda: 256 * 1024)  # exactly enough: it reads
    assert main(["distances", neox, *tiny.argv, "--n-per-bucket", "1", "--checkpoints", str(tmp_path)]) == 0


def test_bfloat16_weights_read_as_float32_within_bfloat16_rounding(tiny, capsys, tmp_path):
    """--dtype bfloat16 loads the weights and runs the forward pass in bfloat16 (half the memory: the released
    1B models on a CPU); the mean NLL is the float32 model's to bfloat16's rounding (a file's own may move
    more: these random weights are large, so their attention is peaked), and every analysis reads it."""
    name = tiny.names["llama"]
    full = perplexity_report([name], ReadSettings(options=tiny.options))
    half = perplexity_report([name], ReadSettings(options=tiny.options, dtype="bfloat16"))
    assert next(load_external(name, dtype=torch.bfloat16).bridge.parameters()).dtype == torch.bfloat16
    finite = torch.isfinite(full.runs[0].nll)
    assert finite.any() and not torch.equal(half.runs[0].nll[finite], full.runs[0].nll[finite])
    assert float(half.runs[0].nll[finite].mean()) == pytest.approx(float(full.runs[0].nll[finite].mean()), rel=0.02)
    for command in (["distances", name], ["positions", name], ["compare", name, name]):
        argv = [*tiny.argv, "--n-per-bucket", "2", "--dtype", "bfloat16", "--checkpoints", str(tmp_path)]
        assert main([*command, *argv]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["distances", name, *tiny.argv, "--dtype", "float8"])
    assert refused.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err


def test_explorer_reads_hf_models_where_there_is_no_run(tiny, tmp_path, monkeypatch, no_png):
    """With no checkpoint at all, the analysis pages still read hf: models: on the held-out files of a corpus
    picked on the page (corpus, held-out share, context T)."""
    from helpers import run_page, texts

    gpt2, neox = tiny.names["gpt2"], tiny.names["neox"]
    at = run_page("distances", tmp_path, monkeypatch)
    assert (
        "probe train" in texts(at.info) and at.selectbox(key="distances-task").value == "held-out code, hf: models only"
    )
    at.text_input(key="distances-task-corpus").set_value(str(tiny.source))
    at.number_input(key="distances-task-heldout").set_value(0.5)
    at.number_input(key="distances-task-context").set_value(T)
    at.text_input(key="distances-hf").set_value(neox)
    at.number_input(key="per_bucket").set_value(2)
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert [row["run"] for row in page_table(at)] == [f"{neox} @1x", f"{neox} @2x"]
    (expected, _) = attended_distance_report(
        [neox], ReadSettings(options=tiny.options, n_per_bucket=2, lengths="all")
    ).results
    assert page_table(at)[0]["bimodality (arg-max)"] == pytest.approx(expected.stats["argmax"].bimodality)

    at = run_page("compare", tmp_path, monkeypatch)
    at.text_input(key="compare-task-corpus").set_value(str(tiny.source))
    at.number_input(key="compare-task-heldout").set_value(0.5)
    at.number_input(key="compare-task-context").set_value(T)
    at.text_input(key="compare-hf").set_value(f"{gpt2} {neox}").run()
    at.selectbox(key="compare-a").set_value(gpt2)
    at.selectbox(key="compare-b").set_value(neox)
    at.number_input(key="n").set_value(2)
    at.button[0].click().run()
    assert not at.exception and not at.error and page_table(at)[0]["A vs"] == neox


def test_explorer_shows_an_hf_models_attention_on_a_held_out_file(tiny, code_runs, monkeypatch, no_png):
    """The "attention on a held-out file" view reads an hf: model typed beside the code runs: the last c tokens
    of a held-out file in its own tokenizer, the maps of the one layer shown, as transformers computes them."""
    from helpers import run_page

    from probe.subjects.readings import TextReading
    from probe.subjects.resolve import resolve

    neox = tiny.names["neox"]
    at = run_page("pretraining", code_runs.root, monkeypatch)
    at.text_input(key="pretraining-file-hf").set_value(neox).run()
    assert not at.exception and neox in at.selectbox(key="pretraining-run").options
    at.selectbox(key="pretraining-run").set_value(neox).run()
    at.selectbox(key="pretraining-layer").set_value(1)
    at.selectbox(key="pretraining-head").set_value(2).run()
    assert not at.exception and not at.error
    index, context = at.selectbox(key="pretraining-file").value, at.selectbox(key="pretraining-context").value
    assert context == 2 * T  # 1x and 2x the code runs' T, the longest preselected
    subject = resolve(neox)
    loaded = subject.load(torch.device("cpu"))
    options = json.loads((code_runs.paths[0] / "config.json").read_text())["task"]["options"]  # the runs' corpus
    ids = TextReading([subject], options).tokenized(loaded).heldout_file(index)[-context:]
    with torch.no_grad():
        expected = hf_model(neox)(ids[None], output_attentions=True).attentions[1][0, 2]  # [query, key]
    heatmap = at.get("plotly_chart")[-1].proto.spec
    z = torch.tensor(json.loads(heatmap)["data"][0]["z"])
    torch.testing.assert_close(z, expected, atol=2e-5, rtol=0)


# -- interventions ------------------------------------------------------------------------------------
def _by_hand(temperature: float, trained: int | None, window: int | None, sinks: int):
    """An attention function for ``transformers`` (its AttentionInterface) that is causal attention with the
    intervention written out: logits / temperature, times max(1, ln n / ln L) at a query seeing n keys, keys
    outside the last ``window`` and the first ``sinks`` masked."""

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        logits = query @ key.transpose(2, 3) * scaling  # [batch, head, query, key]
        queries, keys = logits.shape[-2:]
        t = torch.arange(keys - queries, keys)
        assert attention_mask is None  # transformers hands a function of its own no mask: causal is ours to add
        logits = logits.masked_fill(torch.arange(keys)[None, :] > t[:, None], float("-inf"))
        factor = torch.full((queries,), 1.0 / temperature)
        if trained is not None:
            factor = factor * ((t + 1.0).log() / math.log(trained)).clamp(min=1)
        logits = logits * factor[:, None]
        if window is not None:
            j = torch.arange(keys)
            logits = logits.masked_fill((t[:, None] - j[None, :] >= window) & (j[None, :] >= sinks), float("-inf"))
        weights = torch.softmax(logits.float(), dim=-1).to(query.dtype)
        return (weights @ value).transpose(1, 2).contiguous(), weights

    return attention


@pytest.mark.parametrize("family", ["llama", "neox"])
@pytest.mark.parametrize(
    "spec, by_hand",
    [
        ("temperature=0.7", (0.7, None, None, 0)),
        ("log-length=6", (1.0, 6, None, 0)),
        ("window=5+sinks=2", (1.0, None, 5, 2)),
        ("temperature=1.3+log-length=8+window=7+sinks=1", (1.3, 8, 7, 1)),
    ],
)
def test_an_hf_model_under_an_intervention_is_transformers_with_the_change_by_hand(
    tiny, family, spec, by_hand, monkeypatch
):
    from transformers import AttentionInterface

    from probe.models.attach import attach
    from probe.models.interventions import parse_intervention

    name = f"by_hand_{family}_{abs(hash(spec))}"
    AttentionInterface.register(name, _by_hand(*by_hand))
    oracle = AutoModelForCausalLM.from_pretrained(tiny.names[family].removeprefix("hf:"), attn_implementation=name)
    bridge = attach(load_external(tiny.names[family]).bridge, parse_intervention(spec))
    tokens = torch.randint(1, 200, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected, got = oracle.eval()(tokens).logits, bridge(tokens)
        plain = hf_model(tiny.names[family])(tokens).logits
    assert (expected - plain).abs().max() > 1e-2  # the change shows in the logits: the comparison can fail
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    calls = _count_folded_attention(monkeypatch)
    torch.testing.assert_close(logits_of(bridge, tokens, keep=7), expected[:, -7:], rtol=1e-4, atol=1e-4)
    assert calls == [len(bridge.blocks)]  # one folded attention per layer: the fast path ran, not the bridge's


def _count_folded_attention(monkeypatch) -> list[int]:
    """[calls] of :mod:`probe.models.hf_attention`'s attention function from now on."""
    import probe.models.hf_attention as fast

    calls, attention = [0], fast._attention

    def counted(*args, **kwargs):
        calls[0] += 1
        return attention(*args, **kwargs)

    monkeypatch.setattr(fast, "_attention", counted)
    return calls


@pytest.mark.parametrize("family", ["llama", "neox", "bloom"])
def test_logits_of_an_untouched_hf_model_are_transformers_own(tiny, family, monkeypatch):
    """Read without hooks, a Llama or GPT-NeoX model runs on its own attention modules through probe's
    attention function; BLOOM's ALiBi attention does not take one, so it runs through the bridge. Both give
    the logits of ``transformers``' eager model."""
    bridge = load_external(tiny.names[family]).bridge
    tokens = torch.randint(1, 200, (3, 2 * T), generator=torch.Generator().manual_seed(5))
    calls = _count_folded_attention(monkeypatch)
    with torch.no_grad():
        expected = hf_model(tiny.names[family])(tokens).logits
    got = logits_of(bridge, tokens)
    assert calls == [0 if family == "bloom" else len(bridge.blocks)]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_any_other_hook_on_an_hf_model_keeps_the_bridges_path(tiny, monkeypatch):
    """A hook the fast path would skip (on a pattern, or a non-foldable function on the scores) must run:
    the bridge's own forward is taken, and the hook sees every layer."""
    from probe.models.attach import attached
    from probe.models.interventions import parse_intervention

    bridge = load_external(tiny.names["llama"]).bridge
    tokens = torch.randint(1, 200, (1, T), generator=torch.Generator().manual_seed(6))
    calls = _count_folded_attention(monkeypatch)
    seen: list[str] = []

    def record(x, hook):
        seen.append(hook.name)
        return x

    for point in ("blocks.0.attn.hook_pattern", "blocks.1.attn.hook_attn_scores"):
        with attached(bridge, parse_intervention("temperature=0.5")), bridge.hooks(fwd_hooks=[(point, record)]):
            logits_of(bridge, tokens)
        assert seen == [point] and calls == [0]
        seen.clear()


def test_resetting_an_hf_models_hooks_takes_its_edit_off_on_both_routes(tiny, monkeypatch):
    """reset_hooks(including_permanent=True) removes the executors that apply an edit on the bridge's own
    attention; the fused route must then read no edit either (it used to keep applying it), and a later attach
    works as on a fresh model."""
    from probe.models.attach import attach, detach
    from probe.models.interventions import parse_intervention

    bridge = load_external(tiny.names["llama"]).bridge
    tokens = torch.randint(1, 200, (1, T), generator=torch.Generator().manual_seed(7))
    calls = _count_folded_attention(monkeypatch)
    with torch.no_grad():
        untouched = logits_of(bridge, tokens)
        attach(bridge, parse_intervention("temperature=0.5"))
        edited = logits_of(bridge, tokens)
        assert (edited - untouched).abs().max() > 1e-3 and calls[0] > 0
        bridge.reset_hooks(including_permanent=True)
        assert torch.equal(logits_of(bridge, tokens), untouched)
        torch.testing.assert_close(bridge(tokens), untouched, rtol=1e-5, atol=1e-5)
        attach(bridge, parse_intervention("temperature=0.5"))
        assert torch.equal(logits_of(bridge, tokens), edited)
        torch.testing.assert_close(bridge.run_with_cache(tokens)[0], edited, rtol=1e-4, atol=1e-4)
        detach(bridge)
        assert torch.equal(logits_of(bridge, tokens), untouched)


def test_a_per_head_fit_on_an_hf_model_runs_on_its_own_attention_with_the_bridges_gradient(tiny, monkeypatch):
    """The per-head temperatures being fitted fold into the model's own attention modules (one window's
    activations, no [query, key] scores held); loss and gradient are the bridge's with each head's logits
    multiplied by hand."""
    from probe.models.attach import attached

    bridge = load_external(tiny.names["llama"]).bridge
    for p in bridge.parameters():
        p.requires_grad_(False)
    tokens = torch.randint(1, 200, (1, 2 * T), generator=torch.Generator().manual_seed(8))
    shape = (bridge.cfg.n_layers, bridge.cfg.n_heads)
    log_scales = (0.4 * torch.randn(shape, generator=torch.Generator().manual_seed(2))).requires_grad_()

    def loss_and_grad(scaled):
        with scaled:
            logits = logits_of(bridge, tokens, keep=9)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, -8:])
        (grad,) = torch.autograd.grad(loss, log_scales)
        return loss, grad

    calls = _count_folded_attention(monkeypatch)
    loss, grad = loss_and_grad(attached(bridge, learned=log_scales))
    assert calls == [len(bridge.blocks)]
    expected, expected_grad = loss_and_grad(bridge.hooks(fwd_hooks=heads_scaled_by_hand(log_scales, shape[0])))
    assert calls == [len(bridge.blocks)]  # the by-hand hooks took the bridge's path
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-3, atol=1e-5)
    assert grad.abs().max() > 1e-4


def _rerope_by_hand(theta: float, cap: int, window: tuple[int, int] | None = None):
    """An attention function for ``transformers`` that is causal attention with ReRoPE written out: a key
    within ``cap`` of the query scored as RoPE scores it, a farther one as the unturned key against the query
    turned by ``cap`` (the queries and keys it is handed come turned; they are turned back here, by the
    rotate-half RoPE of base ``theta``); with ``window`` (w, sinks), keys w or more behind hidden but the first
    ``sinks``."""

    def turn(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:  # x [batch, head, pos, d], at [pos] positions
        d = x.size(-1)
        angles = at.double()[:, None] * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None, :]
        angles = torch.cat((angles, angles), dim=-1)  # [pos, d]
        half = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
        return x * angles.cos().to(x.dtype) + half * angles.sin().to(x.dtype)

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        t = torch.arange(query.shape[2])
        q, k = turn(query, -t), turn(key, -t)  # unturned
        near = query @ key.transpose(2, 3) * scaling
        far = turn(q, torch.full_like(t, cap)) @ k.transpose(2, 3) * scaling
        distance = t[:, None] - t[None, :]
        logits = torch.where(distance > cap, far, near).masked_fill(distance < 0, float("-inf"))
        if window is not None:
            logits = logits.masked_fill((distance >= window[0]) & (t[None, :] >= window[1]), float("-inf"))
        weights = torch.softmax(logits.float(), dim=-1).to(query.dtype)
        return (weights @ value).transpose(1, 2).contiguous(), weights

    return attention


def test_a_capped_rotation_of_an_hf_model_is_transformers_with_rerope_by_hand(tiny, capsys, tmp_path, monkeypatch):
    """``cap`` on a Llama model through the bridge's hooks (its unturned queries and keys, its cos and sin)
    equals ``transformers`` given ReRoPE by hand; a model it cannot cap (GPT-NeoX turns a part of each head,
    BLOOM has no rotation) is one line, and ``probe extrapolate`` reports it as skipped."""
    from transformers import AttentionInterface

    from probe.models.attach import attach, attached
    from probe.models.interventions import parse_intervention

    folder = tiny.names["llama"].removeprefix("hf:")
    config = json.loads((Path(folder) / "config.json").read_text())
    theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10_000.0))
    AttentionInterface.register("rerope_by_hand", _rerope_by_hand(theta, 5))
    oracle = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="rerope_by_hand").eval()
    bridge = attach(load_external(tiny.names["llama"]).bridge, parse_intervention("cap=5"))
    # 1 x 19 tokens: the 2 key heads' values do not fill whole rows of the 4 query heads (a turn must not ask them to)
    tokens = torch.randint(1, 200, (1, 19), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected, got, plain = oracle(tokens).logits, bridge(tokens), hf_model(tiny.names["llama"])(tokens).logits
    assert (expected - plain).abs().max() > 1e-3  # capping shows in the logits: the comparison can fail
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    calls = _count_folded_attention(monkeypatch)
    torch.testing.assert_close(logits_of(bridge, tokens), expected, rtol=1e-4, atol=1e-4)
    assert calls == [len(bridge.blocks)]  # on the model's own attention modules, ReRoPE as two merged attentions
    with attached(bridge, parse_intervention("window=8+sinks=1")):  # composed: the oracle changed by hand
        AttentionInterface.register("rerope_window_by_hand", _rerope_by_hand(theta, 5, window=(8, 1)))
        oracle = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="rerope_window_by_hand").eval()
        with torch.no_grad():
            expected = oracle(tokens).logits
        torch.testing.assert_close(logits_of(bridge, tokens), expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(bridge(tokens), expected, rtol=1e-4, atol=1e-4)  # the bridge's own path
    assert calls == [2 * len(bridge.blocks)]
    for family, why in [("neox", "rotates"), ("bloom", "no rotary positions")]:
        with pytest.raises(ProbeError, match=why):
            attach(load_external(tiny.names[family]).bridge, parse_intervention("cap=5"))
    argv = ["--corpus", str(tiny.source), "--heldout", "0.5", "--context", str(T), "--checkpoints", str(tmp_path)]
    capsys.readouterr()
    assert main(["perplexity", tiny.names["neox"], "--intervene", "cap=5", *argv]) == 2
    assert "rotates" in one_line_error(capsys)
    from probe.extrapolation.extrapolate import extrapolate
    from probe.extrapolation.plan import Settings

    settings = Settings(families=("cap",), multiples=(1.0, 2.0), max_files=4, options=tiny.options, batch_size=4)
    llama, neox = extrapolate([tiny.names["llama"], tiny.names["neox"]], settings).runs
    assert [o.intervention.cap for o in llama.outcomes] == [None, N_POSITIONS - 1] and not llama.skipped
    assert [o.family for o in neox.outcomes] == ["none"] and "rotates" in neox.skipped["cap"]


@pytest.mark.parametrize("family", ["llama", "neox"])
def test_rope_scaling_of_an_hf_model_is_transformers_with_that_rope_by_hand(tiny, family):
    """attach() scales a loaded hf: model in place: its logits are those of transformers' own model built
    with the scaling's rope_parameters written by hand; detach() and the end of attached() give back the
    untouched model's, bit for bit; a second scaling is one line and changes nothing."""
    from probe.models.attach import attach, attached, detach
    from probe.models.interventions import Intervention, parse_intervention

    folder = tiny.names[family].removeprefix("hf:")
    config = json.loads((Path(folder) / "config.json").read_text())
    theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10_000.0))
    tokens = torch.randint(1, 200, (1, 40), generator=torch.Generator().manual_seed(4))
    rotated = config["hidden_size"] // config["num_attention_heads"]
    rotated = int(rotated * config.get("rope_parameters", {}).get("partial_rotary_factor", 1.0))  # neox: 2 of 8
    bridge = load_external(tiny.names[family]).bridge
    with torch.no_grad():
        untouched = bridge(tokens)
    yarn = {"rope_type": "yarn", "factor": 2.0, "rope_theta": theta, "original_max_position_embeddings": 16}
    cases = [
        ("scaling=linear+factor=2", {"rope_type": "linear", "factor": 2.0, "rope_theta": theta}),
        ("scaling=yarn+factor=2+original_length=16", yarn),
    ]
    if rotated > 2:  # one frequency (2 dimensions) turns by 1 radian a position whatever the base: no NTK
        cases.append(
            ("scaling=ntk+factor=4", {"rope_type": "default", "rope_theta": theta * 4 ** (rotated / (rotated - 2))})
        )
    else:
        with pytest.raises(ProbeError, match="this model rotates 2"):
            attach(bridge, parse_intervention("scaling=ntk+factor=4").resolved(N_POSITIONS))
    for spec, by_hand in cases:
        rope = dict(parse_intervention(spec).resolved(N_POSITIONS).rope)
        by_hand = {**config.get("rope_parameters", {}), **by_hand}
        oracle = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", rope_parameters=by_hand)
        with torch.no_grad():
            expected = oracle.eval()(tokens).logits
            assert (expected - untouched).abs().max() > 1e-3
            with attached(bridge, Intervention(rope=rope)):
                torch.testing.assert_close(bridge(tokens), expected, rtol=1e-4, atol=1e-4)
            assert torch.equal(bridge(tokens), untouched)
            attach(bridge, Intervention(rope=rope))
            torch.testing.assert_close(bridge(tokens), expected, rtol=1e-4, atol=1e-4)
            with pytest.raises(ProbeError, match="one RoPE scaling at a time"):
                attach(bridge, Intervention(rope=rope))
            detach(bridge)
            assert torch.equal(bridge(tokens), untouched)


def test_an_hf_model_without_rotary_positions_has_no_rope_to_scale(tiny):
    from probe.models.attach import attach
    from probe.models.interventions import Intervention

    with pytest.raises(ProbeError, match="no rotary module to scale"):
        attach(load_external(tiny.names["gpt2"]).bridge, Intervention(rope={"scaling": "linear", "factor": 2.0}))


def test_extrapolate_reads_an_hf_model_and_code_runs_by_perplexity_per_multiple(tiny, code_runs, no_png, tmp_path):
    from probe.extrapolation.extrapolate import extrapolate
    from probe.extrapolation.plan import Settings

    settings = Settings(
        families=("log-length", "rope", "temperature", "window", "head-temperature"), multiples=(1.0, 2.0), max_files=8,
        options=tiny.options, batch_size=4,
    )  # fmt: skip
    report = extrapolate([tiny.names["llama"]], settings)
    run = report.runs[0]
    assert report.measure == "perplexity" and run.context == T and run.trained_length == N_POSITIONS
    assert [o.family for o in run.outcomes] == [
        "none",
        "log-length",
        "rope",
        "temperature",
        "window",
        "head-temperature",
    ]
    assert [b["at"] for b in run.baseline.buckets] == [1.0, 2.0]
    assert all(b["mean"] > 1 and b["low"] <= b["mean"] <= b["high"] for o in run.outcomes for b in o.buckets)
    assert "cap" not in run.skipped  # not asked for
    files = report.write(tmp_path)
    assert any(f.endswith("extrapolation.md") for f in files)
    code = extrapolate(
        [str(p) for p in code_runs.paths], Settings(families=("cap", "log-length"), multiples=(1.0, 2.0))
    )
    alibi = next(r for r in code.runs if r.pe == "alibi")
    assert [o.family for o in alibi.outcomes] == ["none", "log-length", "cap"] and alibi.trained_length == T
    assert next(r for r in code.runs if r.pe == "nope").skipped == {"cap": "no relative distance to cap"}
