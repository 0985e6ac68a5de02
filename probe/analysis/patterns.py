"""Attention maps of a model on task examples, read from ``blocks.{l}.attn.hook_pattern``.

Section 4.2 feeds a model "the concatenation [of] gold input and output":
``<bos> source <sep> target <eos>``. Batches are right-padded: attention is causal, so a real
position never sees the padding after it and its row is the one the example gives alone; the
rows and columns of padding positions are zeroed, so every map is an exact causal map of its
example followed by zeros. Only the hook points are captured (not a full cache), and only one
batch of maps is alive at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.tasks import Example, Tokenizer


@dataclass
class PatternBatch:
    """Attention maps of a batch of examples, zero beyond each example's length."""

    patterns: Tensor  # [batch, layer, head, query, key] float32
    lengths: Tensor  # [batch]: true sequence lengths (tokens before the padding)
    output_start: Tensor  # [batch]: index of each example's first output (target) token
    examples: list[Example]


def pattern_hooks(model) -> list[str]:
    """The self-attention pattern hook of every layer, ``blocks.{l}.attn.hook_pattern`` ([batch, head,
    query, key]): the names every TransformerLens model has, probe's or booted from Hugging Face."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    missing = [name for name in names if name not in model.hook_dict]
    if missing:
        raise ProbeError(
            f"the model has no hook {missing[0]}: its attention cannot be read by TransformerLens' hook names"
        )
    return names


@torch.inference_mode()
def run_patterns(model, tokens: Tensor) -> Tensor:
    """[batch, pos] token ids -> [batch, layer, head, query, key] attention maps (on the model's device).

    Hooks ``hook_pattern`` of every layer (which switches each layer to its explicit attention
    path) and keeps nothing else.
    """
    captured: dict[str, Tensor] = {}

    def keep(pattern: Tensor, hook) -> None:  # pattern: [batch, head, query, key]
        captured[hook.name] = pattern

    names = pattern_hooks(model)
    model.eval()
    model.run_with_hooks(tokens, return_type=None, fwd_hooks=[(name, keep) for name in names])
    if len(captured) != len(names):
        raise ProbeError(
            f"only {len(captured)} of the model's {len(names)} attention pattern hooks fired "
            "(is its attention computed without explicit probabilities?)"
        )
    return torch.stack([captured[name] for name in names], dim=1)  # [batch, layer, head, query, key]


def _batches(
    sizes: Sequence[int], per_position_bytes: int, batch_size: int, max_bytes: int
) -> Iterator[tuple[int, int]]:
    """Consecutive [start, stop) slices of at most `batch_size` items whose padded maps fit `max_bytes`."""
    start = 0
    while start < len(sizes):
        stop, longest = start + 1, sizes[start]
        while stop < len(sizes) and stop - start < batch_size:
            widest = max(longest, sizes[stop])
            if (stop - start + 1) * widest * widest * per_position_bytes > max_bytes:
                break
            longest, stop = widest, stop + 1
        yield start, stop
        start = stop


def collect_patterns(
    model,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    *,
    batch_size: int = 16,
    device: str | torch.device | None = None,
    to_cpu: bool = True,
    max_bytes: int = 2**30,
) -> Iterator[PatternBatch]:
    """Attention maps of ``model`` on each example's gold input + output, batch by batch, in order.

    Yields :class:`PatternBatch` es of up to ``batch_size`` examples (fewer where a batch's maps
    would pass ``max_bytes``: long scratchpad sequences), right-padded to the batch's longest
    example. Runs on ``device`` (default: where the model is; a model elsewhere is moved there);
    maps come back as float32 on the CPU, or stay on the device with ``to_cpu=False``. An example
    longer than the model's context (``n_ctx``) raises ProbeError.
    """
    if batch_size < 1:
        raise ProbeError(f"batch size must be positive, got {batch_size}")
    here = next(model.parameters()).device
    device = here if device is None else torch.device(device)
    if device != here:
        model.to(device)
    encoded = [tokenizer.encode_example(example) for example in examples]
    sizes = [len(ids) for ids, _ in encoded]
    too_long = [size for size in sizes if size > model.cfg.n_ctx]
    if too_long:
        raise ProbeError(
            f"{len(too_long)} example(s) have up to {max(too_long)} tokens, more than this "
            f"model's context (n_ctx={model.cfg.n_ctx})"
        )
    per_position = model.cfg.n_layers * model.cfg.n_heads * 4  # float32 bytes per (query, key)
    for start, stop in _batches(sizes, per_position, batch_size, max_bytes):
        rows = encoded[start:stop]
        lengths = torch.tensor(sizes[start:stop])
        width = int(lengths.max())
        tokens = torch.full((len(rows), width), tokenizer.pad_id, dtype=torch.long)
        for i, (ids, _) in enumerate(rows):
            tokens[i, : len(ids)] = torch.tensor(ids)
        patterns = run_patterns(model, tokens.to(device)).float()  # [batch, layer, head, query, key]
        positions = torch.arange(width, device=patterns.device)
        real = positions < lengths.to(patterns.device)[:, None]  # [batch, pos]
        keep = real[:, None, None, :, None] & real[:, None, None, None, :]
        patterns = patterns.masked_fill(~keep, 0.0)
        yield PatternBatch(
            patterns=patterns.cpu() if to_cpu else patterns,
            lengths=lengths,
            output_start=torch.tensor([target_start for _, target_start in rows]),
            examples=list(examples[start:stop]),
        )


def example_attention(
    model, tokenizer: Tokenizer, source: str, target: str | None = None, *, max_new: int = 256
) -> tuple[list[str], Tensor]:
    """Tokens and attention maps [layer, head, query, key] (float32, CPU) of one example.

    With ``target=None`` the output is the model's own greedy continuation of ``source`` (up to
    ``<eos>``, at most ``max_new`` tokens), so any typed input can be looked at. Unknown words
    raise the tokenizer's ProbeError, which names them.
    """
    from probe.tasks.decoding import greedy_decode

    device = next(model.parameters()).device
    prompt = tokenizer.encode_prompt(source)
    if target is None:
        room = min(max_new, model.cfg.n_ctx - len(prompt))  # every generated token is fed back
        generated: list[int] = []
        if room > 0:
            with torch.inference_mode():
                model.eval()
                generated = greedy_decode(
                    model, torch.tensor([prompt], device=device), room, tokenizer.eos_id, tokenizer.pad_id
                )[0].tolist()
        if tokenizer.eos_id in generated:
            generated = generated[: generated.index(tokenizer.eos_id) + 1]
        ids = prompt + generated
    else:
        ids = prompt + tokenizer.encode(target) + [tokenizer.eos_id]
    if len(ids) > model.cfg.n_ctx:
        raise ProbeError(f"the example has {len(ids)} tokens, more than this model's context (n_ctx={model.cfg.n_ctx})")
    patterns = run_patterns(model, torch.tensor([ids], device=device))[0].float().cpu()
    vocab = tokenizer.vocab
    return [vocab[i] for i in ids], patterns  # patterns: [layer, head, query, key]
