"""JSD, D_AT and the layerwise min-head distance against independent brute-force references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from probe.errors import ProbeError
from probe.metrics import head_distance, jsd, layer_distances

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-4, atol=2e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def causal_patterns(
    *shape: int, dtype=torch.float64, sharpness: float = 3.0, seed: int = 0, hard: float = 0.2
) -> torch.Tensor:
    """Random causal attention maps [*shape[:-1], T, T]; a fraction `hard` of rows one-hot (exact zeros)."""
    gen = torch.Generator().manual_seed(seed)
    T = shape[-1]
    logits = torch.randn(*shape, T, generator=gen, dtype=torch.float64) * sharpness
    hard = torch.rand(*shape, 1, generator=gen, dtype=torch.float64) < hard
    logits = torch.where(hard, logits * 1e4, logits)
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return logits.softmax(-1).to(dtype)


def scipy_jsd(p: np.ndarray, q: np.ndarray) -> float:
    return float(jensenshannon(p, q) ** 2)  # natural log (scipy's default base)


def brute_head_distance(P: np.ndarray, Q: np.ndarray, length: int) -> float:
    return float(np.mean([scipy_jsd(P[t, : t + 1], Q[t, : t + 1]) for t in range(length)]))


def brute_reference_code(P: np.ndarray, Q: np.ndarray, length: int) -> float:
    """The released code's per-row ½·(KL(M‖P) + KL(M‖Q)), written out."""
    rows = []
    for t in range(length):
        p, q = P[t, : t + 1], Q[t, : t + 1]
        m = (p + q) / 2
        rows.append(0.5 * (np.sum(m * np.log(m / p)) + np.sum(m * np.log(m / q))))
    return float(np.mean(rows))


# --- jsd ---------------------------------------------------------------------------------------

DEGENERATE = {
    "identical": ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]),
    "one-hot same": ([0.0, 1.0, 0.0], [0.0, 1.0, 0.0]),
    "one-hot different": ([1.0, 0.0, 0.0], [0.0, 0.0, 1.0]),
    "disjoint support": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75]),
    "partial overlap": ([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]),
    "one-hot vs spread": ([1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_jsd_matches_scipy_on_degenerate_distributions(case, dtype):
    p, q = DEGENERATE[case]
    got = jsd(torch.tensor(p, dtype=dtype), torch.tensor(q, dtype=dtype))
    assert got.dtype == dtype
    assert float(got) == pytest.approx(scipy_jsd(np.array(p), np.array(q)), abs=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_jsd_matches_scipy_on_random_distributions(dtype):
    torch.manual_seed(1)
    p, q = torch.distributions.Dirichlet(torch.full((7,), 0.3, dtype=torch.float64)).sample((2, 50))
    p = torch.where(torch.rand(p.shape, dtype=torch.float64) < 0.2, 0.0, p)  # some exact zeros
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    got = jsd(p.to(dtype), q.to(dtype))
    want = [scipy_jsd(a, b) for a, b in zip(p.numpy(), q.numpy())]
    torch.testing.assert_close(got, torch.tensor(want, dtype=dtype), **TOL[dtype])


def test_jsd_bounds_broadcasting_and_dim():
    disjoint = jsd(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), metric="jsd")
    assert float(disjoint) == pytest.approx(math.log(2))
    p = causal_patterns(3, 1, 5)[..., -1, :]  # [3, 1, 5]
    q = causal_patterns(1, 4, 5, seed=1)[..., -1, :]  # [1, 4, 5]
    got = jsd(p, q)
    assert got.shape == (3, 4)
    assert float(got[2, 3]) == pytest.approx(scipy_jsd(p[2, 0].numpy(), q[0, 3].numpy()))
    torch.testing.assert_close(jsd(p.transpose(-1, -2), q.transpose(-1, -2), dim=-2), got)


def test_reference_code_formula_on_a_hand_worked_case():
    # P = (1/2, 1/2), Q = (1/4, 3/4), M = (3/8, 5/8):
    # KL(M‖P) = 3/8·ln(3/4) + 5/8·ln(5/4) = 0.0315839...
    # KL(M‖Q) = 3/8·ln(3/2) + 5/8·ln(5/6) = 0.0380985...
    # ½·(KL(M‖P) + KL(M‖Q)) = 0.0348412; the definition ½·(KL(P‖M) + KL(Q‖M)) = 0.0338221.
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    q = torch.tensor([0.25, 0.75], dtype=torch.float64)
    assert float(jsd(p, q, metric="reference-code")) == pytest.approx(0.03484119247315164, rel=1e-12)
    assert float(jsd(p, q)) == pytest.approx(0.033822075568605205, rel=1e-12)
    # Unbounded where the definition is not: M has mass where P has none.
    assert math.isinf(jsd(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), metric="reference-code"))


def test_unknown_metric_is_one_clear_error():
    with pytest.raises(ProbeError, match="accepted: jsd, reference-code"):
        jsd(torch.ones(2) / 2, torch.ones(2) / 2, metric="kl")


# --- head_distance and layer_distances -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_head_distance_matches_scipy_loop(dtype):
    P, Q = causal_patterns(2, 7, dtype=dtype), causal_patterns(2, 7, dtype=dtype, seed=3)
    lengths = torch.tensor([7, 4])
    got = head_distance(P, Q, lengths=lengths)
    Pn, Qn = P.double().numpy(), Q.double().numpy()
    want = [brute_head_distance(Pn[i], Qn[i], int(lengths[i])) for i in range(2)]
    torch.testing.assert_close(got, torch.tensor(want, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_distances_match_brute_force_over_all_head_pairs(dtype):
    A = causal_patterns(2, 3, 4, 8, dtype=dtype)  # [example, layer, head_A, T, T]
    B = causal_patterns(2, 3, 5, 8, dtype=dtype, seed=7)  # 5 heads: head counts may differ
    lengths = torch.tensor([8, 5])
    got = layer_distances(A, B, lengths=lengths)

    An, Bn = A.double().numpy(), B.double().numpy()
    want = np.empty((2, 3, 4, 5))
    for e, layer, a, b in itertools.product(range(2), range(3), range(4), range(5)):
        want[e, layer, a, b] = brute_head_distance(An[e, layer, a], Bn[e, layer, b], int(lengths[e]))
    torch.testing.assert_close(got.pairwise, torch.tensor(want, dtype=dtype), **TOL[dtype])
    want_min = torch.tensor(want.min(axis=(-1, -2)), dtype=dtype)
    torch.testing.assert_close(got.per_layer, want_min, **TOL[dtype])
    flat = want.reshape(2, 3, -1).argmin(-1)
    assert got.head_pairs.tolist() == np.stack([flat // 5, flat % 5], -1).tolist()
    assert got.per_layer.dtype == dtype and got.head_pairs.dtype == torch.int64


def test_minimum_on_a_same_index_pair_is_found_and_reference_code_misses_it():
    A = causal_patterns(2, 4, 6, hard=0.0)  # [layer, head, T, T]; no exact zeros: the KL form stays finite
    B = causal_patterns(2, 4, 6, seed=11, hard=0.0)
    B[:, 2] = A[:, 2]  # head 2 of A and head 2 of B are identical: D_AT = 0 at the pair (2, 2)
    got = layer_distances(A, B)
    assert got.per_layer.tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert got.head_pairs.tolist() == [[2, 2], [2, 2]]

    ref = layer_distances(A, B, metric="reference-code")
    assert (ref.per_layer > 0.01).all()  # the (2, 2) pair is never visited
    An, Bn = A.numpy(), B.numpy()
    for layer in range(2):  # the released loop: combinations as (src = head of B, tgt = head of A)
        visited = {
            (tgt, src): brute_reference_code(An[layer, tgt], Bn[layer, src], 6)
            for src, tgt in itertools.combinations(range(4), 2)
        }
        best = min(visited, key=visited.get)
        assert float(ref.per_layer[layer]) == pytest.approx(visited[best], rel=1e-9)
        assert tuple(ref.head_pairs[layer].tolist()) == best
        # the full matrix still holds every pair
        assert float(ref.pairwise[layer, 2, 2]) == pytest.approx(0.0, abs=1e-12)


def test_reference_code_pairwise_matches_its_formula():
    A, B = causal_patterns(1, 3, 6, hard=0.0), causal_patterns(1, 3, 6, seed=5, hard=0.0)
    got = layer_distances(A, B, metric="reference-code").pairwise[0]
    for a, b in itertools.product(range(3), range(3)):
        want = brute_reference_code(A[0, a].numpy(), B[0, b].numpy(), 6)
        assert float(got[a, b]) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("metric", ["jsd", "reference-code"])
def test_padded_batch_gives_the_same_distances_as_each_example_alone(metric):
    lengths = [9, 5, 2]
    A = torch.full((3, 2, 3, 9, 9), math.nan, dtype=torch.float64)  # padding holds garbage
    B = torch.full((3, 2, 4, 9, 9), math.nan, dtype=torch.float64)
    alone = []
    for i, n in enumerate(lengths):
        a = causal_patterns(2, 3, n, seed=i, hard=0.0)
        b = causal_patterns(2, 4, n, seed=10 + i, hard=0.0)
        A[i, :, :, :n, :n], B[i, :, :, :n, :n] = a, b
        A[i, :, :, :n, n:], B[i, :, :, :n, n:] = 0.0, 0.0  # real rows: causal zeros beyond the query
        alone.append(layer_distances(a, b, metric=metric))
    batched = layer_distances(A, B, lengths=torch.tensor(lengths), metric=metric)
    for i, one in enumerate(alone):
        torch.testing.assert_close(batched.pairwise[i], one.pairwise)
        torch.testing.assert_close(batched.per_layer[i], one.per_layer)
        assert batched.head_pairs[i].tolist() == one.head_pairs.tolist()
    single_pair = head_distance(A[:, :, 0], B[:, :, 1], lengths=torch.tensor(lengths), metric=metric)
    torch.testing.assert_close(single_pair, batched.pairwise[:, :, 0, 1])


@pytest.mark.parametrize("chunk_elements", [1, 50, 10**9])
def test_blocking_does_not_change_the_result(chunk_elements):
    A, B = causal_patterns(2, 2, 3, 7), causal_patterns(2, 2, 4, 7, seed=2)
    lengths = torch.tensor([7, 3])
    want = head_distance(A[:, :, :, None], B[:, :, None], lengths=lengths)  # [example, layer, head_A, head_B]
    got = layer_distances(A, B, lengths=lengths, chunk_elements=chunk_elements)
    torch.testing.assert_close(got.pairwise, want)


def test_float32_agrees_with_float64():
    A, B = causal_patterns(2, 12, 64), causal_patterns(2, 12, 64, seed=4)
    d64 = layer_distances(A, B)
    d32 = layer_distances(A.float(), B.float())
    torch.testing.assert_close(d32.pairwise.double(), d64.pairwise, rtol=0, atol=2e-5)


def test_mismatched_models_are_one_clear_error():
    with pytest.raises(ProbeError, match="models of the same depth"):
        layer_distances(causal_patterns(2, 3, 5), causal_patterns(3, 3, 5))
    with pytest.raises(ProbeError, match="same length"):
        layer_distances(causal_patterns(2, 3, 5), causal_patterns(2, 3, 6))
    with pytest.raises(ProbeError, match="lengths"):
        A = causal_patterns(2, 2, 3, 5)
        layer_distances(A, A, lengths=torch.tensor([5, 6]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_layer_distances_on_gpu_match_cpu():
    A, B = causal_patterns(2, 2, 12, 33), causal_patterns(2, 2, 12, 33, seed=9)
    lengths = torch.tensor([33, 20])
    for metric in ("jsd", "reference-code"):
        cpu = layer_distances(A, B, lengths=lengths, metric=metric)
        gpu = layer_distances(A.cuda(), B.cuda(), lengths=lengths.cuda(), metric=metric)
        torch.testing.assert_close(gpu.pairwise.cpu(), cpu.pairwise)
        assert gpu.head_pairs.cpu().tolist() == cpu.head_pairs.tolist()
