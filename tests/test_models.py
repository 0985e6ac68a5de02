"""The five PE models against independent oracles: the paper's examples, HuggingFace
transformers' T5 and BLOOM code, the defining property of each encoding."""

from __future__ import annotations

import math

import pytest
import torch

import probe
from probe.errors import ProbeError
from probe.models import alibi_slopes, build_model, sinusoidal_embedding, t5_relative_bucket
from probe.models.registry import PAPER_PES

VOCAB = 23

# Section B.2: bucket(n) for n = 0..9 with B = 5, D = 6 (first column of the paper's matrix).
PAPER_BUCKETS = [0, 1, 2, 3, 3, 4, 4, 4, 4, 4]


def test_pe_kinds_are_the_papers_five():
    assert PAPER_PES == ("nope", "ape", "t5", "alibi", "rotary")


def test_paper_bucket_matrix():
    distances = torch.arange(10)[:, None] - torch.arange(10)[None, :]
    expected = torch.tensor([[PAPER_BUCKETS[max(i - j, 0)] for j in range(10)] for i in range(10)])
    assert torch.equal(t5_relative_bucket(distances.clamp(min=0), 5, 6), expected)


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (5, 6), (16, 64), (64, 256), (8, 20)])
def test_bucket_matches_transformers_t5(buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    n = torch.arange(0, 1001)
    # transformers takes memory - query = -(query - key) and bidirectional=False for a decoder.
    reference = T5Attention._relative_position_bucket(
        -n, bidirectional=False, num_buckets=buckets, max_distance=max_distance
    )
    assert torch.equal(t5_relative_bucket(n, buckets, max_distance), reference)


def test_alibi_slopes_paper_and_bloom():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    for heads in (1, 3, 4, 6, 12, 16, 20, 24):
        # BLOOM's alibi tensor at key position 1 is exactly the slope of each head.
        bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]
        assert torch.allclose(alibi_slopes(heads), bloom), heads


def test_alibi_bias_is_minus_slope_times_distance():
    model = build_model("alibi", vocab_size=VOCAB, n_heads=8, d_head=16)
    _, cache = model.run_with_cache(torch.randint(0, VOCAB, (1, 7)))
    bias = cache["blocks.0.attn.hook_pos_bias"]
    for h in range(8):
        for t in range(7):
            for i in range(t + 1):
                assert bias[h, t, i].item() == pytest.approx(-(2.0 ** -(h + 1)) * (t - i))


def test_sinusoid_values_against_formula():
    d = 16
    values = sinusoidal_embedding(torch.arange(50), d)
    for j in (0, 1, 7, 49):
        for i in range(d // 2):
            omega = 1 / 10000 ** (2 * i / d)
            assert values[j, 2 * i].item() == pytest.approx(math.sin(omega * j), abs=1e-12)
            assert values[j, 2 * i + 1].item() == pytest.approx(math.cos(omega * j), abs=1e-12)


@pytest.mark.parametrize("scale", [1.0, 0.0707])
def test_ape_scale_multiplies_the_sinusoid_the_residual_stream_gets(scale):
    """``-p scale`` sets p_j's amplitude (1: the paper's Eq. ape_sinusoidal): the position vectors the model
    adds are ``scale`` times the formula's, and the residual stream is token plus that."""
    model = build_model("ape", vocab_size=VOCAB, n_layers=1, pe_options={"scale": scale}).double()
    tokens = torch.randint(0, VOCAB, (1, 9))
    _, cache = model.run_with_cache(tokens)
    d = model.cfg.d_model
    for j in (0, 3, 8):
        for i in (0, 1, d // 2 - 1):
            omega = 1 / 10000 ** (2 * i / d)
            assert cache["hook_pos_embed"][0, j, 2 * i].item() == pytest.approx(scale * math.sin(omega * j), abs=1e-12)
            assert cache["hook_pos_embed"][0, j, 2 * i + 1].item() == pytest.approx(
                scale * math.cos(omega * j), abs=1e-12
            )
    residual = cache["hook_embed"] + cache["hook_pos_embed"]  # [batch, pos, d_model]
    assert torch.allclose(cache["blocks.0.hook_resid_pre"], residual, atol=1e-12)


def _layer0_scores(model, tokens):
    _, cache = model.run_with_cache(tokens)
    return cache["blocks.0.attn.hook_attn_scores"][0]  # [head, query, key]


@pytest.mark.parametrize(
    "pe,invariant", [("nope", True), ("t5", True), ("alibi", True), ("rotary", True), ("ape", False)]
)
def test_shift_invariance_of_relative_encodings(pe, invariant):
    """Layer-0 logits among a block of tokens are unchanged when the block moves right (relative
    PEs), and change for APE."""
    model = build_model(pe, vocab_size=VOCAB, seed=1).double()
    torch.manual_seed(0)
    block = torch.randint(0, VOCAB, (1, 10))
    shifted = torch.cat([torch.randint(0, VOCAB, (1, 13)), block], dim=1)
    a = _layer0_scores(model, block)
    b = _layer0_scores(model, shifted)[:, 13:, 13:]
    close = torch.allclose(a, b, atol=1e-9)  # a float64 model rotates with float64 angles
    assert close == invariant
    if not invariant:
        lower = torch.tril(torch.ones(10, 10, dtype=torch.bool))
        assert (a - b)[:, lower].abs().max() > 1e-2


def test_rotary_dot_product_depends_on_distance_only():
    model = build_model("rotary", vocab_size=VOCAB, pe_options={"fraction": 0.5}).double()
    torch.manual_seed(0)
    q = torch.randn(1, 1, 1, model.cfg.d_head, dtype=torch.float64).expand(1, 40, 1, -1)
    k = torch.randn(1, 1, 1, model.cfg.d_head, dtype=torch.float64).expand(1, 40, 1, -1)
    model.pe.begin_forward(torch.arange(40))
    rq, rk = model.pe.rotate(0, q.contiguous(), 0), model.pe.rotate(0, k.contiguous(), 0)
    dots = torch.einsum("d,id->i", rq[0, 30, 0], rk[0, :, 0])  # query at 30, keys 0..39
    dots_later = torch.einsum("d,id->i", rq[0, 35, 0], rk[0, :, 0])
    assert torch.allclose(dots[:31], dots_later[5:36], atol=1e-10)
    assert not torch.allclose(dots[:31], dots[5:36], atol=1e-3)


@pytest.mark.parametrize("fraction, base", [(1.0, 10000.0), (0.25, 10000.0), (0.5, 500.0)])
def test_rotary_matches_transformers_partial_rotary(fraction, base):
    """Oracle: transformers' GPT-NeoX rotation (``apply_rotary_pos_emb`` with its inverse frequencies
    1 / base^(2j/r) on the first r = fraction x d_head dimensions), in float64."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    model = build_model("rotary", vocab_size=VOCAB, pe_options={"fraction": fraction, "base": base}).double()
    d_head, r = model.cfg.d_head, round(fraction * model.cfg.d_head)
    torch.manual_seed(1)
    q, k = torch.randn(2, 2, 17, 4, d_head, dtype=torch.float64)  # [batch, pos, head, d_head]
    positions = torch.arange(17)
    model.pe.begin_forward(positions)
    inv_freq = 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
    freqs = positions.double()[:, None] * inv_freq[None]
    emb = torch.cat([freqs, freqs], dim=-1)[None]  # [1, pos, r]
    expected_q, expected_k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), emb.cos(), emb.sin())
    assert torch.allclose(model.pe.rotate(0, q, 0), expected_q.transpose(1, 2), atol=1e-12, rtol=0)
    assert torch.allclose(model.pe.rotate(0, k, 0), expected_k.transpose(1, 2), atol=1e-12, rtol=0)


def test_nope_one_layer_last_position_is_permutation_invariant():
    """Without PE, attention is a set operation: permuting the earlier tokens leaves the last
    position's output unchanged."""
    model = build_model("nope", vocab_size=VOCAB, n_layers=1).double()
    tokens = torch.randint(0, VOCAB, (1, 12))
    permuted = torch.cat([tokens[:, :-1][:, torch.randperm(11)], tokens[:, -1:]], dim=1)
    assert torch.allclose(model(tokens)[0, -1], model(permuted)[0, -1], atol=1e-10)
    ape = build_model("ape", vocab_size=VOCAB, n_layers=1).double()
    assert not torch.allclose(ape(tokens)[0, -1], ape(permuted)[0, -1], atol=1e-6)


def test_nope_has_no_positional_parameter_or_buffer():
    model = build_model("nope", vocab_size=VOCAB)
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    assert not [n for n in names if "pos" in n or "rotary" in n or "alibi" in n or "relative" in n]


@pytest.mark.parametrize("pe", probe.PE_KINDS)
def test_long_inputs_run_and_too_long_refuses(pe):
    model = build_model(pe, vocab_size=VOCAB, n_layers=1, d_model=32, n_heads=2, d_head=16, d_mlp=64)
    assert model.cfg.n_ctx >= 1024
    with torch.no_grad():
        logits = model(torch.randint(0, VOCAB, (1, 1024)))
    assert torch.isfinite(logits).all()
    with pytest.raises(ProbeError, match="longer than this model's context"):
        model(torch.randint(0, VOCAB, (1, 1025)))


def test_bf16_autocast_does_not_round_the_alibi_bias(monkeypatch):
    """Under bf16 autocast the fast path hands SDPA the bias in float32: at distance 500 the last
    head's slope (2^-8) is below bf16's spacing, so a bf16 mask would merge neighbouring keys."""
    import probe.models.attention as attention

    model = build_model("alibi", vocab_size=VOCAB, seed=0)  # 4 heads: slopes 2^-2, 2^-4, 2^-6, 2^-8
    seen = []
    real = attention.F.scaled_dot_product_attention
    monkeypatch.setattr(
        attention.F,
        "scaled_dot_product_attention",
        lambda *args, **kwargs: seen.append(kwargs["attn_mask"]) or real(*args, **kwargs),
    )
    length = 600
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randint(0, VOCAB, (1, length)))
    assert torch.isfinite(logits).all() and len(seen) == model.cfg.n_layers
    distance = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).double()  # [query, key]
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8], dtype=torch.float64)
    expected = torch.where(distance >= 0, -slopes[:, None, None] * distance, -torch.inf).float()  # [head, query, key]
    for mask in seen:
        assert mask.dtype == torch.float32 and torch.equal(mask[0], expected)


def test_hooks_switch_off_the_fast_path():
    model = build_model("t5", vocab_size=VOCAB)
    tokens = torch.randint(0, VOCAB, (1, 6))
    seen = []
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: seen.append(x))])
    assert len(seen) == 1 and seen[0].shape == (1, model.cfg.n_heads, 6, 6)
    assert model.blocks[0].attn.uses_fast_path()  # hooks removed again afterwards


def test_patching_the_position_bias_changes_the_output():
    model = build_model("t5", vocab_size=VOCAB)
    tokens = torch.randint(0, VOCAB, (1, 6))
    clean = model(tokens)
    patched = model.run_with_hooks(
        tokens, fwd_hooks=[("blocks.0.attn.hook_pos_bias", lambda x, hook: x * 0 + 5.0 * torch.arange(6.0))]
    )
    assert not torch.allclose(clean, patched)


def test_t5_table_is_shared_or_per_layer():
    shared = build_model("t5", vocab_size=VOCAB, n_layers=3)
    assert shared.pe.relative_attention_bias.shape == (1, 32, shared.cfg.n_heads)
    _, cache = shared.run_with_cache(torch.randint(0, VOCAB, (1, 8)))
    assert torch.equal(cache["blocks.0.attn.hook_pos_bias"], cache["blocks.2.attn.hook_pos_bias"])
    per_layer = build_model("t5", vocab_size=VOCAB, n_layers=3, pe_options={"shared": False})
    assert per_layer.pe.relative_attention_bias.shape == (3, 32, per_layer.cfg.n_heads)


def test_presets_and_overrides():
    base = build_model("nope", vocab_size=100, preset="base")
    assert (base.cfg.n_layers, base.cfg.d_model, base.cfg.n_heads, base.cfg.d_mlp) == (12, 768, 12, 3072)
    assert build_model("nope", vocab_size=VOCAB, n_layers=1).cfg.n_layers == 1
    assert build_model("nope", vocab_size=VOCAB, preset="small").cfg.n_layers == 4


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(pe="learned2"), "unknown positional encoding"),
        (dict(pe="nope", preset="huge"), "unknown preset"),
        (dict(pe="nope", n_layerz=3), "unknown model option"),
    ],
)
def test_bad_model_requests(bad, match):
    pe = bad.pop("pe")
    with pytest.raises(ProbeError, match=match):
        build_model(pe, vocab_size=VOCAB, **bad)


@pytest.mark.parametrize("normalization", ["LN", "RMS"])
def test_norms_match_torch(normalization):
    """LayerNorm against torch's own; RMSNorm against torch's RMSNorm (T5's, no bias)."""
    model = build_model("nope", vocab_size=VOCAB, n_layers=1, normalization=normalization).double()
    norm = model.blocks[0].ln1
    with torch.no_grad():
        norm.w.uniform_(0.5, 1.5)
        if normalization == "LN":
            norm.b.uniform_(-1, 1)
    x = torch.randn(2, 5, model.cfg.d_model, dtype=torch.float64)
    if normalization == "LN":
        want = torch.nn.functional.layer_norm(x, (model.cfg.d_model,), norm.w, norm.b, eps=norm.eps)
    else:
        want = torch.nn.functional.rms_norm(x, (model.cfg.d_model,), norm.w, eps=norm.eps)
    assert torch.allclose(norm(x), want, atol=1e-12)
