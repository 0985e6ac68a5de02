"""Attention collection: padded batches equal one example at a time, for every PE."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model

from probe.analysis.patterns import collect_patterns, example_attention, run_patterns
from probe.errors import ProbeError
from probe.models import PE_KINDS, build_model
from probe.tasks import Example, Tokenizer
from probe.tasks import get as get_task

SMALL = tiny_model(2)


@pytest.fixture(scope="module")
def scan():
    task = get_task("scan")
    tokenizer = Tokenizer.for_task(task)
    examples = task.examples("valid", 4, seed=1) + task.examples("test", 3, seed=1)  # lengths 10 to 60 tokens
    return task, tokenizer, examples


def model_for(pe: str, tokenizer: Tokenizer, **overrides):
    return build_model(pe, vocab_size=len(tokenizer), seed=3, **{**SMALL, **overrides})


@pytest.mark.parametrize("pe", PE_KINDS)
def test_padded_batch_equals_one_example_at_a_time(pe, scan):
    _, tokenizer, examples = scan
    model = model_for(pe, tokenizer)
    (batch,) = collect_patterns(model, tokenizer, examples, batch_size=len(examples))
    assert batch.patterns.dtype == torch.float32 and batch.patterns.device.type == "cpu"
    assert len(set(batch.lengths.tolist())) > 1  # really padded
    width = batch.patterns.shape[-1]
    assert batch.patterns.shape == (len(examples), 2, 2, width, width)
    for i, example in enumerate(examples):
        (alone,) = collect_patterns(model, tokenizer, [example])
        n = int(batch.lengths[i])
        assert alone.patterns.shape[-1] == n
        torch.testing.assert_close(batch.patterns[i, ..., :n, :n], alone.patterns[0], rtol=0, atol=1e-6)
        assert batch.patterns[i, ..., n:, :].abs().sum() == 0 and batch.patterns[i, ..., :, n:].abs().sum() == 0
        rows = batch.patterns[i, ..., :n, :n]
        torch.testing.assert_close(rows.sum(-1), torch.ones(2, 2, n))  # each real query a distribution
        assert rows.triu(1).abs().sum() == 0  # causal


def test_patterns_are_transformer_lens_hook_pattern_and_batches_keep_order(scan):
    _, tokenizer, examples = scan
    model = model_for("t5", tokenizer)
    ids, start = tokenizer.encode_example(examples[0])
    _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda name: name.endswith("hook_pattern"))
    want = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(2)])
    (batch,) = collect_patterns(model, tokenizer, examples[:1])
    torch.testing.assert_close(batch.patterns[0], want)
    assert batch.output_start.tolist() == [start] and tokenizer.vocab[ids[start - 1]] == "<sep>"

    batches = list(collect_patterns(model, tokenizer, examples, batch_size=3))
    assert [len(b.examples) for b in batches] == [3, 3, 1]
    assert [e for b in batches for e in b.examples] == examples
    # a memory cap below two maps of the shortest example gives one example per batch
    one_map = 2 * 2 * 4 * min(len(tokenizer.encode_example(e)[0]) for e in examples) ** 2
    assert all(len(b.examples) == 1 for b in collect_patterns(model, tokenizer, examples, max_bytes=one_map))


def test_example_attention_typed_and_generated(scan):
    _, tokenizer, _ = scan
    model = model_for("alibi", tokenizer)
    tokens, patterns = example_attention(model, tokenizer, "jump twice", "JUMP JUMP")
    assert tokens == ["<bos>", "jump", "twice", "<sep>", "JUMP", "JUMP", "<eos>"]
    assert patterns.shape == (2, 2, 7, 7)
    ids, _ = tokenizer.encode_example(Example("jump twice", "JUMP JUMP", 2))
    torch.testing.assert_close(patterns, run_patterns(model, torch.tensor([ids]))[0])
    tokens, patterns = example_attention(model, tokenizer, "walk left", max_new=5)
    assert tokens[:4] == ["<bos>", "walk", "left", "<sep>"] and 5 <= len(tokens) <= 9
    assert patterns.shape[-1] == len(tokens)
    with pytest.raises(ProbeError, match="'fly'"):
        example_attention(model, tokenizer, "fly twice")


def test_too_long_for_the_context_is_one_clear_error(scan):
    _, tokenizer, examples = scan
    model = model_for("nope", tokenizer, n_ctx=16)
    with pytest.raises(ProbeError, match="n_ctx=16"):
        list(collect_patterns(model, tokenizer, examples))
