"""Attention maps of a model on task examples, read from ``blocks.{l}.attn.hook_pattern``.

Section 5.2 feeds a model "the concatenation [of] gold input and output":
``<bos> source <sep> target <eos>``. Batches are right-padded: attention is causal, so a real
position never sees the padding after it and its row is the one the example gives alone; the
rows and columns of padding positions are zeroed, so every map is an exact causal map of its
example followed by zeros. Only the hook points are captured (not a full cache), and only one
batch of maps is alive at a time.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.subjects.inputs import padded
from probe.subjects.memory import batches_within
from probe.tasks import Example, Tokenizer

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel


@dataclass
class PatternBatch:
    """Attention maps of a batch of examples, zero beyond each example's length."""

    patterns: Tensor  # [batch, layer, head, query, key] float32
    lengths: Tensor  # [batch]: true sequence lengths (tokens before the padding)
    output_start: Tensor  # [batch]: index of each example's first output (target) token
    examples: list[Example]


def pattern_hooks(model: TransformerLensModel) -> list[str]:
    """The self-attention pattern hook of every layer, ``blocks.{l}.attn.hook_pattern`` ([batch, head,
    query, key]): the names every TransformerLens model has, probe's or booted from Hugging Face."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    missing = [name for name in names if name not in model.hook_dict]
    if missing:
        raise ProbeError(
            f"the model has no hook {missing[0]}: its attention cannot be read by TransformerLens' hook names"
        )
    return names


class _Enough(Exception):
    """Raised by the hook of the last layer wanted: the rest of the forward pass is not needed."""


def mask_padding(pattern: Tensor, lengths: Tensor) -> Tensor:
    """[batch, head, query, key] maps with the rows and columns of each input's padding zeroed."""
    positions = torch.arange(pattern.shape[-1], device=pattern.device)
    real = positions < lengths.to(pattern.device)[:, None]  # [batch, pos]
    return pattern.masked_fill(~(real[:, None, :, None] & real[:, None, None, :]), 0.0)


@torch.inference_mode()
def read_layers(
    model: TransformerLensModel,
    tokens: Tensor,
    fold: Callable[[int, Tensor], None],
    layers: Sequence[int] | None = None,
    lengths: Tensor | None = None,
) -> None:
    """One forward pass of ``tokens`` [batch, pos] that hands each layer of ``layers`` (default all) its
    attention maps as they are made: ``fold(layer, maps)``, maps [batch, head, query, key] float32 (zero on
    each input's padding with ``lengths``). Nothing is kept unless ``fold`` keeps it, so one layer's maps are
    alive at a time, and the pass stops after the last layer wanted. Hooking ``hook_pattern`` switches a layer
    to its explicit attention path, so every layer up to the last wanted is hooked: a layer's maps are the same
    whichever others are read with it."""
    names = pattern_hooks(model)
    wanted = sorted(set(range(len(names)) if layers is None else layers))
    fired: list[int] = []

    def hook_for(layer: int):
        def hook(pattern: Tensor, hook) -> None:  # [batch, head, query, key]
            if layer not in wanted:
                return
            maps = pattern.float()
            fold(layer, maps if lengths is None else mask_padding(maps, lengths))
            fired.append(layer)
            if layer == wanted[-1]:
                raise _Enough

        return hook

    model.eval()
    every = range(wanted[-1] + 1)  # layers before those wanted take the explicit path too: the same numbers
    try:
        model.run_with_hooks(tokens, return_type=None, fwd_hooks=[(names[layer], hook_for(layer)) for layer in every])
    except _Enough:
        pass
    if len(fired) != len(wanted):
        raise ProbeError(
            f"only {len(fired)} of the {len(wanted)} attention pattern hooks asked for fired "
            "(is its attention computed without explicit probabilities?)"
        )


class _Cancelled(Exception):
    """Raised in the second model's hook when the first's pass is over: its forward ends there."""


def read_pairs(
    model_a: TransformerLensModel,
    model_b: TransformerLensModel,
    tokens: Tensor,
    layers_b: Sequence[int],
    fold: Callable[[int, Tensor, Tensor], None],
    lengths: Tensor | None = None,
) -> None:
    """Both models' forward passes over ``tokens`` at once, meeting layer by layer: ``fold(layer, maps_a,
    maps_b)`` gets layer ``layer`` of A with layer ``layers_b[layer]`` of B (non-decreasing), as
    :func:`read_layers` hands them over, in the calling thread. B runs in a second thread that waits while A
    catches up, so at most a layer of A and two of B are alive, each model makes one pass, and neither
    holds every layer (what comparing two 30-layer models at 1,024 tokens would take: 2.3 GB)."""
    need = sorted(set(layers_b))
    handoff: queue.Queue = queue.Queue(maxsize=1)
    over = threading.Event()

    def hand(layer: int, maps: Tensor) -> None:
        while not over.is_set():
            try:
                handoff.put(("maps", layer, maps), timeout=0.05)
                return
            except queue.Full:
                continue
        raise _Cancelled

    def run_b() -> None:
        try:
            read_layers(model_b, tokens, hand, need, lengths)
        except _Cancelled:
            return
        except BaseException as error:  # handed to the caller's thread, which raises it
            handoff.put(("error", -1, error))

    current: tuple[int, Tensor] | None = None

    def on_a(layer: int, maps_a: Tensor) -> None:
        nonlocal current
        while current is None or current[0] < layers_b[layer]:
            kind, got, item = handoff.get()
            if kind == "error":
                raise item
            current = (got, item)
        fold(layer, maps_a, current[1])

    worker = threading.Thread(target=run_b, name="probe-model-b", daemon=True)
    worker.start()
    try:
        read_layers(model_a, tokens, on_a, range(len(layers_b)), lengths)
    finally:
        over.set()
        while worker.is_alive():  # let B's pass end: it may be waiting to hand over a layer
            with contextlib.suppress(queue.Empty):
                handoff.get_nowait()
            worker.join(timeout=0.01)


def capture_layers(
    model: TransformerLensModel, tokens: Tensor, layers: Sequence[int] | None = None, lengths: Tensor | None = None
) -> dict[int, Tensor]:
    """layer -> [batch, head, query, key] float32 maps of the ``layers`` asked for (default all): what
    :func:`read_layers` hands over, kept. Size ``layers`` to the memory at hand (:mod:`probe.subjects.memory`)."""
    kept: dict[int, Tensor] = {}
    read_layers(model, tokens, kept.__setitem__, layers, lengths)
    return kept


def run_patterns(model: TransformerLensModel, tokens: Tensor) -> Tensor:
    """[batch, pos] token ids -> [batch, layer, head, query, key] attention maps (float32, on the model's
    device) of every layer at once: for one short input (a figure, a test); analyses read
    :func:`read_layers`."""
    kept = capture_layers(model, tokens)
    return torch.stack([kept[layer] for layer in sorted(kept)], dim=1)


def collect_patterns(
    model: TransformerLensModel,
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
    per_cell = model.cfg.n_layers * model.cfg.n_heads * 4  # float32 bytes per (query, key)
    for start, stop in batches_within(sizes, per_cell, batch_size, max_bytes):
        rows = encoded[start:stop]
        lengths = torch.tensor(sizes[start:stop])
        tokens = padded([ids for ids, _ in rows], tokenizer.pad_id).to(device)
        kept = capture_layers(model, tokens, lengths=lengths)
        patterns = torch.stack([kept[layer] for layer in sorted(kept)], dim=1)  # [batch, layer, head, query, key]
        yield PatternBatch(
            patterns=patterns.cpu() if to_cpu else patterns,
            lengths=lengths,
            output_start=torch.tensor([target_start for _, target_start in rows]),
            examples=list(examples[start:stop]),
        )


def example_attention(
    model: TransformerLensModel, tokenizer: Tokenizer, source: str, target: str | None = None, *, max_new: int = 256
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
