"""Checkpoints: bit-identical round trip, atomic writes, and one clear error per bad input."""

from __future__ import annotations

import json

import pytest
import torch

import probe
from probe.errors import ProbeError
from probe.models import build_model, load_checkpoint, save_checkpoint


@pytest.mark.parametrize("pe", probe.PE_KINDS)
def test_round_trip_is_bit_identical(pe, tmp_path):
    model = build_model(pe, vocab_size=19, seed=2, pe_options={"shared": False} if pe == "t5" else {})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    save_checkpoint(model, tmp_path / "run", task={"name": "copy"}, metrics={"acc": 1.0})
    assert {p.name for p in (tmp_path / "run").iterdir()} == {"model.safetensors", "config.json"}
    loaded = load_checkpoint(tmp_path / "run")
    tokens = torch.randint(0, 19, (2, 11))
    assert torch.equal(model.eval()(tokens), loaded(tokens))
    assert loaded.metadata["task"] == {"name": "copy"} and loaded.metadata["pe"] == pe
    assert type(loaded) is type(model)


def test_missing_folder(tmp_path):
    with pytest.raises(ProbeError, match="no checkpoint folder"):
        load_checkpoint(tmp_path / "nowhere")


def test_folder_without_config(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(ProbeError, match="has no config.json"):
        load_checkpoint(tmp_path / "x")


def test_truncated_weights(tmp_path):
    save_checkpoint(build_model("nope", vocab_size=9), tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ProbeError, match="corrupt"):
        load_checkpoint(tmp_path)


def test_garbage_weights_without_hash(tmp_path):
    save_checkpoint(build_model("nope", vocab_size=9), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["weights_sha256"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ProbeError, match="not a readable safetensors"):
        load_checkpoint(tmp_path)


def test_unknown_pe_in_config(tmp_path):
    save_checkpoint(build_model("nope", vocab_size=9), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["model"]["pe"] = "wavelet"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ProbeError, match="unknown positional encoding 'wavelet'"):
        load_checkpoint(tmp_path)


def test_corrupt_json(tmp_path):
    save_checkpoint(build_model("nope", vocab_size=9), tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ProbeError, match="not valid JSON"):
        load_checkpoint(tmp_path)


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    first = build_model("nope", vocab_size=9, seed=0)
    save_checkpoint(first, tmp_path)
    import probe.models.checkpoint as checkpoint

    def explode(state, path):
        open(path, "wb").write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", explode)
    with pytest.raises(ProbeError, match="No space left"):
        save_checkpoint(build_model("nope", vocab_size=9, seed=1), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    tokens = torch.randint(0, 9, (1, 5))
    assert torch.equal(load_checkpoint(tmp_path)(tokens), first.eval()(tokens))
