"""A RoPE scaling reaches a loaded model through attach() (probe.models.attach), as every intervention does: the
model attends as the same run loaded with those PE options, and detach() or the end of attached() gives back the
model as it was, bit for bit."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model

from probe.errors import ProbeError
from probe.models import build_model
from probe.models.attach import attach, attached, detach
from probe.models.checkpoint import load_checkpoint, save_checkpoint
from probe.models.interventions import Intervention

VOCAB = 20
X = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(3))  # past the scalings' L


def _saved(tmp_path, pe: str = "rotary", **options):
    model = build_model(pe, vocab_size=VOCAB, preset="tiny", seed=0, pe_options=options, **tiny_model(n_ctx=64))
    return save_checkpoint(model.double(), tmp_path / pe)


@pytest.mark.parametrize(
    "pe, rope",
    [
        ("rotary", {"scaling": "linear", "factor": 2}),
        ("rotary", {"scaling": "yarn", "factor": 4.0, "original_length": 16}),
        ("rotary", {"scaling": "dynamic", "factor": 2.0, "original_length": 16}),
        ("xpos", {"scaling": "ntk", "factor": 3.0}),
    ],
)
def test_an_attached_rope_scaling_is_the_run_loaded_with_it_and_detach_undoes_it(tmp_path, pe, rope):
    folder = _saved(tmp_path, pe)
    with torch.no_grad():
        expected = load_checkpoint(folder, pe_options=rope)(X)
        model = load_checkpoint(folder)
        plain = model(X)
        assert not torch.allclose(plain, expected)
        torch.testing.assert_close(attach(model, Intervention(rope=rope))(X), expected)
        assert model.blocks[0].attn._pe is model.pe and model.pe.option["scaling"] == rope["scaling"]
        assert torch.equal(detach(model)(X), plain)
        with attached(model, Intervention(rope=rope, temperature=0.5)):
            assert not torch.allclose(model(X), expected)
        assert torch.equal(model(X), plain) and all(block.attn._pe is model.pe for block in model.blocks)


def test_attached_gives_back_a_scaling_attached_before_and_reset_hooks_takes_it_off(tmp_path):
    folder = _saved(tmp_path)
    linear, window = Intervention(rope={"scaling": "linear", "factor": 2.0}), Intervention(window=8)
    with torch.no_grad():
        model, plain = load_checkpoint(folder), load_checkpoint(folder)(X)
        scaled = attach(model, linear)(X)
        with attached(model, window):
            windowed = model(X)
        assert torch.equal(model(X), scaled) and not torch.equal(windowed, scaled)
        with pytest.raises(ProbeError, match="one RoPE scaling at a time"):
            attach(model, linear)
        model.reset_hooks(including_permanent=True)
        assert torch.equal(model(X), plain)


def test_a_model_without_rope_to_scale_is_one_line_and_left_as_it_was(tmp_path):
    model = load_checkpoint(_saved(tmp_path, "nope"))
    pe = model.pe
    with pytest.raises(ProbeError, match="nope has no RoPE to scale"):
        attach(model, Intervention(rope={"scaling": "linear", "factor": 2.0}))
    assert model.pe is pe and model.blocks[0].attn.edit is None


def test_hf_rope_parameters_keep_what_a_model_rotates_and_refuse_a_rope_per_layer_type():
    """transformers' rope_parameters written for a probe scaling (oracle: the fields by hand): a partial rotary
    share stays, NTK-aware counts only the rotated dimensions, and a config with a RoPE per layer type
    (Gemma 3's full and sliding attention) is one line, not silently given one base."""
    from probe.models.hf_rotary import hf_rope_parameters

    neox = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "rope_parameters": {"rope_theta": 100.0, "partial_rotary_factor": 0.25},
    }
    assert hf_rope_parameters({"scaling": "linear", "factor": 2.0}, neox) == {
        "partial_rotary_factor": 0.25, "rope_type": "linear", "rope_theta": 100.0, "factor": 2.0,
    }  # fmt: skip
    ntk = hf_rope_parameters({"scaling": "ntk", "factor": 4.0}, neox)  # 8 of 32 dimensions rotate
    assert ntk["rope_theta"] == pytest.approx(100.0 * 4.0 ** (8 / 6)) and ntk["partial_rotary_factor"] == 0.25
    per_type = {"hidden_size": 64, "num_attention_heads": 2, "rope_parameters": {
        "full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4},
    }}  # fmt: skip
    with pytest.raises(ProbeError, match="a RoPE per layer type"):
        hf_rope_parameters({"scaling": "linear", "factor": 2.0}, per_type)


def _tiny_llama(max_positions: int, **rope):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=max_positions, rope_parameters={"rope_type": "default", "rope_theta": 100.0, **rope},
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_an_hf_model_that_scales_rope_already_is_refused_and_left_as_it_was():
    """Llama 3's own llama3 scaling: a yarn built in its place would drop it (even factor=1 changed the logits)."""
    from probe.models.hf_rotary import rotary_modules, scale_rotary

    model = _tiny_llama(64, rope_type="llama3", factor=8.0, original_max_position_embeddings=8,
                        low_freq_factor=1.0, high_freq_factor=4.0)  # fmt: skip
    before = rotary_modules(model)[0].inv_freq.clone()
    with pytest.raises(ProbeError, match="scales RoPE already"):
        scale_rotary(model, {"scaling": "yarn", "factor": 1.0, "original_length": 8})
    assert torch.equal(rotary_modules(model)[0].inv_freq, before)


def test_hf_dynamic_ntk_grows_past_the_original_length_given():
    """transformers' dynamic NTK reads L from max_position_embeddings: scaled with original_length=8, a model
    whose config says 64 computes what transformers' own model with 8 does (before, the 8 was ignored)."""
    from probe.models.hf_rotary import restore_rotary, scale_rotary

    model = _tiny_llama(64)
    oracle = _tiny_llama(8, rope_type="dynamic", factor=2.0)
    oracle.load_state_dict(model.state_dict())
    tokens = torch.arange(24)[None] % 32
    with torch.no_grad():
        plain = model(tokens).logits
        states = scale_rotary(model, {"scaling": "dynamic", "factor": 2.0, "original_length": 8})
        scaled = model(tokens).logits
        restore_rotary(states)
        assert torch.allclose(scaled, oracle(tokens).logits, atol=1e-6) and not torch.allclose(scaled, plain)
        assert torch.equal(model(tokens).logits, plain)
