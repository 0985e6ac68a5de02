"""KERPLE (Chi et al. 2022) and FIRE (Li et al. 2023) against their papers' equations, written out
here in float64, scalar by scalar, from each built model's own learned parameters."""

from __future__ import annotations

import math

import pytest
import torch

from probe.errors import ProbeError
from probe.models import build_model

VOCAB = 17
TINY = dict(n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64)
LONG = 300  # past a training-like length: this toolkit trains on sequences of tens of tokens


def position_bias(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """[head, query, key] of ``blocks.{l}.attn.hook_pos_bias``, one per layer, from run_with_cache."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pos_bias"))
    return [cache[f"blocks.{layer}.attn.hook_pos_bias"] for layer in range(model.cfg.n_layers)]


def tokens_of(length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- KERPLE


def kerple_kernel(variant: str, r1: float, r2: float, m: int, n: int) -> float:
    """The paper's kernels: log -r1 log(1 + r2 |m - n|), power -r1 |m - n|^r2."""
    if variant == "log":
        return -r1 * math.log(1 + r2 * abs(m - n))
    return -r1 * abs(m - n) ** r2


@pytest.mark.parametrize("variant", ["log", "power"])
@pytest.mark.parametrize("shared", [True, False])
def test_kerple_bias_is_the_papers_kernel(variant, shared):
    options = {"variant": variant, "shared": shared}
    model = build_model("kerple", vocab_size=VOCAB, seed=1, pe_options=options, **TINY).double()
    biases = position_bias(model, tokens_of(LONG))
    queries = [0, 1, 7, 60, LONG - 1]
    for layer, bias in enumerate(biases):
        table = 0 if shared else layer
        r1, r2 = model.pe.r1[table].tolist(), model.pe.r2[table].tolist()
        assert all(r > 0 for r in r1 + r2) and (variant == "log" or max(r2) <= 2)
        expected = torch.tensor(
            [
                [[kerple_kernel(variant, r1[h], r2[h], m, n) if n <= m else 0.0 for n in range(LONG)] for m in queries]
                for h in range(model.cfg.n_heads)
            ],
            dtype=torch.float64,
        )
        got = bias[:, queries, :]  # [head, query, key]
        causal = torch.tensor([[n <= m for n in range(LONG)] for m in queries])  # [query, key]
        torch.testing.assert_close(got[:, causal], expected[:, causal], rtol=1e-12, atol=1e-14)
    assert torch.equal(biases[0], biases[1]) == shared
    assert model.pe.r1.shape == (1 if shared else 2, 4)


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_bias_never_grows_with_distance(variant):
    model = build_model("kerple", vocab_size=VOCAB, seed=2, pe_options={"variant": variant}, **TINY).double()
    draws = [model.pe.r2.detach().clone(), torch.full_like(model.pe.r2, 0.01), torch.full_like(model.pe.r2, 2.0)]
    for r2 in draws:  # the drawn exponents and the edges of the feasible set
        with torch.no_grad():
            model.pe.r2.copy_(r2)
        bias = position_bias(model, tokens_of(LONG))[0]
        last = bias[:, -1, :]  # [head, key]: key n at distance LONG - 1 - n
        by_distance = last.flip(-1)  # [head, distance 0 .. LONG - 1]
        assert (by_distance[:, 1:] <= by_distance[:, :-1]).all()
        assert (by_distance[:, 1:] < by_distance[:, :1]).all()  # strictly below distance 0


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_r1_r2_stay_in_range_after_a_step_that_pushes_them_out(variant):
    model = build_model("kerple", vocab_size=VOCAB, seed=3, pe_options={"variant": variant}, **TINY).double()
    optimizer = torch.optim.SGD(model.pe.parameters(), lr=100.0)
    tokens = tokens_of(20)
    model(tokens)
    (model.pe.r1.sum() + model.pe.r2.sum()).backward()  # gradient +1: the step subtracts 100
    optimizer.step()
    assert (model.pe.r1 < 0).all() and (model.pe.r2 < 0).all()  # the step did push them out
    bias = position_bias(model, tokens)[0]  # the next pass projects them back, as the authors' code does
    assert torch.equal(model.pe.r1, torch.full_like(model.pe.r1, 0.01))
    assert torch.equal(model.pe.r2, torch.full_like(model.pe.r2, 0.01))
    expected = torch.tensor([kerple_kernel(variant, 0.01, 0.01, 19, n) for n in range(20)], dtype=torch.float64)
    torch.testing.assert_close(bias[:, -1, :], expected.expand(4, -1), rtol=1e-12, atol=1e-14)
    if variant == "power":  # and r2 <= 2 after a step that pushes it above
        optimizer.zero_grad()
        (-model.pe.r2.sum()).backward()
        optimizer.step()
        assert (model.pe.r2 > 2).all()
        model(tokens)
        assert torch.equal(model.pe.r2, torch.full_like(model.pe.r2, 2.0))


# ---------------------------------------------------------------- FIRE


def fire_parameters(pe, table: int) -> dict:
    """Every learned number of one FIRE table, as Python floats."""
    return dict(
        c=abs(pe.c[table].item()),
        L=abs(pe.threshold_scale[table].item()) * pe.option["threshold"],
        w_in=pe.weight_in[table].tolist(),
        b_in=pe.bias_in[table].tolist(),
        w_out=pe.weight_out[table].tolist(),
        b_out=pe.bias_out[table].tolist(),
    )


def fire_bias(p: dict, i: int, j: int, head: int) -> float:
    """b(i, j) = f_theta(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), f_theta a ReLU MLP
    1 -> hidden -> heads; the paper's listing adds 1e-6 to the normaliser."""

    def psi(x: float) -> float:
        return math.log(p["c"] * x + 1)

    x = psi(i - j) / (psi(max(p["L"], i)) + 1e-6)
    hidden = [max(0.0, w * x + b) for w, b in zip(p["w_in"], p["b_in"])]
    return sum(h * row[head] for h, row in zip(hidden, p["w_out"])) + p["b_out"][head]


@pytest.mark.parametrize("shared", [False, True])
def test_fire_bias_is_the_papers_function(shared):
    model = build_model(
        "fire", vocab_size=VOCAB, seed=4, pe_options={"shared": shared, "threshold": 8.0}, **TINY
    ).double()
    biases = position_bias(model, tokens_of(LONG))
    threshold = model.pe.option["threshold"]
    queries = [0, 1, int(threshold) - 1, int(threshold), int(threshold) + 1, 40, LONG - 1]  # below, at, above L
    for layer, bias in enumerate(biases):
        p = fire_parameters(model.pe, 0 if shared else layer)
        for i in queries:
            expected = torch.tensor(
                [[fire_bias(p, i, j, h) for j in range(i + 1)] for h in range(4)], dtype=torch.float64
            )
            torch.testing.assert_close(bias[:, i, : i + 1], expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(biases[0], biases[1]) == shared
    assert model.pe.weight_out.shape == (1 if shared else 2, 32, 4)


def test_fire_distance_zero_and_the_threshold():
    model = build_model(
        "fire", vocab_size=VOCAB, seed=5, pe_options={"threshold": 8.0}, **{**TINY, "n_layers": 1}
    ).double()
    with torch.no_grad():
        model.pe.threshold_scale.fill_(-2.5)  # L = |s| x 8 = 20: the sign is dropped, as in the listing
    bias = position_bias(model, tokens_of(60))[0]  # [head, query, key]
    p = fire_parameters(model.pe, 0)
    assert p["L"] == 20.0
    # distance 0: f_theta(0) = W_out^T relu(b_in) + b_out at every query, whatever i and L
    f0 = torch.tensor(
        [sum(max(0.0, b) * row[h] for b, row in zip(p["b_in"], p["w_out"])) + p["b_out"][h] for h in range(4)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(bias.diagonal(dim1=1, dim2=2), f0[:, None].expand(4, 60), rtol=1e-12, atol=1e-12)
    # queries at or below L share the normaliser psi(L): the bias depends on the distance only there
    for d in (1, 5, 12):
        below = torch.stack([bias[:, i, i - d] for i in range(d, 21)])  # [query, head]
        torch.testing.assert_close(below, below[:1].expand_as(below), rtol=0, atol=0)
        expected = torch.tensor([fire_bias(p, 20, 20 - d, h) for h in range(4)], dtype=torch.float64)
        torch.testing.assert_close(below[0], expected, rtol=1e-12, atol=1e-12)
    # above L the normaliser is psi(i): the same distance lands elsewhere in [0, 1] for every query
    d = 5
    above = torch.stack([bias[:, i, i - d] for i in range(21, 60)])  # [query, head]
    expected = torch.tensor([[fire_bias(p, i, i - d, h) for h in range(4)] for i in range(21, 60)], dtype=torch.float64)
    torch.testing.assert_close(above, expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(above[0], above[-1])


def test_fire_is_shift_invariant_only_below_the_threshold():
    """A prefix of 5 moves every position by 5: below L nothing changes, past L the bias does."""
    model = build_model(
        "fire", vocab_size=VOCAB, seed=6, pe_options={"threshold": 8.0}, **{**TINY, "n_layers": 1}
    ).double()
    window = tokens_of(8)
    shifted = torch.cat([tokens_of(5, seed=1), window], dim=1)
    for scale, invariant in ((4.0, True), (0.25, False)):  # L = 32 > 12, L = 2 < 7
        with torch.no_grad():
            model.pe.threshold_scale.fill_(scale)
        alone, moved = position_bias(model, window)[0], position_bias(model, shifted)[0][:, 5:, 5:]
        assert torch.allclose(alone.tril(), moved.tril(), rtol=0, atol=1e-12) == invariant


def test_fire_bias_is_not_rounded_under_bf16_autocast():
    model = build_model("fire", vocab_size=VOCAB, seed=7, **TINY)
    tokens = tokens_of(40)
    plain = position_bias(model, tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = position_bias(model, tokens)
    for a, b in zip(plain, autocast):
        assert b.dtype == torch.float32 and torch.equal(a, b)


# ---------------------------------------------------------------- both


@pytest.mark.parametrize("pe,options", [("kerple", {}), ("kerple", {"variant": "power"}), ("fire", {})])
def test_generation_with_the_kv_cache_equals_without(pe, options):
    model = build_model(pe, vocab_size=VOCAB, seed=8, pe_options=options, **TINY).double()
    prompt = tokens_of(12)
    runs = [
        model.generate(
            prompt, max_new_tokens=10, do_sample=False, stop_at_eos=False, use_past_kv_cache=cache, verbose=False
        )
        for cache in (True, False)
    ]
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (1, 22)


@pytest.mark.parametrize(
    "pe,options,match",
    [
        ("kerple", {"variant": "cubic"}, "option variant of kerple is 'cubic'; choose one of log, power$"),
        ("kerple", {"shared": "sometimes"}, "option shared of kerple: 'sometimes' is not true or false$"),
        ("fire", {"hidden": 0}, "option hidden=0 of fire must be positive$"),
        ("fire", {"c": -0.1}, "option c=-0.1 of fire must be positive$"),
        ("fire", {"threshold": 0}, "option threshold=0 of fire must be positive$"),
        ("fire", {"width": 8}, "unknown option 'width' of fire; its options: hidden, c, threshold, shared$"),
    ],
)
def test_bad_options_are_one_line(pe, options, match):
    with pytest.raises(ProbeError, match=match) as error:
        build_model(pe, vocab_size=VOCAB, pe_options=options, **TINY)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("pe,options", [("kerple", {}), ("kerple", {"variant": "power"}), ("fire", {})])
def test_same_seed_same_weights_other_seed_other_weights(pe, options):
    a, b, c = (build_model(pe, vocab_size=VOCAB, seed=seed, pe_options=options, **TINY) for seed in (9, 9, 10))
    names = [name for name, _ in a.pe.named_parameters()]
    assert names and all(torch.equal(x, y) for x, y in zip(a.pe.parameters(), b.pe.parameters()))
    drawn = ["r1", "r2"] if pe == "kerple" else ["weight_in", "bias_in", "weight_out", "bias_out"]
    for name in drawn:
        assert not torch.equal(getattr(a.pe, name), getattr(c.pe, name)), name
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# ---------------------------------------------------------------- options at inference


@pytest.mark.parametrize(
    "pe, given",
    [("fire", {"c": 0.5}), ("kerple", {"variant": "power"})],
    ids=["fire's starting c: the weights overwrite it", "kerple's kernel: r1, r2 mean another thing"],
)
def test_an_option_a_trained_model_cannot_be_read_under_is_refused_at_inference(tmp_path, pe, given):
    from probe.analysis.evaluation import inference_options
    from probe.models.checkpoint import load_checkpoint, save_checkpoint
    from probe.runs.folders import Run

    model = build_model(pe, vocab_size=VOCAB, seed=0, **TINY)
    save_checkpoint(model, tmp_path)
    name = next(iter(given))
    said = f"option {name} of {pe} is set at training, not at inference"
    for read in (
        lambda: model.pe.with_options(given),
        lambda: load_checkpoint(tmp_path, pe_options=given),
        lambda: inference_options([Run(tmp_path, {"pe": pe})], given),  # eval: before any run is evaluated
    ):
        with pytest.raises(ProbeError, match=said) as raised:
            read()
        assert len(str(raised.value).splitlines()) == 1


def test_fires_threshold_is_read_at_inference_and_moves_the_bias(tmp_path):
    """The threshold is L's scale (L = |s| x threshold, s learned): another value reads the same weights with
    another normaliser, so it is an inference option, unlike c."""
    from probe.models.checkpoint import load_checkpoint, save_checkpoint

    model = build_model("fire", vocab_size=VOCAB, seed=0, pe_options={"threshold": 8.0}, **TINY)
    save_checkpoint(model, tmp_path)
    tokens = tokens_of(40)
    trained = position_bias(load_checkpoint(tmp_path), tokens)[0]
    stretched = position_bias(load_checkpoint(tmp_path, pe_options={"threshold": 32.0}), tokens)[0]
    # queries past both thresholds share the normaliser psi(i); those under 32 read psi(32), not psi(max(8, i))
    torch.testing.assert_close(stretched[:, 32:], trained[:, 32:], rtol=0, atol=0)
    assert not torch.allclose(stretched[:, 10:32], trained[:, 10:32])
