"""xPos and learned absolute positions against independent oracles: rotary-embedding-torch's xPos
(the attention score of every query/key pair, float64), plain Rotary with the decay off, and the
learned table read back directly and through the model's hooks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_model
from rotary_embedding_torch import RotaryEmbedding

from probe.errors import ProbeError
from probe.models import build_model

VOCAB = 23
SMALL = tiny_model(1)


def _library_xpos(r: int, base: float, scale_base: float, own_frequencies: bool) -> RotaryEmbedding:
    """rotary-embedding-torch's xPos over r dimensions, every buffer in float64. Its own frequencies
    are drawn in float32; with ``own_frequencies`` the bases chosen make them powers of two (exact in
    float32, which the test checks), otherwise they are given in float64 from RoFormer's
    theta_j = base^(-2j/r)."""
    custom = None if own_frequencies else 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # its zeta_j = (2j + 0.4 r) / (1.4 r) in float64
    try:
        library = RotaryEmbedding(r, custom_freqs=custom, theta=base, use_xpos=True, xpos_scale_base=scale_base)
    finally:
        torch.set_default_dtype(default)
    return library.double()


@pytest.mark.parametrize(
    "fraction, base, scale_base, own_frequencies, first",
    [
        (1.0, 65536.0, 512.0, True, 0),  # theta_j = 4^-j: the library's float32 frequencies are exact
        (0.5, 256.0, 16.0, True, 0),  # a strong decay on half of each head
        (1.0, 10000.0, 512.0, False, 0),  # the defaults
        (0.25, 10000.0, 32.0, False, 3000),  # far from 0: uncentred positions give the same scores
    ],
)
def test_xpos_scores_match_rotary_embedding_torch(fraction, base, scale_base, own_frequencies, first):
    """Oracle: rotary-embedding-torch's xPos (``rotate_queries_and_keys``). It pairs dimensions 2i and
    2i + 1 where probe pairs j and j + r/2, so the unrotated queries and keys are permuted into its
    layout first; it centres positions, which cancels in q . k, so the scores of every query/key pair
    (above the diagonal too) must agree, and the model's logits are those scores over sqrt(d_head)."""
    model = build_model(
        "xpos",
        vocab_size=VOCAB,
        seed=1,
        **SMALL,
        pe_options={"fraction": fraction, "base": base, "scale_base": scale_base},
    ).double()
    d_head, r, length = model.cfg.d_head, round(fraction * model.cfg.d_head), 20
    tokens = torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens, positions=torch.arange(first, first + length))
    rot_q, rot_k = cache["blocks.0.attn.hook_rot_q"], cache["blocks.0.attn.hook_rot_k"]  # [batch, pos, head, d_head]
    ours = torch.einsum("bqhd,bkhd->bhqk", rot_q, rot_k)  # [batch, head, query, key]

    library = _library_xpos(r, base, scale_base, own_frequencies)
    if own_frequencies:
        assert torch.equal(library.freqs, 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    half = torch.arange(r // 2)
    layout = torch.cat([torch.stack([half, half + r // 2], dim=-1).flatten(), torch.arange(r, d_head)])
    q = cache["blocks.0.attn.hook_q"][..., layout].transpose(1, 2)  # [batch, head, pos, d_head], its pairing
    k = cache["blocks.0.attn.hook_k"][..., layout].transpose(1, 2)
    library_q, library_k = library.rotate_queries_and_keys(q, k)
    theirs = library_q @ library_k.transpose(-1, -2)  # [batch, head, query, key]

    assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    lower = torch.ones(length, length, dtype=torch.bool).tril()
    logits = cache["blocks.0.attn.hook_attn_scores"]  # [batch, head, query, key]
    assert torch.allclose(
        logits[..., lower], theirs[..., lower] / model.blocks[0].attn.attn_scale, rtol=1e-12, atol=1e-12
    )
    assert not torch.allclose(ours, q @ k.transpose(-1, -2), atol=1e-3)  # rotated and scaled: not q . k


def test_xpos_without_decay_is_rotary():
    """scale_base=0 leaves Rotary's rotation bit for bit (same weights from the same seed); the
    default decay does not."""
    options = {"fraction": 0.5, "base": 500.0}
    rotary = build_model("rotary", vocab_size=VOCAB, seed=2, pe_options=options)
    plain = build_model("xpos", vocab_size=VOCAB, seed=2, pe_options={**options, "scale_base": 0})
    decayed = build_model("xpos", vocab_size=VOCAB, seed=2, pe_options=options)
    tokens = torch.randint(0, VOCAB, (2, 30), generator=torch.Generator().manual_seed(1))
    logits, cache = plain.run_with_cache(tokens)
    rotary_logits, rotary_cache = rotary.run_with_cache(tokens)
    assert torch.equal(logits, rotary_logits)
    for layer in range(plain.cfg.n_layers):
        for point in ("hook_rot_q", "hook_rot_k"):
            name = f"blocks.{layer}.attn.{point}"
            assert torch.equal(cache[name], rotary_cache[name])
    assert not torch.allclose(decayed(tokens), rotary_logits, atol=1e-4)


@pytest.mark.parametrize("pe", ["xpos", "learned"])
def test_bf16_autocast_runs_and_stays_near_float32(pe):
    """Under CPU bf16 autocast the logits stay finite and close to float32's: bf16 keeps 8 bits of
    mantissa (relative rounding 2^-9): the logits of this 2-layer model move by under 1% of their
    largest (0.8% measured for both PEs, as for Rotary and APE), within 2%."""
    model = build_model(pe, vocab_size=VOCAB, seed=5)
    tokens = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reference = model(tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens)
    assert torch.isfinite(logits).all()
    assert (logits.float() - reference).abs().max() < 0.02 * reference.abs().max()


@pytest.mark.parametrize(
    "pe, options, message",
    [
        ("xpos", {"scale_base": -1}, "option scale_base=-1 of xpos must be 0 (no decay) or a positive number"),
        ("xpos", {"scale_base": "nan"}, "option scale_base=nan of xpos must be 0 (no decay) or a positive number"),
        ("xpos", {"scale_base": "wide"}, "option scale_base of xpos: could not convert string to float: 'wide'"),
        (
            "xpos",
            {"fraction": 0.3},
            "option fraction=0.3 of xpos must give an even number of each head's 32 dimensions",
        ),
        ("learned", {"length": 64}, "unknown option 'length' of learned; its options: none"),
    ],
)
def test_bad_options_are_one_line(pe, options, message):
    with pytest.raises(ProbeError) as error:
        build_model(pe, vocab_size=VOCAB, pe_options=options)
    assert str(error.value) == message


def test_learned_embedding_is_the_tables_rows():
    """The vector ``hook_pos_embed`` holds, and adds to the token embedding, is W_pos's row at each
    position: 0 .. T-1 by default, the positions given otherwise."""
    model = build_model("learned", vocab_size=VOCAB, n_ctx=40).double()
    table = model.pe.W_pos.detach()  # [n_ctx, d_model]
    tokens = torch.randint(0, VOCAB, (3, 10), generator=torch.Generator().manual_seed(4))
    _, cache = model.run_with_cache(tokens)
    assert torch.equal(cache["hook_pos_embed"], table[:10].expand(3, -1, -1))
    assert torch.equal(cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + table[:10])
    _, cache = model.run_with_cache(tokens, positions=torch.arange(25, 35))
    assert torch.equal(cache["hook_pos_embed"], table[25:35].expand(3, -1, -1))


def test_learned_table_trains():
    """The rows at the positions seen get a gradient (the others none) and a step moves them."""
    model = build_model("learned", vocab_size=VOCAB, n_layers=1, n_ctx=16)
    assert dict(model.named_parameters())["pe.W_pos"] is model.pe.W_pos
    tokens, targets = torch.randint(0, VOCAB, (2, 4, 10), generator=torch.Generator().manual_seed(5))
    F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten()).backward()  # a loss at every position
    grad = model.pe.W_pos.grad  # [n_ctx, d_model]
    assert (grad[:10].abs().sum(-1) > 0).all() and torch.equal(grad[10:], torch.zeros_like(grad[10:]))
    before = model.pe.W_pos.detach().clone()
    torch.optim.SGD([model.pe.W_pos], lr=0.1).step()
    assert not torch.equal(model.pe.W_pos[:10], before[:10]) and torch.equal(model.pe.W_pos[10:], before[10:])


def test_learned_table_is_drawn_last_from_the_models_generator():
    """Seeded, the global RNG untouched, the other weights those of NoPE with the same seed, and the
    std of W_E under each scheme: 0.8 / sqrt(d_model) (gpt2) or 1 (t5). 1024 x 128 draws put the
    sample std within 0.3% of its value (1 / sqrt(2n)), so 2% is a wide margin."""
    state = torch.get_rng_state()
    model = build_model("learned", vocab_size=VOCAB, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model.pe.W_pos, build_model("learned", vocab_size=VOCAB, seed=3).pe.W_pos)
    assert not torch.equal(model.pe.W_pos, build_model("learned", vocab_size=VOCAB, seed=4).pe.W_pos)
    assert torch.equal(model.W_E, build_model("nope", vocab_size=VOCAB, seed=3).W_E)
    d_model = model.cfg.d_model
    assert model.pe.W_pos.shape == (model.cfg.n_ctx, d_model)
    assert abs(model.pe.W_pos.std().item() / (0.8 / d_model**0.5) - 1) < 0.02
    t5 = build_model("learned", vocab_size=VOCAB, seed=3, init="t5")
    assert abs(t5.pe.W_pos.std().item() - 1) < 0.02


def test_learned_positions_past_the_table_are_one_line():
    """A sequence longer than n_ctx is refused before any lookup; so are positions given outside the
    table, and generating past n_ctx."""
    model = build_model("learned", vocab_size=VOCAB, n_layers=1, n_ctx=12)
    with pytest.raises(ProbeError) as error:
        model(torch.randint(0, VOCAB, (1, 13)))
    assert str(error.value) == (
        "sequence of 13 positions is longer than this model's context (n_ctx=12); rebuild it with n_ctx=13 or more"
    )
    with pytest.raises(ProbeError) as error:
        model(torch.randint(0, VOCAB, (1, 5)), positions=torch.arange(10, 15))
    assert str(error.value) == "positions 10 .. 14 go past the learned table's 12 rows (positions 0 .. 11, n_ctx=12)"
    with pytest.raises(
        ProbeError, match=r"sequence of 13 positions is longer than this model's context \(n_ctx=12\)"
    ) as error:
        model.generate(
            torch.randint(0, VOCAB, (1, 10)), max_new_tokens=4, do_sample=False, stop_at_eos=False, verbose=False
        )
    assert "\n" not in str(error.value)
