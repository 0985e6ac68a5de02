"""probe's key-value cache, written in place, against TransformerLens' own (which concatenates): every PE
gives the same logits bit for bit at every step of a decode, and a decode asks no more than the cache holds."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from probe.errors import ProbeError
from probe.models import build_model
from probe.models.kv_cache import KeyValueCache
from probe.models.registry import PAPER_PES, PE_KINDS
from probe.tasks.decoding import greedy_decode


def _steps(model, cache, prompts: torch.Tensor, fed: torch.Tensor, padded: bool = True) -> list[torch.Tensor]:
    """Each pass's logits: the prompts (``padded``: one row's at the right), then one fed token a step. Unpadded,
    as greedy decoding's batches are, probe's cache hands a step's lone query no mask at all (TransformerLens'
    cache always one): it must change no logit."""
    mask = torch.ones_like(prompts)
    if padded:
        mask[0, -2:] = 0  # one row's last two prompt positions are padding
    out = [model(prompts, past_kv_cache=cache, attention_mask=mask)]
    for token in fed.T:
        out.append(model(token[:, None], past_kv_cache=cache, attention_mask=torch.ones(len(token), 1).long()))
    return out


def _steps_against_transformer_lens(model, pe: str, prompts: torch.Tensor, fed: torch.Tensor, padded: bool) -> int:
    """Asserts every pass's logits equal through both caches, bit for bit; the number of passes."""
    batch = prompts.size(0)
    with torch.inference_mode():
        theirs = TransformerLensKeyValueCache.init_cache(model.cfg, "cpu", batch)
        ours = KeyValueCache(model.cfg, "cpu", batch, prompts.size(1) + fed.size(1))
        theirs, ours = (_steps(model, cache, prompts, fed, padded) for cache in (theirs, ours))
    for step, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert torch.equal(a, b), f"{pe}: step {step} differs by {(a - b).abs().max():.3g}"
    return len(ours)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("pe", PE_KINDS)
def test_every_pe_reads_the_same_logits_bit_for_bit_as_through_transformer_lens_cache(pe, fused, padded):
    model = build_model(pe, vocab_size=20, seed=3, **tiny_model(2, n_ctx=64)).eval()
    for block in model.blocks:
        block.attn.fast_path = fused  # False: the reference route, every hook's, whatever the PE
    prompts = torch.randint(3, 20, (3, 9), generator=torch.Generator().manual_seed(0))
    fed = torch.randint(3, 20, (3, 12), generator=torch.Generator().manual_seed(1))
    assert _steps_against_transformer_lens(model, pe, prompts, fed, padded) == 13


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("pe", PAPER_PES)
def test_at_an_evaluations_shape_the_logits_are_transformer_lens_cache_bit_for_bit(pe, padded):
    """The study's preset and a decode as long as a scratchpad's: kernels pick other paths at these sizes than
    at the small model above, and the cache's head-major buffers must not change a sum's order on any."""
    model = build_model(pe, vocab_size=20, preset="tiny", seed=2, n_ctx=256).eval()
    prompts = torch.randint(3, 20, (32, 24), generator=torch.Generator().manual_seed(4))
    fed = torch.randint(3, 20, (32, 160), generator=torch.Generator().manual_seed(5))
    assert _steps_against_transformer_lens(model, pe, prompts, fed, padded) == 161


def test_greedy_decoding_with_the_cache_is_decoding_without_one():
    model = build_model("t5", vocab_size=20, seed=1, **tiny_model(2, n_ctx=64)).eval()
    prompts = torch.randint(3, 20, (4, 7), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        cached = greedy_decode(model, prompts, 30, eos_id=-1, pad_id=0)
        uncached = greedy_decode(model, prompts, 30, eos_id=-1, pad_id=0, use_cache=False)
    assert cached.shape == (4, 30) and torch.equal(cached, uncached)


def test_a_pass_past_what_the_cache_holds_is_one_line():
    model = build_model("nope", vocab_size=20, **tiny_model(1, n_ctx=64)).eval()
    cache = KeyValueCache(model.cfg, "cpu", 1, 5)
    model(torch.ones(1, 4, dtype=torch.long), past_kv_cache=cache)
    with pytest.raises(ProbeError, match="holds 5 positions; 6 were asked of it"):
        model(torch.ones(1, 2, dtype=torch.long), past_kv_cache=cache)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_a_decoding_step_with_no_padding_cached_builds_no_mask(padded, monkeypatch):
    """Greedy decoding's batches have no padding, so a step's lone query sees every key cached: the cache says
    so and the layers build no mask for it (a mask per layer and step was a sixth of a small batch's step); a
    cache holding padding still masks every step."""
    import probe.models.fused_attention as fused

    model = build_model("nope", vocab_size=20, seed=1, **tiny_model(2, n_ctx=64)).eval()
    built = []
    real = fused.causal_mask
    monkeypatch.setattr(fused, "causal_mask", lambda *a: built.append(a[:3]) or real(*a))
    cache = KeyValueCache(model.cfg, "cpu", 2, 12)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, -1] = 1 - int(padded)
    with torch.inference_mode():
        model(torch.randint(3, 20, (2, 7)), past_kv_cache=cache, attention_mask=mask)
        for _ in range(5):
            model(torch.randint(3, 20, (2, 1)), past_kv_cache=cache, attention_mask=torch.ones(2, 1).long())
    assert cache.padded is padded
    prompt = [(7, 7, 0)] * 2  # the prompt's pass: one causal mask per layer
    assert built == prompt + ([(1, 8 + k, 7 + k) for k in range(5) for _ in range(2)] if padded else [])


@pytest.mark.parametrize(
    "pe, options, turned_once",
    [
        ("rotary", {}, True),
        ("xpos", {}, True),
        ("rotary", {"scaling": "dynamic", "factor": 2.0, "original_length": 8}, False),  # turns by the pass's length
    ],
    ids=["rotary", "xpos", "rotary-dynamic"],
)
def test_a_rotating_layer_turns_each_cached_key_once_unless_its_turn_follows_the_pass_length(pe, options, turned_once):
    """Decoding turned every cached key again at each step (a pass over the whole cache a step, per layer); keys
    turned by position alone are cached turned, each turned once, the logits as TransformerLens' cache gives
    them (the tests above). Dynamic scaling turns every key by the pass's length: turned again each step."""
    model = build_model(pe, vocab_size=20, seed=1, pe_options=options, **tiny_model(1, n_ctx=64)).eval()
    turned = []
    real = model.pe.rotate_keys
    model.pe.rotate_keys = lambda layer, x, start: turned.append(x.size(1)) or real(layer, x, start)
    cache = KeyValueCache(model.cfg, "cpu", 2, 12)
    with torch.inference_mode():
        model(torch.randint(3, 20, (2, 7)), past_kv_cache=cache)
        for _ in range(4):
            model(torch.randint(3, 20, (2, 1)), past_kv_cache=cache)
    assert turned == ([7, 1, 1, 1, 1] if turned_once else [7, 8, 9, 10, 11])


def _eos_ending_rows_apart(model, prompts: torch.Tensor, steps: int) -> int:
    """A token id that the rows' undisturbed greedy decodes first write at the most distinct steps, some rows
    never: taken as ``<eos>``, rows end apart, so a decode drops some while others go on."""
    with torch.inference_mode():
        free = greedy_decode(model, prompts, steps, eos_id=-1, pad_id=0)  # [batch, steps]
    firsts = {}
    for token in free.unique().tolist():
        hits = [(row == token).nonzero() for row in free]
        firsts[token] = ({int(h[0]) for h in hits if h.numel()}, sum(not h.numel() for h in hits))
    return max(firsts, key=lambda token: (firsts[token][1] > 0, len(firsts[token][0])))


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("pe", ["nope", "rotary", "t5", "alibi"])
def test_a_decode_drops_the_rows_that_ended_and_each_row_writes_what_it_writes_alone(pe, use_cache, monkeypatch):
    """Rows that end leave the batch and the cache (their cached keys were read every step for nothing); every
    row's tokens are those it decodes alone, a batch of one, where nothing is dropped. float64, so a narrower
    batch's rounding cannot tip an arg-max."""
    import probe.models.kv_cache as kv_cache

    model = build_model(pe, vocab_size=12, seed=1, **tiny_model(2, n_ctx=64)).double().eval()
    prompts = torch.randint(3, 12, (16, 6), generator=torch.Generator().manual_seed(6))
    eos = _eos_ending_rows_apart(model, prompts, 40)
    kept = []
    real = kv_cache.KeyValueCache.keep
    monkeypatch.setattr(
        kv_cache.KeyValueCache, "keep", lambda self, rows: kept.append(rows.numel()) or real(self, rows)
    )
    with torch.inference_mode():
        together = greedy_decode(model, prompts, 40, eos_id=eos, pad_id=0, use_cache=use_cache)
        alone = [greedy_decode(model, row[None], 40, eos_id=eos, pad_id=0, use_cache=use_cache)[0] for row in prompts]
    ended = [int((row == eos).nonzero()[0]) if (row == eos).any() else None for row in together]
    assert len({e for e in ended if e is not None}) >= 2 and None in ended, ended  # apart, and some go on
    if use_cache:
        assert len(kept) >= 2 and kept == sorted(kept, reverse=True), kept  # the batch narrowed twice at least
    for row, (mine, single) in enumerate(zip(together, alone, strict=True)):
        assert torch.equal(mine[: single.numel()], single), f"row {row}"
        assert (mine[single.numel() :] == 0).all(), f"row {row}: pad after its end"


def test_a_cache_keeping_some_rows_reads_as_a_cache_of_those_rows_alone():
    """``keep`` moves the kept rows' keys, values, turned keys and mask first: the next steps' logits are a cache
    filled with those rows alone from the start (TransformerLens' concatenating cache, the oracle), up to the
    rounding of their first passes in a wider batch (float64: a row mixed up would be off by O(1))."""
    model = build_model("rotary", vocab_size=20, seed=3, **tiny_model(2, n_ctx=64)).double().eval()
    prompts = torch.randint(3, 20, (5, 9), generator=torch.Generator().manual_seed(0))
    fed = torch.randint(3, 20, (5, 10), generator=torch.Generator().manual_seed(1))
    rows = torch.tensor([1, 3, 4])
    with torch.inference_mode():
        ours = KeyValueCache(model.cfg, "cpu", 5, 19)
        _steps(model, ours, prompts, fed[:, :4], padded=False)
        ours.keep(rows)
        after = _steps_on(model, ours, fed[rows, 4:])
        theirs = TransformerLensKeyValueCache.init_cache(model.cfg, "cpu", 3)
        _steps(model, theirs, prompts[rows], fed[rows, :4], padded=False)
        expected = _steps_on(model, theirs, fed[rows, 4:])
    for step, (a, b) in enumerate(zip(after, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=f"step {step}")


def _steps_on(model, cache, fed: torch.Tensor) -> list[torch.Tensor]:
    """Each step's logits as one fed token a step goes on through ``cache``."""
    return [model(t[:, None], past_kv_cache=cache, attention_mask=torch.ones(len(t), 1).long()) for t in fed.T]
