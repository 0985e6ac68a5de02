"""Normalized attended distance (Section 6.1), histogram and bimodality on hand-built patterns."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from probe.errors import ProbeError
from probe.metrics import attended_distances, bimodality_coefficient, histogram


def one_hot_patterns(keys: torch.Tensor, n_layers: int = 2, n_heads: int = 3) -> torch.Tensor:
    """[1, layer, head, T, T] maps in which query index i attends only to key index keys[i]."""
    T = keys.shape[0]
    rows = torch.nn.functional.one_hot(keys, T).double()  # [query, key]
    return rows.expand(1, n_layers, n_heads, T, T).clone()


def uniform_causal(n_examples: int, n_layers: int, n_heads: int, T: int) -> torch.Tensor:
    rows = torch.ones(T, T, dtype=torch.float64).tril()
    return (rows / rows.sum(-1, keepdim=True)).expand(n_examples, n_layers, n_heads, T, T).clone()


T, START = 6, 2  # six tokens, output from index 2: queries t = 3..6 (1-based)


def test_attending_to_itself_gives_one_over_t_and_zero_in_the_reference_code():
    patterns = one_hot_patterns(torch.arange(T))
    text = attended_distances(patterns, START, T)
    t = torch.arange(START + 1, T + 1, dtype=torch.float64)
    assert text.distance.tolist() == pytest.approx((1 / t).repeat(6).tolist())  # 2 layers × 3 heads
    assert text.weight.tolist() == [1.0] * 24
    ref = attended_distances(patterns, START, T, normalization="reference-code")
    assert ref.distance.tolist() == [0.0] * 24


def test_attending_to_the_first_token_gives_one_and_t_minus_one_over_t_in_the_reference_code():
    patterns = one_hot_patterns(torch.zeros(T, dtype=torch.long))
    t = torch.arange(START + 1, T + 1, dtype=torch.float64)
    assert attended_distances(patterns, START, T).distance.tolist() == pytest.approx([1.0] * 24)
    ref = attended_distances(patterns, START, T, normalization="reference-code")
    assert ref.distance.tolist() == pytest.approx(((t - 1) / t).repeat(6).tolist())


def test_argmax_picks_the_arg_max_key_and_the_earliest_on_ties():
    patterns = uniform_causal(1, 1, 1, T)  # every causal key tied: the first one wins
    patterns[0, 0, 0, 4] = torch.tensor([0.1, 0.1, 0.6, 0.1, 0.1, 0.0]).double()  # t = 5 → n = 3
    got = attended_distances(patterns, START, T).distance
    # t = 3, 4, 6 attend n = 1 (d̄ = 1); t = 5 attends n = 3: (5 − 3 + 1)/5
    assert got.tolist() == pytest.approx([1.0, 1.0, 3 / 5, 1.0])


def test_padding_and_output_start_select_the_queries_per_example():
    patterns = uniform_causal(3, 2, 4, 8)
    patterns[1, :, :, 5:] = float("nan")  # padding rows of example 1 hold garbage
    starts, lengths = torch.tensor([3, 1, 7]), torch.tensor([8, 5, 7])
    got = attended_distances(patterns, starts, lengths)
    assert got.distance.numel() == (5 + 4 + 0) * 2 * 4
    assert not torch.isnan(got.distance).any()
    assert sorted(set(got.layer.tolist())) == [0, 1] and sorted(set(got.head.tolist())) == [0, 1, 2, 3]


def test_attention_weighted_variant_matches_a_loop():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 2, 3, 7, 7, generator=gen, dtype=torch.float64)
    patterns = logits.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    starts, lengths = torch.tensor([2, 4]), torch.tensor([7, 6])
    for normalization, offset in (("text", 1), ("reference-code", 0)):
        got = attended_distances(patterns, starts, lengths, "attention", normalization)
        want = []
        for e, layer, h in itertools.product(range(2), range(2), range(3)):
            for i in range(int(starts[e]), int(lengths[e])):
                t = i + 1
                for n in range(1, t + 1):
                    want.append(((t - n + offset) / t, float(patterns[e, layer, h, i, n - 1]), layer, h))
        got_rows = sorted(zip(*(field.tolist() for field in got)))
        assert np.allclose(np.array(got_rows), np.array(sorted(want)))
    # each (query, head) carries weight 1: as many units of weight as the arg-max variant has values
    argmax = attended_distances(patterns, starts, lengths)
    assert float(got.weight.sum()) == pytest.approx(argmax.distance.numel())


def test_layer_and_head_indices_follow_the_values():
    keys = torch.arange(T)
    patterns = torch.zeros(1, 2, 3, T, T, dtype=torch.float64)
    for layer, head in itertools.product(range(2), range(3)):  # layer l, head h attends l·3 + h tokens back
        back = layer * 3 + head
        patterns[0, layer, head, keys, (keys - back).clamp_min(0)] = 1.0
    got = attended_distances(patterns, T - 1, T)  # the last query only: t = 6
    for d, layer, head in zip(got.distance.tolist(), got.layer.tolist(), got.head.tolist()):
        assert d == pytest.approx((min(layer * 3 + head, 5) + 1) / 6)


def test_bad_inputs_are_one_clear_error():
    with pytest.raises(ProbeError, match="one value per example"):
        attended_distances(uniform_causal(2, 1, 1, 4), torch.tensor([1]), torch.tensor([4, 4]))
    with pytest.raises(ProbeError, match="normalization"):
        attended_distances(uniform_causal(1, 1, 1, 4), 1, 4, normalization="paper")


def test_histogram_matches_numpy():
    gen = torch.Generator().manual_seed(0)
    edge_cases = torch.tensor([0.0, 1.0, 0.5, 1.5, -0.1], dtype=torch.float64)  # 1.5, -0.1: out of range
    values = torch.cat([torch.rand(500, generator=gen, dtype=torch.float64), edge_cases])
    weights = torch.rand(values.shape, generator=gen, dtype=torch.float64)
    got = histogram(values, weights, bins=10)
    counts, edges = np.histogram(values.numpy(), bins=10, range=(0, 1), weights=weights.numpy())
    assert np.allclose(got.mass.numpy(), counts / counts.sum())
    assert np.allclose(got.edges.numpy(), edges)
    assert float(got.mass.sum()) == pytest.approx(1.0)


def test_bimodality_coefficient_reference_points():
    gen = torch.Generator().manual_seed(0)
    uniform, normal = torch.rand(200_000, generator=gen), torch.randn(200_000, generator=gen)
    assert float(bimodality_coefficient(uniform)) == pytest.approx(5 / 9, abs=0.01)
    assert float(bimodality_coefficient(normal)) == pytest.approx(1 / 3, abs=0.01)
    two_points = torch.tensor([0.05, 0.95])
    assert float(bimodality_coefficient(two_points, torch.tensor([0.5, 0.5]))) == pytest.approx(1.0)
    # weights act like repeated values
    values, weights = torch.tensor([0.1, 0.4, 0.9]), torch.tensor([3.0, 1.0, 2.0])
    repeated = torch.tensor([0.1, 0.1, 0.1, 0.4, 0.9, 0.9])
    want = float(bimodality_coefficient(repeated))
    assert float(bimodality_coefficient(values, weights)) == pytest.approx(want)


def test_histogram_puts_exact_fractions_in_their_own_bin():
    from probe.metrics import histogram

    for dtype in (torch.float32, torch.float64):
        values = torch.tensor([k / 20 for k in range(20)], dtype=dtype)  # one value on each left edge
        assert torch.equal(histogram(values, bins=20).mass, torch.full((20,), 1 / 20, dtype=dtype))
