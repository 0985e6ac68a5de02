"""The paper's released code models read into probe: their own code's logits, `probe import`, bad input.

The fixture (``tests/fixtures/authors_t5``) holds tiny random ``CustomDecoderOnlyT5`` models built and run
by the authors' code (McGill-NLP/length-generalization) under their transformers pin, saved as the Hub
repos are, with the logits their code gave (``tests/fixtures/make_authors_fixture.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.models.released import load_authors_model

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "authors_t5"
REFERENCE = json.loads((FIXTURE / "logits.json").read_text())
KINDS = ("none", "rotary", "alibi")
PROBE_PE = {"none": "nope", "rotary": "rotary", "alibi": "alibi"}


@pytest.mark.parametrize("kind", KINDS)
def test_probe_gives_the_authors_logits(kind):
    """float32 rounding apart: a wrong rotary pairing, eps or output scale is off by 1e-5 or more."""
    model, _ = load_authors_model(FIXTURE / kind)
    tokens = torch.tensor(REFERENCE["input_ids"])
    with torch.no_grad():
        logits = model(tokens)
    assert torch.allclose(logits, torch.tensor(REFERENCE["models"][kind]["logits"]), rtol=0, atol=5e-6)


@pytest.fixture(scope="module")
def source_folder(tmp_path_factory):
    """A few source files, long enough to be read at 2.5x a 1024-token context with the fixture's tokenizer."""
    folder = tmp_path_factory.mktemp("src")
    for i in range(12):
        body = "".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(60))
        (folder / f"m{i}.py").write_text(body)
    return folder


@pytest.fixture(scope="module")
def imported(tmp_path_factory, source_folder):
    root = tmp_path_factory.mktemp("ck")
    runs = {}
    for kind in KINDS:
        assert (
            main(["import", str(FIXTURE / kind), "--checkpoints", str(root), "--corpus", str(source_folder), "--json"])
            == 0
        )
        runs[kind] = next(root.glob(f"code+*/{PROBE_PE[kind]}/seed0"))
    return root, runs


def test_an_imported_run_is_a_probe_run_with_the_same_logits(imported):
    _, runs = imported
    tokens = torch.tensor(REFERENCE["input_ids"])
    for kind, run in runs.items():
        model = load_checkpoint(run)
        with torch.no_grad():
            assert torch.allclose(model(tokens), torch.tensor(REFERENCE["models"][kind]["logits"]), rtol=0, atol=5e-6)
        config = json.loads((run / "config.json").read_text())
        assert config["imported"]["bos_token_id"] == REFERENCE["bos_token_id"]
        assert config["task"]["name"] == "code" and config["training"]["complete"]
        assert model.to_str_tokens("def f(x):")  # its own tokenizer is attached


def test_perplexity_reads_the_imported_runs(imported, capsys):
    root, runs = imported
    capsys.readouterr()
    assert main(["perplexity", *map(str, runs.values()), "--max-files", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(r["pe"] for r in report["runs"]) == sorted(PROBE_PE.values())


def _copy(tmp_path: Path, kind: str = "rotary") -> Path:
    return Path(shutil.copytree(FIXTURE / kind, tmp_path / "model"))


def _fails_writing_nothing(folder: Path, tmp_path: Path, capsys, says: str) -> None:
    root = tmp_path / "ck"
    capsys.readouterr()
    assert main(["import", str(folder), "--checkpoints", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not root.exists()


def test_a_folder_that_is_not_a_model_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _fails_writing_nothing(tmp_path / "empty", tmp_path, capsys, "no config.json")


def test_an_unknown_position_encoding_type_is_one_line(tmp_path, capsys):
    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "position_encoding_type": "cope"}))
    _fails_writing_nothing(folder, tmp_path, capsys, "position_encoding_type 'cope'")


def test_missing_weights_are_one_line(tmp_path, capsys):
    folder = _copy(tmp_path)
    (folder / "pytorch_model.bin").unlink()
    _fails_writing_nothing(folder, tmp_path, capsys, "has no weights")


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path, capsys):
    folder = _copy(tmp_path)
    marker = tmp_path / "ran"
    torch.save({"shared.weight": _Payload(marker)}, folder / "pytorch_model.bin")
    _fails_writing_nothing(folder, tmp_path, capsys, "holds objects other than tensors")
    assert not marker.exists()
    with pytest.raises(ProbeError):
        load_authors_model(folder)
    assert not marker.exists()


def test_a_raw_pickle_of_objects_is_refused_in_one_line_of_stderr(tmp_path):
    """A plain pickle.dumps (protocol 4) makes torch warn on two lines before refusing, and torch's refusal
    advises weights_only=False: the CLI's stderr is probe's one line, and nothing in the file runs."""
    import pickle
    import subprocess
    import sys

    folder = _copy(tmp_path)
    marker = tmp_path / "ran"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"shared.weight": _Payload(marker)}, protocol=4))
    code = "import sys\nfrom probe.cli import main\nsys.exit(main(sys.argv[1:]))"
    argv = ["import", str(folder), "--checkpoints", str(tmp_path / "ck")]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "holds objects other than tensors" in line and "weights_only" not in line, line
    assert not marker.exists() and not (tmp_path / "ck").exists()


BLOCK = "decoder.block.{}.layer."


@pytest.mark.parametrize(
    ("key", "shape", "implied"),
    [
        (BLOCK.format(0) + "0.SelfAttention.q.weight", [32, 64], [64, 32]),  # q.weight transposed: the right size
        (BLOCK.format(1) + "0.SelfAttention.k.weight", [32, 64], [64, 32]),
        (BLOCK.format(1) + "0.SelfAttention.v.weight", [128, 16], [64, 32]),
        (BLOCK.format(1) + "0.SelfAttention.o.weight", [64, 32], [32, 64]),
        (BLOCK.format(0) + "2.DenseReluDense.wi.weight", [32, 48], [48, 32]),
        (BLOCK.format(1) + "2.DenseReluDense.wo.weight", [31, 48], [32, 48]),
        (BLOCK.format(0) + "0.layer_norm.weight", [31], [32]),
        (BLOCK.format(1) + "2.layer_norm.weight", [1, 32], [32]),
        ("decoder.final_layer_norm.weight", [33], [32]),
        ("shared.weight", [60, 32], [61, 32]),
    ],
)
def test_a_tensor_of_the_wrong_shape_is_one_line_naming_it(tmp_path, capsys, key, shape, implied):
    """Of the right size, a q.weight of another shape was viewed into heads and loaded as garbage without a
    word; others failed with a line naming no tensor."""
    folder = _copy(tmp_path)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save({**state, key: torch.ones(shape)}, folder / "pytorch_model.bin")
    _fails_writing_nothing(folder, tmp_path, capsys, f"{key} has shape {shape}; config.json implies {implied}")


def test_a_misfit_at_load_state_dict_names_the_tensors(monkeypatch):
    """torch's error names them only past its first line, which was all the one-line error kept."""
    import probe.models.released as released

    convert = released.convert_state

    def misconverted(state, config):
        converted = convert(state, config)
        del converted["blocks.1.mlp.W_out"]
        return {**converted, "blocks.0.attn.W_Q": torch.zeros(3)}

    monkeypatch.setattr(released, "convert_state", misconverted)
    with pytest.raises(ProbeError) as error:
        load_authors_model(FIXTURE / "rotary")
    message = str(error.value)
    assert "blocks.0.attn.W_Q [3]" in message and "[4, 32, 16]" in message and "blocks.1.mlp.W_out missing" in message


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ({"shared.weight": 3}, "no shared.weight tensor"),
        (torch.zeros(3), "holds a Tensor, not a state dict"),
    ],
)
def test_weights_that_are_not_named_tensors_are_one_line(tmp_path, capsys, state, says):
    folder = _copy(tmp_path)
    torch.save(state, folder / "pytorch_model.bin")
    _fails_writing_nothing(folder, tmp_path, capsys, says)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"vocab_size": None}, "config.json has no vocab_size"),
        ({"num_layers": None}, "config.json has no num_layers"),
        ({"d_kv": "eight"}, "d_kv is 'eight', not a positive integer"),
        ({"num_heads": 0}, "num_heads is 0, not a positive integer"),
        ({"d_ff": 48.5}, "d_ff is 48.5, not a positive integer"),
        ({"n_positions": True}, "n_positions is True, not a positive integer"),
        ({"layer_norm_epsilon": "1e-6"}, "layer_norm_epsilon is '1e-6', not a positive number"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings is 'false', not true or false"),
        ({"position_encoding_type": ["rotary"]}, "position_encoding_type ['rotary'] is not one probe reads"),
        ({"architectures": 5}, "is not one of the paper's released models"),
    ],
)
def test_a_malformed_config_is_one_line_naming_the_field(tmp_path, capsys, change, says):
    """Each of these ended in a traceback (KeyError, ValueError, TypeError) or, for "false", a silently
    tied model."""
    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text()) | change
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    _fails_writing_nothing(folder, tmp_path, capsys, says)


@pytest.mark.parametrize(
    ("tokenizer_config", "says"),
    [
        (None, "names no bos_token (in tokenizer_config.json or special_tokens_map.json"),
        ('{"bos_token": "<s>"}', "the bos_token '<s>' of its tokenizer_config.json is not in its tokenizer.json"),
    ],
)
def test_a_folder_without_its_bos_token_is_refused(tmp_path, capsys, tokenizer_config, says):
    """The models were trained with BOS first in every block and their evaluation prepends it: a run
    without it (prepend_bos false) was written without a word."""
    folder = _copy(tmp_path)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink()
    if tokenizer_config is not None:
        (folder / "tokenizer_config.json").write_text(tokenizer_config)
    _fails_writing_nothing(folder, tmp_path, capsys, says)


def test_the_stack_has_num_layers_blocks_as_theirs_does(tmp_path):
    """Their CustomT5Stack builds config.num_layers blocks whatever num_decoder_layers says: the fixture's
    logits (their code, num_layers 2) hold with num_decoder_layers 3."""
    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_layers": 2, "num_decoder_layers": 3}))
    model, _ = load_authors_model(folder)
    assert model.cfg.n_layers == 2
    with torch.no_grad():
        logits = model(torch.tensor(REFERENCE["input_ids"]))
    assert torch.allclose(logits, torch.tensor(REFERENCE["models"]["rotary"]["logits"]), rtol=0, atol=5e-6)


def test_perplexity_reads_an_imported_run_with_its_bos_first(imported):
    """The 1B models were trained with <jupyter_start> opening every block: each window read is that
    token and the last c - 1 tokens of the file, scored as by hand from the model's own logits."""
    from probe.analysis.perplexity import perplexity_report
    from probe.corpus.prepared import run_corpus

    _, runs = imported
    run = runs["rotary"]
    report = perplexity_report([run], max_files=2)
    config = json.loads((run / "config.json").read_text())
    corpus = run_corpus(run, config)
    name = report.files[0]
    tokens = corpus.heldout_file(corpus.heldout_names.index(name))
    context, scored = report.protocol.contexts[0], report.protocol.scored
    window = torch.cat([torch.tensor([REFERENCE["bos_token_id"]]), tokens[-(context - 1) :]])[None]
    model = load_checkpoint(run)
    with torch.no_grad():
        logits = model(window)[0, -scored - 1 : -1].double()
    by_hand = torch.nn.functional.cross_entropy(logits, window[0, -scored:]).item()
    assert report.runs[0].nll[0, 0].item() == pytest.approx(by_hand, rel=1e-9)
    with torch.no_grad():
        plain = model(tokens[-context:][None])[0, -scored - 1 : -1].double()
    assert abs(torch.nn.functional.cross_entropy(plain, tokens[-scored:]).item() - by_hand) > 1e-6


@pytest.mark.parametrize("page", ["models", "pretraining"])
def test_the_explorer_reads_imported_runs(imported, page, monkeypatch):
    """The explorer's run list and its Pretraining page (perplexity measured there, attention on a
    held-out file) read imported runs as they read `probe pretrain` runs."""
    from streamlit.testing.v1 import AppTest

    root, _ = imported
    monkeypatch.setenv("PROBE_CHECKPOINTS", str(root))
    at = AppTest.from_file(
        str(Path(__file__).resolve().parent.parent / "probe" / "explorer" / "explorer.py"), default_timeout=300
    )
    at.run()
    if page != "models":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    cells = " ".join(str(cell) for frame in at.dataframe for cell in frame.value.to_numpy().ravel())
    assert all(f"/{pe}/seed0" in cells or f" {pe} " in f" {cells} " for pe in PROBE_PE.values()), cells


def test_probe_positions_reads_an_imported_run_on_code_windows(tmp_path, capsys):
    """The released models' way in (`probe import`, then `probe positions`): held-out windows of a corpus
    at 1x and 2x the model's context (1,024 and 2,048 tokens), read with its own tokenizer, BOS first."""
    corpus = tmp_path / "src"
    corpus.mkdir()
    for i in range(8):  # files of about 3,000 tokens: a 2,048-token window fits in every held-out one
        (corpus / f"m{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(180)))
    root = tmp_path / "ck"
    assert main(["import", str(FIXTURE / "rotary"), "--checkpoints", str(root), "--corpus", str(corpus)]) == 0
    run = next(root.glob("code+*/rotary/seed0"))
    capsys.readouterr()
    args = ["positions", str(run), "--n-per-bucket", "2", "--resamples", "20", "--max-positions", "32"]
    assert main([*args, "--out", str(tmp_path / "out"), "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)["models"]
    assert result["n_inputs"] == {"seen": 2, "unseen": 2}
    assert {row["stream"] for row in result["probes"]} == set(range(load_checkpoint(run).cfg.n_layers + 1))
    assert any((tmp_path / "out").iterdir())
