"""CoPE (Golovneva et al. 2024) against x-transformers' ``CoPE`` module and the paper's equations
written out term by term, in float64; the KV cache, bf16 autocast, a training step, bad options."""

from __future__ import annotations

import math

import pytest
import torch
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
from x_transformers.x_transformers import CoPE as XCoPE

from probe.errors import ProbeError
from probe.models import build_model
from probe.tasks import Tokenizer
from probe.tasks import get as get_task

VOCAB = 13


def oracle_term(q: torch.Tensor, scores: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x-transformers' CoPE on queries [batch, query, head, d_head], masked logits [batch, head,
    query, key] and a table [npos, d_head], in float64. It masks with -finfo.max, not -inf (its
    ``Attend``), and takes queries as [batch, head, query, d_head]."""
    heads, (npos, d_head) = q.size(2), table.shape
    cope = XCoPE(d_head, heads, npos).double()
    with torch.no_grad():
        cope.pos_emb.copy_(table.double())
    masked = scores.double().masked_fill(scores == -math.inf, -torch.finfo(torch.float64).max)
    with torch.no_grad():
        return cope(q.double().transpose(1, 2), masked)


def masked_logits(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """[batch, head, query, key] q.k / scale with -inf above the diagonal (keys after the query)."""
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k) / scale
    later = torch.ones(q.size(1), k.size(1), dtype=torch.bool).triu(1)
    return logits.masked_fill(later, -math.inf)


@pytest.mark.parametrize("attn_scale", [True, False])
@pytest.mark.parametrize("npos", [64, 4])
def test_model_term_matches_x_transformers(attn_scale, npos):
    """In a float64 model, every layer's hook_pos_scores is x-transformers' CoPE term of the
    layer's own queries, its logits q.k / attn_scale after the causal mask, and its table;
    hook_attn_scores is those logits plus the term. npos=4 makes the clamp at p_max = 3 bite."""
    model = build_model("cope", vocab_size=VOCAB, seed=4, attn_scale=attn_scale, pe_options={"npos": npos}).double()
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    scale = math.sqrt(model.cfg.d_head) if attn_scale else 1.0
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    for layer in range(model.cfg.n_layers):
        q, k = cache[f"blocks.{layer}.attn.hook_q"], cache[f"blocks.{layer}.attn.hook_k"]
        logits = masked_logits(q, k, scale)
        expected = oracle_term(q, logits, model.pe.position_vectors[layer].detach())
        term = cache[f"blocks.{layer}.attn.hook_pos_scores"]
        assert term.shape == (2, model.cfg.n_heads, 12, 12)
        torch.testing.assert_close(term, expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(
            cache[f"blocks.{layer}.attn.hook_attn_scores"][..., causal],
            (logits + expected)[..., causal],
            rtol=0,
            atol=1e-12,
        )
    if npos == 4:  # some contextual position really exceeds p_max
        assert torch.sigmoid(logits).flip(-1).cumsum(-1).flip(-1).max() > 3


def test_term_is_the_papers_equation():
    """Section 3 term by term: g_ik = sigmoid(s_ik), p_ij = min(sum_{k=j}^{i} g_ik, npos - 1),
    e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p] (the vectors interpolated, not
    the dot products), term = q_i . e[p_ij]; keys after the query count nothing."""
    model = build_model("cope", vocab_size=VOCAB, n_layers=1, n_heads=2, d_head=8, pe_options={"npos": 5}).double()
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 9, 2, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 9, 2, 8, generator=generator, dtype=torch.float64)
    scores = masked_logits(q, k, 1.0)
    table = model.pe.position_vectors[0].detach()
    term = model.pe.score_term(0, q, k, scores)
    fractional = 0
    for h in range(2):
        for i in range(9):
            for j in range(i + 1):
                p = sum(1 / (1 + math.exp(-scores[0, h, i, m].item())) for m in range(j, i + 1))
                p = min(p, 4.0)
                low, high = math.floor(p), math.ceil(p)
                fractional += low != high
                e = (p - low) * table[high] + (1 - p + low) * table[low]
                assert term[0, h, i, j].item() == pytest.approx(torch.dot(q[0, i, h], e).item(), abs=1e-12)
    assert fractional > 50


def test_kv_cache_and_generate_equal_the_full_forward():
    """Contextual positions of cached keys are recounted from the new query's gates: the cached
    pass (a prompt, then one token at a time) gives the full forward's logits, and greedy generate
    gives the same tokens with and without the cache; npos=4 so the clamp is part of it."""
    tokenizer = Tokenizer.for_task(get_task("scan"))  # generate needs a tokenizer on the model
    vocab = len(tokenizer)
    model = build_model("cope", vocab_size=vocab, seed=2, pe_options={"npos": 4}).double()
    tokenizer.attach_to(model)
    tokens = torch.randint(4, vocab, (2, 11), generator=torch.Generator().manual_seed(2))
    full = model(tokens)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, 2)
    steps = [model(tokens[:, :5], past_kv_cache=cache, attention_mask=torch.ones(2, 5, dtype=torch.long))]
    steps += [
        model(tokens[:, t : t + 1], past_kv_cache=cache, attention_mask=torch.ones(2, 1, dtype=torch.long))
        for t in range(5, 11)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)
    assert not torch.allclose(model(tokens[:, 5:]), full[:, 5:], atol=1e-3)  # the cached prefix matters

    prompt = tokens[:, :4]
    kwargs = {"max_new_tokens": 6, "do_sample": False, "stop_at_eos": False, "verbose": False}
    cached = model.generate(prompt, use_past_kv_cache=True, **kwargs)
    uncached = model.generate(prompt, use_past_kv_cache=False, **kwargs)
    assert cached.shape == (2, 10) and torch.equal(cached, uncached)


def test_term_is_nonzero_and_finite_where_keys_are_visible():
    model = build_model("cope", vocab_size=VOCAB, seed=1)
    _, cache = model.run_with_cache(torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(3)))
    visible = torch.ones(20, 20, dtype=torch.bool).tril()
    for layer in range(model.cfg.n_layers):
        term = cache[f"blocks.{layer}.attn.hook_pos_scores"][..., visible]
        assert torch.isfinite(term).all() and (term != 0).all()


def test_bf16_autocast_computes_the_term_in_float32():
    """Under CPU bf16 autocast the term of bf16 queries and logits is float32 and equals the
    float64 oracle of those same bf16 inputs to float32 accuracy (a bf16 einsum misses by ~1e-2)."""
    model = build_model("cope", vocab_size=VOCAB, seed=5)
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, 16, model.cfg.n_heads, model.cfg.d_head, generator=generator).bfloat16()
    k = torch.randn(2, 16, model.cfg.n_heads, model.cfg.d_head, generator=generator).bfloat16()
    scores = masked_logits(q.float(), k.float(), math.sqrt(model.cfg.d_head)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        term = model.pe.score_term(1, q, k, scores)
        logits, cache = model.run_with_cache(torch.randint(0, VOCAB, (2, 16), generator=generator))
    assert term.dtype == torch.float32
    expected = oracle_term(q, scores, model.pe.position_vectors[1].detach())
    torch.testing.assert_close(term.double(), expected, rtol=1e-5, atol=1e-5)
    assert cache["blocks.0.attn.hook_pos_scores"].dtype == torch.float32 and torch.isfinite(logits).all()


def test_one_training_step_moves_the_table():
    model = build_model("cope", vocab_size=VOCAB, seed=6, pe_options={"npos": 8})
    tokens = torch.randint(0, VOCAB, (4, 14), generator=torch.Generator().manual_seed(5))
    before = model.pe.position_vectors.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(tokens, return_type="loss")
    loss.backward()
    grad = model.pe.position_vectors.grad
    assert torch.isfinite(loss) and grad is not None and torch.isfinite(grad).all()
    assert (grad.abs().sum(dim=(1, 2)) > 0).all()  # every layer's table is used
    optimizer.step()
    assert not torch.equal(model.pe.position_vectors.detach(), before)


def test_moving_every_position_changes_nothing():
    """Positions count gates, never indices: handing the model positions 7, 8, ... leaves it as is."""
    model = build_model("cope", vocab_size=VOCAB, seed=7).double()
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(model(tokens, positions=torch.arange(7, 17)), model(tokens), rtol=0, atol=0)


def test_table_per_layer_shared_by_heads_and_seeded():
    a = build_model("cope", vocab_size=VOCAB, n_layers=3, seed=8, pe_options={"npos": 10})
    b = build_model("cope", vocab_size=VOCAB, n_layers=3, seed=8, pe_options={"npos": 10})
    assert a.pe.position_vectors.shape == (3, 10, a.cfg.d_head)
    assert torch.equal(a.pe.position_vectors, b.pe.position_vectors)
    # drawn on the logits' scale: N(0, 0.8 / sqrt(d_head)) under the tiny preset's gpt2 init
    assert a.pe.position_vectors.std().item() == pytest.approx(0.8 / math.sqrt(a.cfg.d_head), rel=0.1)


@pytest.mark.parametrize(
    "options,match",
    [
        ({"npos": 1}, "option npos=1 of cope must be at least 2$"),
        ({"npos": -3}, "option npos=-3 of cope must be at least 2$"),
        ({"npos": "many"}, "npos"),
        ({"p_max": 8}, "p_max"),
    ],
)
def test_bad_options_are_one_line(options, match):
    with pytest.raises(ProbeError, match=match) as error:
        build_model("cope", vocab_size=VOCAB, pe_options=options)
    assert "\n" not in str(error.value)
