"""`probe extrapolate` never reports a number it did not measure (a review): a language model that cannot read
past T is one line, and a context it cannot read is said, not dropped; a tuned family that validation cannot
score is said, never a value chosen on NaN; the plan prints the rules as spelled, not placeholder values; a
RoPE scaling that stretches nothing, or cannot stretch two dimensions, is refused; bad counts, multiples and
a run shorter than its test are one line each; the per-head fit leaves the validation files as they were."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from probe.cli import main
from probe.errors import ProbeError
from probe.extrapolation.extrapolate import extrapolate
from probe.extrapolation.plan import Settings, fixed_candidates
from probe.extrapolation.tuning import Score, grid_search
from probe.models.interventions import Intervention, parse_intervention
from probe.models.transformer import build_model
from probe.runs.folders import run_dir
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

T = 16  # the context the language models are read at (1x)
N_POSITIONS = 24  # both models' n_ctx: GPT-2's learned table reads 1.5x T, not 2x
NOT_TUNABLE = "not tunable: no validation file reaches a context past T"
OPTIONS = {"train_length": 4}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def lms(tmp_path_factory, code_corpus) -> SimpleNamespace:
    """Random GPT-2 (learned positions, n_positions 24) and Llama (RoPE; its tokenizer adds <s>), built here."""
    base = tmp_path_factory.mktemp("guards-hf")
    texts = [p.read_text() for p in sorted(code_corpus.iterdir())]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<s>", "</s>"], initial_alphabet=alphabet)
    bpe.train_from_iterator(texts, trainer)
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    ids = dict(bos_token_id=0, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    built = {
        "gpt2": GPT2LMHeadModel(
            GPT2Config(vocab_size=len(tokenizer), n_positions=N_POSITIONS, n_embd=32, n_layer=2, n_head=4, **ids)
        ),
        "llama": LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=64, max_position_embeddings=N_POSITIONS, **ids,
            )
        ),
    }  # fmt: skip
    names = {}
    for name, model in built.items():
        model.eval().save_pretrained(base / name)
        tokenizer.save_pretrained(base / name)
        names[name] = f"hf:{base / name}"
    options = {"corpus": str(code_corpus), "heldout": 0.5, "context": T}
    argv = ["--corpus", str(code_corpus), "--heldout", "0.5", "--context", str(T)]
    return SimpleNamespace(names=names, options=options, argv=argv)


@pytest.fixture(scope="module")
def task_runs(tmp_path_factory) -> dict[str, Path]:
    """Reverse runs (L = 4) trained 3 steps: Rotary, and learned APE built with n_ctx 20, short of the test's
    longest sequences."""
    root = tmp_path_factory.mktemp("guards-runs")
    paths = {}
    for pe, shape in (("rotary", tiny_model()), ("learned", tiny_model(n_ctx=20))):
        config = TrainConfig(
            task="reverse", pe=pe, seed=0, task_options=OPTIONS, steps=3, batch_size=16, model=shape, eval_examples=4
        )
        paths[pe] = run_dir(root, "reverse", pe, 0, OPTIONS)
        train_run(config, paths[pe], torch.device("cpu"))
    return paths


def _settings(lms, **given) -> Settings:
    return Settings(options=lms.options, batch_size=4, **{"families": ("log-length",), **given})


# -- #6: perplexity past T is a context past T, or one line -------------------------------------------------------


def test_a_model_that_reads_no_multiple_past_t_is_one_line_naming_them(lms, capsys):
    """GPT-2 reads 24 positions: at T = 16, 2x is 32. Before, its NaN bucket was dropped and the 1x value was
    printed as the perplexity past T."""
    with pytest.raises(ProbeError, match=r"no context past T = 16 tokens.*2 x T: 32 tokens, past the 24 it reads"):
        extrapolate([lms.names["gpt2"]], _settings(lms, multiples=(1.0, 2.0)))
    argv = ["extrapolate", lms.names["gpt2"], *lms.argv, "--multiples", "1", "2", "--family", "log-length"]
    assert main(argv) == 2
    assert "--multiples 1 2" in _one_line(capsys)


@pytest.mark.parametrize(
    "model, multiples, left_out, headline",
    [
        ("gpt2", (1.0, 1.5, 2.0), {"2 x T": "left out: 32 tokens, past the 24 it reads"}, 1.5),
        ("llama", (1.0, 2.0, 20.0), {"20 x T": "left out: no held-out test file has 320 tokens"}, 2.0),
    ],
)
def test_a_context_that_cannot_be_read_is_said_and_the_headline_is_the_longest_read(
    lms, model, multiples, left_out, headline
):
    (run,) = extrapolate([lms.names[model]], _settings(lms, multiples=multiples)).runs
    assert run.skipped == left_out
    assert [b["at"] for b in run.baseline.buckets] == [1.0, headline]
    assert run.baseline.test == {k: run.baseline.buckets[-1][k] for k in ("mean", "low", "high", "n")}


# -- #7: a tuned family validation cannot score is said, never chosen on NaN -------------------------------------


def test_grid_search_never_chooses_a_nan_score():
    grid = [Intervention(temperature=t) for t in (1.0, 0.8, 1.25)]
    scores = {1.0: Score(math.nan), 0.8: Score(-2.0), 1.25: Score(math.nan)}
    assert grid_search("temperature", grid, lambda i: scores[i.temperature]).intervention.temperature == 0.8
    with pytest.raises(ProbeError, match="not tunable"):
        grid_search("temperature", grid, lambda i: Score(math.nan))


def test_no_validation_file_past_t_marks_every_tuned_family_not_tunable(lms, monkeypatch):
    """Validation files cut to 10 tokens reach no context past T: before, the grids chose their first candidate
    on NaN (reported as tuned temperature=1) and the per-head fit stopped the command."""
    import probe.extrapolation.language_models as module

    real = module.validation_split

    def short_validation(*args):
        valid, test = real(*args)
        return [(name, tokens[:10]) for name, tokens in valid], test

    monkeypatch.setattr(module, "validation_split", short_validation)
    families = ("log-length", "temperature", "window", "head-temperature")
    report = extrapolate([lms.names["llama"]], _settings(lms, families=families, multiples=(1.0, 2.0)))
    (run,) = report.runs
    assert [o.family for o in run.outcomes] == ["none", "log-length"]
    assert {f: run.skipped.get(f) for f in families[1:]} == dict.fromkeys(families[1:], NOT_TUNABLE)
    assert all(o.valid is None for o in run.outcomes) and run.best() is None
    assert json.loads(json.dumps(report.to_json()))["runs"][0]["best"] is None


def test_a_nan_validation_score_is_no_score(task_runs, monkeypatch):
    """Scored NaN on validation (a slice with nothing read): the grid chooses nothing, where before it kept its
    first candidate, and no outcome holds a validation score best could read."""
    from probe.extrapolation.tasks import TaskScorer

    monkeypatch.setattr(TaskScorer, "on_valid", lambda self, intervention: Score(math.nan, math.nan))
    settings = Settings(families=("log-length", "temperature"), n_valid=2, n_iid=4)
    (run,) = extrapolate([task_runs["rotary"]], settings).runs
    assert [o.family for o in run.outcomes] == ["none", "log-length"]
    assert run.skipped == {"temperature": "not tunable: no candidate has a validation score"}
    assert all(o.valid is None for o in run.outcomes) and run.best() is None


# -- #8: the plan says the rules as spelled ------------------------------------------------------------------------


def test_the_plan_prints_the_rules_as_spelled_not_placeholder_values(task_runs, capsys):
    argv = ["extrapolate", str(task_runs["rotary"]), "--family", "temperature", "--intervention", "cap"]
    assert main([*argv, "--intervention", "log-length+window=8", "--dry-run", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["steps"] == ["untouched", "cap", "log-length+window=8", "tuning a temperature"]


# -- #9, #10: RoPE scalings that stretch nothing, or two dimensions ------------------------------------------------


@pytest.mark.parametrize("scaling", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_every_rope_scaling_needs_a_factor_above_1(scaling):
    """Before, factor defaulted to 1 and linear, ntk, yarn and llama3 changed nothing under a scaling's name."""
    with pytest.raises(ProbeError, match=rf"option scaling={scaling} of rotary needs factor > 1"):
        build_model("rotary", vocab_size=10, pe_options={"scaling": scaling, "original_length": 8})
    given = parse_intervention(f"scaling={scaling}")  # probe extrapolate --intervention: no model takes it
    _, skipped = fixed_candidates(True, True, 8, 16, Settings(families=(), given=(given,)))
    assert skipped[given.name].startswith("needs factor > 1")


def test_an_intervention_that_stretches_nothing_is_one_line(task_runs, capsys):
    assert main(["eval", str(task_runs["rotary"]), "--n", "8", "--intervene", "scaling=yarn"]) == 2
    assert "needs factor > 1" in _one_line(capsys)


def test_the_rope_rule_is_skipped_where_the_longest_read_is_within_l():
    """An hf: model read at T within its n_ctx: YaRN by longest / L <= 1 would be a scaling in name only."""
    chosen, skipped = fixed_candidates(True, True, 24, 20, Settings(families=("rope",)))
    assert chosen == [] and skipped["rope"].startswith("nothing to stretch")
    chosen, _ = fixed_candidates(True, True, 24, 40, Settings(families=("rope",)))
    assert chosen[0][1].rope == {"scaling": "yarn", "factor": 1.67, "original_length": 24}


@pytest.mark.parametrize("scaling", ["ntk", "dynamic"])
def test_ntk_on_two_rotated_dimensions_is_one_line(task_runs, capsys, scaling):
    """A rotation of 2 dimensions a head (fraction 0.125 of 16): base x s^(r/(r-2)) divided by zero."""
    options = {"fraction": 0.125, "scaling": scaling, "factor": 2.0, "original_length": 8}
    with pytest.raises(ProbeError, match="this model rotates 2 a head"):
        build_model("rotary", vocab_size=10, **tiny_model(), pe_options=options)
    argv = ["eval", str(task_runs["rotary"]), "--n", "8", "-p", "fraction=0.125"]
    assert main([*argv, "--intervene", f"scaling={scaling}+factor=2"]) == 2
    assert "rotates 2" in _one_line(capsys)


# -- #10: bad counts and multiples, a run shorter than its test ----------------------------------------------------


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--max-files", "0"], "--max-files must be at least 1, got 0"),
        (["--max-files", "-1"], "--max-files must be at least 1, got -1"),
        (["--multiples", "-1"], "--multiples must each be above 0"),
        (["--multiples", "1", "0"], "--multiples must each be above 0"),
    ],
)
def test_bad_counts_and_multiples_are_one_line(task_runs, capsys, flags, says):
    assert main(["extrapolate", str(task_runs["rotary"]), *flags, "--dry-run"]) == 2
    assert says in _one_line(capsys)


@pytest.mark.parametrize("given, says", [({"max_files": 0}, "max_files"), ({"multiples": (1.0, -1.0)}, "multiples")])
def test_bad_settings_are_one_line_in_the_library_too(given, says):
    with pytest.raises(ProbeError, match=says):
        Settings(**given)


def test_a_run_shorter_than_its_test_says_the_longest_length_needed(task_runs, capsys):
    """Learned APE with n_ctx 20: the model sees one batch at a time and named the first batch's 21."""
    from probe.extrapolation.tasks import task_sets
    from probe.subjects.resolve import resolve
    from probe.tasks.batches import encode

    valid, test, iid, tokenizer = task_sets(resolve(task_runs["learned"]), Settings())
    longest = max(int(encode(examples, tokenizer).lengths.max()) for examples in (valid, test, iid))
    assert longest > 21
    assert main(["extrapolate", str(task_runs["learned"]), "--dry-run"]) == 2
    err = _one_line(capsys)
    assert f"reach {longest} tokens" in err and f"n_ctx={longest} or more" in err


# -- #12: the fit's windows, the footer, the help ------------------------------------------------------------------


def test_the_per_head_fit_leaves_the_validation_files_as_they_were(lms):
    """Its windows take BOS in front: before, it was written into the held-out file itself (a view)."""
    from probe.extrapolation.language_models import LanguageModelScorer
    from probe.subjects.resolve import reading_of, resolve_all

    settings = _settings(lms, multiples=(1.0, 2.0))
    (subject,) = resolve_all([lms.names["llama"]])
    loaded = subject.load(settings.device)
    scorer = LanguageModelScorer(subject, loaded, reading_of([subject], settings.options), settings)
    assert loaded.bos_id is not None and any(len(f) >= 2 * T and f[-2 * T] != loaded.bos_id for f in scorer.valid)
    before = [f.clone() for f in scorer.valid]
    assert list(scorer.losses(1))  # every window of the step read
    assert all(torch.equal(a, b) for a, b in zip(scorer.valid, before))


def test_the_footer_says_how_extrapolate_chose_t(lms, capsys, tmp_path):
    argv = ["extrapolate", lms.names["llama"], *lms.argv, "--multiples", "1", "2", "--family", "log-length"]
    assert main([*argv, "--max-files", "8", "--out", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "context T = 16 tokens (code models: their training context; hf: models: their n_ctx; or --context N)" in out


def test_n_valid_says_it_counts_files_in_all_for_language_models(capsys):
    with pytest.raises(SystemExit):
        main(["extrapolate", "--help"])
    assert "language models: held-out files in all" in " ".join(capsys.readouterr().out.split())
