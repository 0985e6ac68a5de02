"""Transformer-XL's relative encoding (Dai et al. 2019, Section 3.3) against its equation, written out
here in float64 scalar by scalar from the built model's own queries, keys and parameters."""

from __future__ import annotations

import math

import pytest
import torch

from probe.models import build_model

VOCAB = 17
TINY = dict(n_layers=2, d_model=12, n_heads=2, d_head=6, d_mlp=24)


def sinusoid(distance: int, d_model: int, clamp: int) -> list[float]:
    """R_d = [sin(d w_0) ... sin(d w_{m-1}), cos(d w_0) ... cos(d w_{m-1})], w_k = 10000^(-2k/d_model)."""
    d = min(distance, clamp)
    frequencies = [10000 ** (-2 * k / d_model) for k in range(d_model // 2)]
    return [math.sin(d * w) for w in frequencies] + [math.cos(d * w) for w in frequencies]


def txl_logits(model, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """[head, query, key] A_ij = (q_i + u)^T k_j + (q_i + v)^T W_R R_{i-j}, over the layer's scale,
    for j <= i (-inf above the diagonal), from the layer's hooked queries and keys."""
    _, cache = model.run_with_cache(tokens)
    q, k = cache[f"blocks.{layer}.attn.hook_q"][0], cache[f"blocks.{layer}.attn.hook_k"][0]  # [pos, head, d_head]
    pe, cfg = model.pe, model.cfg
    u, v, w = pe.content_bias[layer].detach(), pe.position_bias[layer].detach(), pe.projection[layer].detach()
    scale = math.sqrt(cfg.d_head) if model.config.attn_scale else 1.0  # ModelConfig's flag
    n = tokens.shape[1]
    out = torch.full((cfg.n_heads, n, n), float("-inf"), dtype=torch.float64)
    for h in range(cfg.n_heads):
        for i in range(n):
            for j in range(i + 1):
                r = torch.tensor(sinusoid(i - j, cfg.d_model, pe.option["clamp"]), dtype=torch.float64)
                projected = r @ w[:, h, :]  # [d_head]: W_R R_{i-j} for head h
                out[h, i, j] = (float((q[i, h] + u[h]) @ k[j, h]) + float((q[i, h] + v[h]) @ projected)) / scale
    return out


@pytest.mark.parametrize("options, overrides", [({}, {}), ({"clamp": 3}, {}), ({}, {"attn_scale": False})])
def test_logits_are_the_papers_four_terms(options, overrides):
    model = build_model("txl", vocab_size=VOCAB, seed=3, pe_options=options, **{**TINY, **overrides}).double().eval()
    tokens = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(2))
    _, cache = model.run_with_cache(tokens)
    for layer in range(TINY["n_layers"]):
        expected = txl_logits(model, tokens, layer)
        got = cache[f"blocks.{layer}.attn.hook_attn_scores"][0]  # [head, query, key]
        below = torch.ones(9, 9, dtype=torch.bool).tril()
        assert torch.allclose(got[:, below], expected[:, below], rtol=1e-10, atol=1e-10)
        assert torch.isinf(got[:, ~below]).all()


def test_clamp_makes_far_distances_share_a_sinusoid():
    model = build_model("txl", vocab_size=VOCAB, seed=1, pe_options={"clamp": 2}, **TINY).double()
    table = model.pe.sinusoids(6, torch.float64)  # [span, d_model]
    assert torch.equal(table[2], table[5]) and not torch.equal(table[1], table[2])
    assert table[0].tolist() == pytest.approx(sinusoid(0, TINY["d_model"], 2))


def test_each_layer_has_its_own_projection_and_biases_drawn_from_the_seed():
    a = build_model("txl", vocab_size=VOCAB, seed=4, **TINY).pe
    b = build_model("txl", vocab_size=VOCAB, seed=4, **TINY).pe
    assert torch.equal(a.projection, b.projection) and not torch.equal(a.projection[0], a.projection[1])
    assert float(a.content_bias.detach().std()) == pytest.approx(0.2, rel=0.5)  # the released code's N(0, 0.2^2)
    assert float(a.projection.detach().std()) == pytest.approx(TINY["d_model"] ** -0.5, rel=0.3)
