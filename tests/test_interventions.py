"""Inference-time interventions (probe.models.interventions): known answers, on probe's models.

Each is checked against its definition computed here by hand (the softmax of logits read with no
intervention, changed as the papers write it), not against the hooks that make it."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import heads_scaled_by_hand, tiny_model

from probe.errors import ProbeError
from probe.models import build_model
from probe.models.alibi import alibi_slopes
from probe.models.attach import attach, attached, log_length_factor
from probe.models.interventions import TRAINED, Intervention, parse_intervention

VOCAB = 20
T = 24


def model_of(pe: str, **options):
    model = build_model(pe, vocab_size=VOCAB, preset="tiny", seed=0, pe_options=options, **tiny_model(n_ctx=64))
    return model.eval().double()


def tokens(batch: int = 3, length: int = T) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


def read(model, intervention: Intervention | None, x: torch.Tensor, layer: int = 0):
    """(logits, layer's pattern, layer's scores) under ``intervention`` (None: untouched). The first layer's
    scores depend on the tokens alone, so they are what a by-hand change starts from."""
    names = (f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_attn_scores")
    if intervention is None:
        logits, cache = model.run_with_cache(x, names_filter=lambda n: n in names)
    else:
        with attached(model, intervention):
            logits, cache = model.run_with_cache(x, names_filter=lambda n: n in names)
    return logits, cache[names[0]], cache[names[1]]


def identity_hooks(model):
    """The explicit attention path with nothing changed: every layer's scores hooked by the identity."""
    return [(f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook: s) for layer in range(model.cfg.n_layers)]


@pytest.mark.parametrize("pe", ["nope", "t5", "alibi", "rotary"])
def test_temperature_one_and_a_window_past_the_sequence_leave_logits_bit_identical(pe):
    model, x = model_of(pe), tokens()
    assert parse_intervention("temperature=1").is_identity and not Intervention(window=T).is_identity
    no_change = [Intervention(temperature=1.0), Intervention(window=T + 5, sinks=2), Intervention(log_length=T + 1)]
    plain = model(x)  # the fast path
    with model.hooks(fwd_hooks=identity_hooks(model)):
        explicit = model(x)  # the explicit path, every layer's scores hooked
    for intervention in no_change:  # n <= L everywhere: a factor of exactly 1; a window hiding no key
        with attached(model, intervention):
            assert torch.equal(model(x), plain), intervention.name  # folded into the fast path
            with model.hooks(fwd_hooks=identity_hooks(model)):
                assert torch.equal(model(x), explicit), intervention.name  # called as a hook


@pytest.mark.parametrize("window,sinks", [(1, 0), (5, 0), (5, 2), (8, 3)])
def test_a_window_gives_exactly_zero_attention_beyond_it_and_the_sinks_their_share(window, sinks):
    model, x = model_of("nope"), tokens()
    _, pattern, scores = read(model, None, x)
    _, windowed, _ = read(model, Intervention(window=window, sinks=sinks), x)
    t = torch.arange(T)
    seen = ((t[:, None] - t[None, :] < window) | (t[None, :] < sinks)) & (t[None, :] <= t[:, None])  # [query, key]
    assert bool((windowed[..., ~seen] == 0).all())
    expected = torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1)  # by hand from untouched logits
    torch.testing.assert_close(windowed, expected)
    assert bool((windowed[..., seen] > 0).all())


def test_log_length_temperature_equals_its_formula_at_hand_picked_lengths():
    trained = 10
    n = torch.tensor([1, 5, 10, 11, 20, 100])
    expected = [1, 1, 1, math.log(11) / math.log(10), math.log(20) / math.log(10), 2.0]
    torch.testing.assert_close(log_length_factor(n, trained), torch.tensor(expected, dtype=torch.float64))
    model, x = model_of("nope"), tokens()
    _, _, scores = read(model, None, x)
    _, pattern, changed = read(model, Intervention(log_length=trained), x)
    # query at position 19 sees n = 20 keys: its logits are multiplied by ln 20 / ln 10
    torch.testing.assert_close(changed[:, :, 19, :20], scores[:, :, 19, :20] * math.log(20) / math.log(10))
    torch.testing.assert_close(changed[:, :, :10], scores[:, :, :10])  # within L: untouched
    torch.testing.assert_close(pattern[:, :, 19], torch.softmax(scores[:, :, 19] * math.log(20) / math.log(10), -1))


def test_temperatures_compose_global_per_head_and_log_length_into_one_factor():
    model, x = model_of("alibi"), tokens()
    heads = ((0.5, 2.0), (1.0, 4.0))
    _, _, scores = read(model, None, x)
    spec = Intervention(temperature=0.8, head_temperatures=heads, log_length=12)
    _, pattern, _ = read(model, spec, x)
    n = torch.arange(1, T + 1)
    factor = (1 / 0.8) * log_length_factor(n, 12)[None, :, None] / torch.tensor(heads[0])[:, None, None]
    torch.testing.assert_close(pattern, torch.softmax(scores * factor, dim=-1))


@pytest.mark.parametrize("pe", ["t5", "alibi"])
def test_capped_distance_bias_model_equals_the_uncapped_one_inside_the_cap(pe):
    model, cap = model_of(pe), 6
    short, long = tokens(length=cap + 1), tokens(length=T)
    assert torch.equal(model(short), _with(model, Intervention(cap=cap), short))  # no distance beyond the cap
    _, _, scores = read(model, None, long)
    _, _, capped = read(model, Intervention(cap=cap), long)
    t = torch.arange(T)
    inside = (t[:, None] - t[None, :] <= cap) & (t[None, :] <= t[:, None])
    torch.testing.assert_close(capped[..., inside], scores[..., inside])
    assert not torch.allclose(
        capped[..., ~inside & (t[None, :] <= t[:, None])], scores[..., ~inside & (t[None, :] <= t[:, None])]
    )
    if pe == "alibi":  # -m (t - i) with t - i read as min(t - i, cap): scores differ by m (t - i - cap) beyond it
        slopes = alibi_slopes(model.cfg.n_heads)
        distance = (t[:, None] - t[None, :]).clamp(min=0)
        expected = scores + (slopes[:, None, None] * (distance - cap).clamp(min=0)).where(distance <= t[:, None], 0)
        keep = t[None, :] <= t[:, None]
        torch.testing.assert_close(capped[..., keep], expected[..., keep])


def test_capped_distance_rotary_scores_far_keys_as_if_they_were_at_the_cap():
    model, cap = model_of("rotary", fraction=1.0), 5
    x = tokens(batch=1)
    _, _, scores = read(model, None, x)
    _, _, capped = read(model, Intervention(cap=cap), x)
    # the logit of query t and key i beyond the cap is what the query at t - i = cap would give for that
    # pair of vectors: shift the same tokens so that the key sits `cap` behind the query
    t = torch.arange(T)
    inside = (t[:, None] - t[None, :] <= cap) & (t[None, :] <= t[:, None])
    torch.testing.assert_close(capped[..., inside], scores[..., inside])
    q_cache, k_cache = {}, {}
    model.run_with_hooks(
        x,
        fwd_hooks=[
            ("blocks.0.attn.hook_q", lambda q, hook: q_cache.setdefault("q", q)),
            ("blocks.0.attn.hook_k", lambda k, hook: k_cache.setdefault("k", k)),
        ],
    )
    q, k = q_cache["q"][0], k_cache["k"][0]  # [pos, head, d_head], before turning
    query, key = 20, 3
    turned_q = model.pe.rotate(0, q[query][None, None], cap)[0, 0]  # at position cap
    turned_k = model.pe.rotate(0, k[key][None, None], 0)[0, 0]  # at position 0
    by_hand = (turned_q * turned_k).sum(-1) / model.blocks[0].attn.attn_scale  # [head]
    torch.testing.assert_close(capped[0, :, query, key], by_hand)


def _with(model, intervention, x):
    with attached(model, intervention):
        return model(x)


@pytest.mark.parametrize("pe", ["nope", "t5", "alibi", "rotary", "cope"])
@pytest.mark.parametrize(
    "intervention",
    [
        Intervention(temperature=0.6),
        Intervention(log_length=8),
        Intervention(window=5, sinks=2),
        Intervention(head_temperatures=((0.5, 2.0), (1.5, 0.8)), log_length=10, window=9, sinks=1),
    ],
    ids=["temperature", "log-length", "window", "composed"],
)
def test_folded_into_the_fast_path_equals_the_hook_on_the_explicit_path(pe, intervention):
    model, x = model_of(pe), tokens()
    with attached(model, intervention):
        uses_fast = [block.attn.uses_fast_path() for block in model.blocks]
        fast = model(x)
        with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: p)]):
            model.set_fast_attention(False)
            explicit = model(x)  # every layer calls the intervention as a hook on its scores
            model.set_fast_attention(True)
    assert uses_fast == [pe != "cope"] * model.cfg.n_layers  # CoPE's query-dependent term: always explicit
    torch.testing.assert_close(fast, explicit, rtol=1e-9, atol=1e-9)
    assert not torch.allclose(fast, model(x))  # it did change the logits


@pytest.mark.parametrize(
    "pe, options",
    [
        ("rotary", {"fraction": 1.0}),
        ("rotary", {"fraction": 0.5}),  # part of each head turned
        ("rotary", {"scaling": "yarn", "factor": 2.0, "original_length": 12}),  # its turn at 0 scales
        ("xpos", {}),
    ],
    ids=["rotary", "rotary-half", "yarn", "xpos"],
)
@pytest.mark.parametrize(
    "intervention",
    [
        Intervention(cap=5),
        Intervention(cap=5, temperature=0.7, window=9, sinks=2),
        Intervention(cap=5, window=3),  # the far keys all outside the window: rows take nothing from them
        Intervention(cap=12, head_temperatures=((0.5, 2.0), (1.5, 0.8)), log_length=10),
    ],
    ids=["cap", "cap+temperature+window", "cap+narrow-window", "cap+heads+log-length"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["cpu-kernel", "formula"])
def test_a_capped_rotation_runs_fused_and_equals_the_hook_on_the_explicit_path(
    pe, options, intervention, fused, monkeypatch
):
    """The capped rotation as two causal attentions merged by log-sum-exp (probe.models.capped_attention),
    on the CPU flash kernel or the formula other devices take, equals the hook that rewrites the scores (whose
    far logits the test above checks by hand), padded rows included."""
    from probe.models import capped_attention

    model, x = model_of(pe, **options), tokens()
    padding = torch.ones_like(x)
    padding[0, 18:] = 0
    monkeypatch.setattr(capped_attention, "_fused", lambda q: fused)
    calls = []
    merged = capped_attention.capped_causal_attention
    monkeypatch.setattr(
        "probe.models.fused_attention.capped_causal_attention", lambda *a: calls.append(1) or merged(*a)
    )
    with attached(model, intervention):
        fast, fast_padded = model(x), model(x, attention_mask=padding)
        assert len(calls) == 2 * model.cfg.n_layers  # every layer took the merged path, both times
        model.set_fast_attention(False)
        explicit, explicit_padded = model(x), model(x, attention_mask=padding)
        model.set_fast_attention(True)
    assert len(calls) == 2 * model.cfg.n_layers
    torch.testing.assert_close(fast, explicit, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fast_padded[0, :18], explicit_padded[0, :18], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fast_padded[1:], explicit_padded[1:], rtol=1e-9, atol=1e-9)
    assert not torch.allclose(fast, model(x))  # it did change the logits


def test_a_capped_rotation_past_the_sequence_is_bit_identical_and_refuses_a_cache():
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    model, x = model_of("rotary"), tokens()
    with attached(model, Intervention(cap=T - 1)):  # no key more than T - 1 behind: nothing to cap
        assert torch.equal(model(x), model_of("rotary")(x))
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, x.size(0))
    with attached(model, Intervention(cap=4)):
        model(x[:, :10], past_kv_cache=cache)  # the prompt: one pass from position 0
        with pytest.raises(ProbeError, match="one pass"):
            model(x[:, 10:11], past_kv_cache=cache)  # a token decoded against the cache


@pytest.mark.parametrize("pe", ["nope", "alibi", "rotary"])
def test_fitted_head_scales_fold_into_the_fast_path_with_the_gradient_of_the_scores_by_hand(pe):
    """The per-head fit's scales (probe.extrapolation.tuning) run in the fused kernels; their loss and gradient are
    those of each head's logits multiplied by hand on the explicit path."""
    model, x = model_of(pe), tokens()
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    log_scales = 0.4 * torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    log_scales.requires_grad_()

    def loss_and_grad(scaled):
        with scaled:
            fast = [block.attn.uses_fast_path() for block in model.blocks]
            loss = torch.nn.functional.cross_entropy(model(x)[:, :-1].transpose(1, 2), x[:, 1:])
        (grad,) = torch.autograd.grad(loss, log_scales)
        return loss, grad, fast

    loss, grad, fast = loss_and_grad(attached(model, learned=log_scales))
    expected, expected_grad, explicit = loss_and_grad(model.hooks(fwd_hooks=heads_scaled_by_hand(log_scales, shape[0])))
    assert all(fast) and not any(explicit)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-8, atol=1e-10)
    assert grad.abs().min() > 0  # every head's scale moves the loss


def test_parse_names_and_errors():
    spec = parse_intervention("log-length+window=32+sinks=4+temperature=0.8")
    assert spec.log_length == TRAINED and spec.window == 32 and spec.sinks == 4 and spec.temperature == 0.8
    assert spec.name == "temperature=0.8+log-length+window=32+sinks=4"
    assert parse_intervention(spec.name) == spec
    assert spec.resolved(50).name == "temperature=0.8+log-length=50+window=32+sinks=4"
    assert parse_intervention("cap").resolved(50).cap == 49
    rope = parse_intervention("scaling=yarn+factor=4").resolved(30)
    assert dict(rope.rope) == {"scaling": "yarn", "factor": 4.0, "original_length": 30}
    for bad, says in [
        ("temp=2", "unknown intervention"),
        ("window=0", "at least 1"),
        ("temperature=-1", "more than 0"),
        ("sinks=3", "go with a window"),
        ("factor=2", "go with a RoPE scaling"),
        ("scaling=warp", "not a RoPE scaling"),
        ("window=3+window=4", "twice"),
        ("head-temperature=/nonexistent.json", "no file"),
    ]:
        with pytest.raises(ProbeError, match=says):
            parse_intervention(bad)
    with pytest.raises(ProbeError, match="no relative distance"):
        attach(model_of("nope"), Intervention(cap=4))


def test_permanent_hooks_survive_run_with_cache():
    model, x = model_of("nope"), tokens()
    window = Intervention(window=3)
    attach(model, window)
    _, cache = model.run_with_cache(x)
    assert bool((cache["blocks.0.attn.hook_pattern"][..., 10, :7] == 0).all())
    model.reset_hooks(including_permanent=True)
    assert bool((model.run_with_cache(x)[1]["blocks.0.attn.hook_pattern"][..., 10, :7] > 0).all())
