"""The positions tensor: computed once per pass and handed to the PE, overridable, and randomized
(Ruoss et al. 2023) as a model option that composes with any PE."""

from __future__ import annotations

import pytest
import torch

import probe
from probe.errors import ProbeError
from probe.models import build_model, sinusoidal_embedding
from probe.tasks.decoding import greedy_decode

VOCAB = 11


def test_positions_given_move_an_absolute_pe_and_not_a_relative_one():
    """Shifting every position by 7 is the same as the APE of positions 7 .. T + 6, and leaves a
    relative PE's logits unchanged."""
    tokens = torch.randint(0, VOCAB, (2, 9))
    shifted = torch.arange(7, 16)
    ape = build_model("ape", vocab_size=VOCAB, n_layers=1).double()
    _, cache = ape.run_with_cache(tokens, positions=shifted)
    expected = sinusoidal_embedding(shifted, ape.cfg.d_model)
    assert torch.allclose(cache["hook_pos_embed"][0], expected, atol=1e-12)
    for pe in ("t5", "alibi", "rotary"):
        model = build_model(pe, vocab_size=VOCAB).double()
        assert torch.allclose(model(tokens, positions=shifted), model(tokens), atol=1e-10)


def test_positions_of_the_wrong_shape_are_one_line():
    model = build_model("rotary", vocab_size=VOCAB)
    with pytest.raises(ProbeError, match=r"positions must give one per token, cached ones included \(9\)"):
        model(torch.randint(0, VOCAB, (1, 9)), positions=torch.arange(8))


@pytest.mark.parametrize("pe", probe.PAPER_PES)
def test_randomized_positions_are_sorted_distinct_in_range_and_seeded(pe):
    model = build_model(pe, vocab_size=VOCAB, random_positions=64).train()
    tokens = torch.randint(0, VOCAB, (2, 20))
    draws = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        model(tokens)
        draws.append(model.pe.positions.clone())
    for positions in draws:
        assert positions.shape == (20,) and positions.min() >= 0 and positions.max() < 64
        assert bool((positions[1:] > positions[:-1]).all())  # sorted and distinct
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    model.eval()
    model(tokens)
    assert torch.equal(model.pe.positions, torch.arange(20))  # analyses see 0 .. T - 1 unless told


def test_randomized_positions_spread_over_the_whole_range():
    """Every position of 0 .. N - 1 is drawn about equally often (N = 32, 16 of them per draw)."""
    model = build_model("nope", vocab_size=VOCAB, random_positions=32)
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(32)
    for _ in range(2000):
        counts[model.sample_positions(16, generator)] += 1
    assert counts.min() > 0.4 * 2000 and counts.max() < 0.6 * 2000  # each is drawn with probability 1/2


def test_decoding_a_randomized_model_draws_one_plan_and_the_cache_keeps_it():
    """With randomized positions the test-time positions are drawn too (Ruoss et al.), once per
    decode: the KV cache and a full recomputation then agree token for token."""
    model = build_model("rotary", vocab_size=VOCAB, random_positions=96, seed=3).double().eval()
    prompts = torch.randint(0, VOCAB, (3, 6))
    cached = greedy_decode(
        model, prompts, 12, eos_id=VOCAB, pad_id=0, use_cache=True, generator=torch.Generator().manual_seed(5)
    )
    full = greedy_decode(
        model, prompts, 12, eos_id=VOCAB, pad_id=0, use_cache=False, generator=torch.Generator().manual_seed(5)
    )
    assert torch.equal(cached, full)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"random_positions": 2000}, "random_positions must be in 0 .. n_ctx=1024, got 2000"),
        ({"random_positions": -1}, "random_positions must be in 0 .. n_ctx=1024, got -1"),
    ],
)
def test_bad_random_positions_are_one_line(overrides, message):
    with pytest.raises(ProbeError, match=message):
        build_model("nope", vocab_size=VOCAB, **overrides)


def test_a_sequence_longer_than_the_random_range_is_one_line():
    model = build_model("nope", vocab_size=VOCAB, random_positions=8).train()
    with pytest.raises(ProbeError, match="a sequence of 9 tokens needs more than random_positions=8 positions"):
        model(torch.randint(0, VOCAB, (1, 9)))


def test_a_head_whose_logits_do_not_vary_is_constant_not_absolute():
    """Constant logits, exactly or up to the sums' rounding, explain nothing by any basis: no kind but "constant"."""
    from probe.metrics.position_stats import decompose_logits, head_kind, logit_sums

    T = 13
    scores = torch.full((1, 2, 1, T, T), 0.7, dtype=torch.float64)  # [example, layer, head, query, key]
    scores[:, 1] = 1e8 + 0.3  # huge and constant: Σx² − (Σx)²/n is rounding, not variance
    lengths = torch.tensor([T])
    shares = decompose_logits(logit_sums(scores, lengths))
    assert head_kind(shares) == [["constant"], ["constant"]]
