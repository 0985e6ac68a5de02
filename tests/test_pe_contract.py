"""The contract every registered PE keeps, driven by the registry: each PE with its default options,
each option set it lists in ``examples``, and randomized positions, checked for the same things.

A new PE is covered by registering it; its maths is checked by its own oracle test.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from transformer_lens import HookedRootModule, model_protocol
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
from transformer_lens.model_protocol import TransformerLensModelWithWeights

from probe.models import build_model, load_checkpoint, save_checkpoint
from probe.models.registry import PE_CLASSES

VOCAB = 11
VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *((kind, {}, {}) for kind in PE_CLASSES),
    *((kind, options, {}) for kind, cls in PE_CLASSES.items() for options in cls.examples),
    *((kind, {}, {"random_positions": 64}) for kind in ("rotary", "t5")),
]
IDS = [kind + "".join(f"+{k}={v}" for k, v in {**options, **model}.items()) for kind, options, model in VARIANTS]


def _model(kind: str, options: dict, overrides: dict, seed: int = 3) -> HookedRootModule:
    return build_model(kind, vocab_size=VOCAB, seed=seed, n_layers=2, pe_options=options, **overrides).double().eval()


@pytest.fixture(params=VARIANTS, ids=IDS)
def variant(request):
    return request.param


def test_the_protocols_members_are_found_statically():
    """Python 3.12's isinstance against a runtime-checkable protocol, like beartype's check, looks members up
    with inspect.getattr_static: a model's are all there on any Python, its submodules among them."""
    model = _model("nope", {}, {})
    protocols = [c for c in TransformerLensModelWithWeights.__mro__ if c.__module__ == model_protocol.__name__]
    members = {name for c in protocols for name in vars(c) if not name.startswith("_")}
    assert {"cfg", "blocks", "ln_final", "run_with_cache"} <= members
    assert [name for name in sorted(members) if not _static(model, name)] == []


def _static(model: Any, name: str) -> bool:
    try:
        inspect.getattr_static(model, name)
    except AttributeError:
        return False
    return True


def test_hooks_fire_with_their_shapes(variant):
    model = _model(*variant)
    pe = model.pe
    tokens = torch.randint(0, VOCAB, (3, 9))
    logits, cache = model.run_with_cache(tokens)
    assert isinstance(model, HookedRootModule) and isinstance(model, TransformerLensModelWithWeights)
    assert torch.allclose(logits, model(tokens), atol=1e-10)
    heads = model.cfg.n_heads
    pattern = cache["blocks.1.attn.hook_pattern"]  # [batch, head, query, key]
    assert pattern.shape == (3, heads, 9, 9) and torch.all(pattern.triu(1) == 0)
    assert torch.allclose(pattern.sum(-1), torch.ones(3, heads, 9, dtype=pattern.dtype))
    if pe.adds_embedding:
        assert cache["hook_pos_embed"].shape == (3, 9, model.cfg.d_model)
    for layer in range(model.cfg.n_layers):
        name = f"blocks.{layer}.attn."
        assert (name + "hook_pos_bias" in cache) == pe.adds_bias
        rotated = pe.rotates and pe.rotates_layer(layer)
        assert (name + "hook_rot_q" in cache) == (name + "hook_rot_k" in cache) == rotated
        assert (name + "hook_pos_scores" in cache) == pe.scores_term
        if pe.adds_bias:
            assert cache[name + "hook_pos_bias"].shape == (heads, 9, 9)
        if pe.scores_term:
            assert cache[name + "hook_pos_scores"].shape == (3, heads, 9, 9)


def test_fast_path_equals_hooked_path(variant):
    """Logits and gradients agree between scaled_dot_product_attention and the explicit path."""
    model = _model(*variant)
    tokens = torch.randint(0, VOCAB, (2, 15))
    results = []
    for fast in (True, False):
        model.zero_grad()
        model.set_fast_attention(fast)
        assert model.blocks[0].attn.uses_fast_path() == (fast and not model.pe.scores_term)
        logits = model(tokens)
        logits.pow(2).mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-10)
    for fast_grad, hooked_grad in zip(results[0][1], results[1][1]):
        assert torch.allclose(fast_grad, hooked_grad, atol=1e-10)


def test_kv_cache_equals_full_forward(variant):
    model = _model(*variant)
    if model.pe.depends_on_length:
        pytest.skip("the encoding follows the pass's length (dynamic NTK), so a cache cannot equal a full pass")
    tokens = torch.randint(0, VOCAB, (2, 10))
    full = model(tokens)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, 2)
    steps = [model(tokens[:, :6], past_kv_cache=cache, attention_mask=torch.ones(2, 6, dtype=torch.long))]
    for t in range(6, 10):
        steps.append(
            model(tokens[:, t : t + 1], past_kv_cache=cache, attention_mask=torch.ones(2, 1, dtype=torch.long))
        )
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-9)


def test_generate_with_the_kv_cache_scores_as_a_full_forward(variant):
    """TransformerLens' ``generate`` embeds every token so far at each step; each new token's logits
    must be the full forward's at its position (an embedding PE once added its vectors at twice the
    position there)."""
    model = _model(*variant, seed=4)
    if model.pe.depends_on_length:
        pytest.skip("the encoding follows the pass's length (dynamic NTK), so a cache cannot equal a full pass")
    prompt = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    out = model.generate(
        prompt,
        max_new_tokens=5,
        do_sample=False,
        stop_at_eos=False,
        verbose=False,
        use_past_kv_cache=True,
        output_logits=True,
    )
    with torch.no_grad():
        full = model(out.sequences.clone())  # [batch, pos, vocab]; generate's tensors are inference-mode ones
    for step, logits in enumerate(out.logits):
        assert torch.allclose(logits, full[:, prompt.size(1) - 1 + step], atol=1e-10)


def test_padded_batch_equals_one_at_a_time(variant):
    """Right padding: the real positions of a short sequence batched with a long one score as it alone."""
    model = _model(*variant)
    if model.pe.depends_on_length:
        pytest.skip("the encoding follows the pass's length (dynamic NTK): padding changes it")
    long, short = torch.randint(0, VOCAB, (1, 9)), torch.randint(0, VOCAB, (1, 6))
    batch = torch.cat([long, torch.cat([short, torch.zeros(1, 3, dtype=torch.long)], dim=1)])
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    together = model(batch, attention_mask=mask)
    assert torch.allclose(together[0], model(long)[0], atol=1e-10)
    assert torch.allclose(together[1, :6], model(short)[0], atol=1e-10)


def test_a_pass_at_other_positions_forgets_the_last_passes(variant):
    """What a PE keeps from pass to pass (distances, T5's buckets) is dropped when the positions
    change: spread positions (other distances), another length, then the first again, each as a
    fresh model gives."""
    model = _model(*variant)
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(5))
    spread = torch.tensor([0, 2, 3, 7, 8, 9, 13, 20, 21, 30])
    with torch.no_grad():
        passes = [model(tokens), model(tokens, positions=spread), model(tokens[:, :7]), model(tokens)]
        fresh = [_model(*variant) for _ in passes]
        alone = [fresh[0](tokens), fresh[1](tokens, positions=spread), fresh[2](tokens[:, :7]), fresh[3](tokens)]
    for got, want in zip(passes, alone):
        assert torch.equal(got, want)


def test_checkpoint_round_trip_is_bit_identical(variant, tmp_path):
    model = build_model(variant[0], vocab_size=VOCAB, seed=2, pe_options=variant[1], **variant[2]).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    save_checkpoint(model, tmp_path / "run")
    loaded = load_checkpoint(tmp_path / "run")
    tokens = torch.randint(0, VOCAB, (2, 11))
    assert loaded.config == model.config and torch.equal(model(tokens), loaded(tokens))


def test_same_seed_same_weights_other_seed_other_weights(variant):
    a, b, c = (_model(*variant, seed=seed) for seed in (4, 4, 5))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.W_E, c.W_E)


def test_bf16_autocast_runs_and_stays_close(variant):
    model = build_model(variant[0], vocab_size=VOCAB, seed=1, pe_options=variant[1], **variant[2]).eval()
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(tokens).float()
    assert torch.isfinite(low).all()
    assert (low.softmax(-1) - model(tokens).softmax(-1)).abs().max() < 0.05
