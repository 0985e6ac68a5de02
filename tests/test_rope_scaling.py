"""RoPE scaling (options of ``rotary``) against ``transformers``' own ``ROPE_INIT_FUNCTIONS``: the
inverse frequencies and attention factor of linear interpolation, dynamic NTK, YaRN and Llama 3.1,
and the NTK-aware base written out from its definition."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from probe.errors import ProbeError
from probe.models import build_model

L = 64  # the length "trained on"


def _oracle(rope_type: str, fraction: float, seq_len: int | None = None, **parameters) -> tuple[torch.Tensor, float]:
    config = LlamaConfig(
        hidden_size=128,
        num_attention_heads=4,
        head_dim=32,
        max_position_embeddings=L,
        rope_parameters={
            "rope_type": rope_type,
            "rope_theta": 10000.0,
            "partial_rotary_factor": fraction,
            **parameters,
        },
    )
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def _ours(scaling: str, fraction: float, length: int, **options):
    model = build_model("rotary", vocab_size=10, pe_options={"scaling": scaling, "fraction": fraction, **options})
    return model.pe.inverse_frequencies(torch.float32, length), model.pe.attention_factor()


@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.parametrize(
    "rope_type, options, parameters",
    [
        ("linear", {"factor": 4.0}, {"factor": 4.0}),
        ("yarn", {"factor": 4.0, "original_length": L}, {"factor": 4.0, "original_max_position_embeddings": L}),
        (
            "yarn",
            {"factor": 8.0, "original_length": L, "beta_fast": 16.0, "beta_slow": 2.0},
            {"factor": 8.0, "original_max_position_embeddings": L, "beta_fast": 16.0, "beta_slow": 2.0},
        ),
        (
            "llama3",
            {"factor": 8.0, "original_length": L},
            {"factor": 8.0, "original_max_position_embeddings": L, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        ),
    ],
)
def test_inverse_frequencies_and_attention_factor_match_transformers(fraction, rope_type, options, parameters):
    theirs, their_factor = _oracle(rope_type, fraction, **parameters)
    ours, our_factor = _ours(rope_type, fraction, 3 * L, **options)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0)
    assert our_factor == pytest.approx(their_factor, rel=1e-12)


@pytest.mark.parametrize("length", [L // 2, L, 3 * L])
def test_dynamic_ntk_matches_transformers_at_every_length(length):
    """Below L it is plain RoPE; past L the base grows with the pass's length."""
    theirs, _ = _oracle("dynamic", 1.0, seq_len=length, factor=4.0)
    ours, factor = _ours("dynamic", 1.0, length, factor=4.0, original_length=L)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0) and factor == 1.0
    plain, _ = _ours("none", 1.0, length)
    assert torch.equal(ours, plain) == (length <= L)


def test_ntk_aware_base_is_its_definition():
    """bloc97 (2023): the base grows to base x s^(r / (r - 2)), so the lowest frequency is interpolated by
    exactly s while the highest is kept."""
    s, r = 4.0, 32
    ours, _ = _ours("ntk", 1.0, 10, factor=s)
    base = 10000.0 * s ** (r / (r - 2))
    expected = base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    assert torch.allclose(ours.double(), expected, rtol=1e-6, atol=0)
    plain, _ = _ours("none", 1.0, 10)
    assert ours[0] == plain[0] and ours[-1].item() == pytest.approx(plain[-1].item() / s, rel=1e-5)


def test_yarn_temperature_scales_the_rotated_scores():
    """cos and sin carry YaRN's factor, so the rotated part of q.k is multiplied by its square."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, 32, dtype=torch.float64)
    scores = {}
    for scaling in ("linear", "yarn"):
        model = build_model(
            "rotary",
            vocab_size=10,
            pe_options={"scaling": scaling, "factor": 4.0, "original_length": 1, "beta_fast": 1e9, "beta_slow": 1e9},
        ).double()
        model.pe.begin_forward(torch.arange(1))
        scores[scaling] = (model.pe.rotate(0, q, 0) * model.pe.rotate(0, k, 0)).sum().item()
    assert scores["yarn"] == pytest.approx(scores["linear"] * (0.1 * math.log(4.0) + 1) ** 2, rel=1e-12)


def test_scaling_applies_at_inference_to_a_model_trained_without_it():
    """RoPE has no weights: the same state dict loads under any scaling; within L, dynamic NTK changes
    nothing (its angles are p * theta where plain RoPE's are p / period: the same numbers up to
    float64 rounding), and past L it changes the logits."""
    plain = build_model("rotary", vocab_size=10, seed=1).double()
    tokens = torch.randint(0, 10, (1, 12))
    stretched = build_model(
        "rotary", vocab_size=10, seed=1, pe_options={"scaling": "dynamic", "factor": 2.0, "original_length": 12}
    ).double()
    stretched.load_state_dict(plain.state_dict())
    assert torch.allclose(plain(tokens), stretched(tokens), rtol=0, atol=1e-12)
    longer = torch.randint(0, 10, (1, 30))
    assert not torch.allclose(plain(longer), stretched(longer))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"scaling": "yarn", "factor": 4.0}, "option scaling=yarn of rotary needs original_length"),
        ({"scaling": "linear", "factor": 0.5}, "option scaling=linear of rotary needs factor > 1"),
        (
            {"scaling": "cubic"},
            "option scaling of rotary is 'cubic'; choose one of none, linear, ntk, dynamic, yarn, llama3",
        ),
        (
            {"scaling": "llama3", "factor": 8.0, "original_length": 64, "high_freq_factor": 0.5},
            "option high_freq_factor=0.5 of rotary must exceed low_freq_factor",
        ),
    ],
)
def test_bad_scaling_options_are_one_line(options, message):
    with pytest.raises(ProbeError, match=message):
        build_model("rotary", vocab_size=10, pe_options=options)
