"""What an analysis reads, whatever the subject: groups of inputs, each group one stream of batches of
attention maps, split into buckets that the results report one by one.

- A task run reads one group: up to ``n_per_bucket`` gold examples (input + output) of every length bucket λ
  (:func:`probe.analysis.examples.sample_buckets`), batched together, right-padded.
- A code model (a ``probe pretrain`` run, an imported run, an ``hf:`` model) reads one group per context size:
  windows of held-out files (:mod:`probe.analysis.windows`), a context size standing for a length bucket.

Every analysis (compare, distances, positions) is written once against :class:`Inputs`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from probe.analysis.examples import Bucket
from probe.analysis.layerwise import MapPair
from probe.analysis.patterns import collect_patterns, run_patterns
from probe.analysis.position_hooks import PositionInput
from probe.analysis.windows import ContextWindows, window_batches
from probe.tasks import Tokenizer


@dataclass(frozen=True)
class InputBucket:
    """Inputs of one length (a task's λ, or a window's context size c), and where they come from."""

    length: int
    seen: bool
    split: str  # test, valid (a task's IID examples) or heldout (code windows)
    count: int  # inputs in it


@dataclass(frozen=True)
class AttentionBatch:
    """One batch of attention maps, and which of their rows are a model's output."""

    patterns: Tensor  # [batch, layer, head, query, key], zero beyond each input's length
    lengths: Tensor | None  # [batch] true lengths (None: no padding, every row real)
    output_start: Tensor | None  # [batch] first output position (None: every row is output, as in a window)


class Group:
    """Inputs read as one stream of batches."""

    buckets: list[InputBucket]
    label: str | None  # "1x": a window group's context multiple, added to result labels
    one_layer_at_a_time: bool  # long windows: hold one layer's maps in float64 at a time
    width: int  # the longest input, in tokens
    queries: int  # output query rows over all inputs (per layer and head)

    def batches(self, model, device: torch.device, batch_size: int) -> Iterator[AttentionBatch]:
        raise NotImplementedError

    def pairs(self, model_a, model_b, device: torch.device, batch_size: int) -> Iterator[MapPair]:
        raise NotImplementedError

    def position_inputs(self) -> list[PositionInput]:
        raise NotImplementedError

    def input_lengths(self) -> list[int]:
        """[input]: the bucket length of each input, in reading order."""
        return [b.length for b in self.buckets for _ in range(b.count)]


class ExampleGroup(Group):
    """A task's sampled examples of every bucket, read in one stream."""

    def __init__(self, buckets: Sequence[Bucket], tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.examples = [e for b in buckets for e in b.examples]
        self.buckets = [InputBucket(b.length, b.seen, b.split, len(b.examples)) for b in buckets]
        self.label, self.one_layer_at_a_time = None, False
        self.encoded = [tokenizer.encode_example(e) for e in self.examples]  # (ids, target start)
        self.width = max(len(ids) for ids, _ in self.encoded)
        self.queries = sum(len(ids) - start for ids, start in self.encoded)

    def _stream(self, model, device: torch.device, batch_size: int):
        return collect_patterns(
            model, self.tokenizer, self.examples, batch_size=batch_size, device=device, to_cpu=device.type == "cpu"
        )

    def batches(self, model, device: torch.device, batch_size: int) -> Iterator[AttentionBatch]:
        for batch in self._stream(model, device, batch_size):
            yield AttentionBatch(batch.patterns, batch.lengths, batch.output_start)

    def pairs(self, model_a, model_b, device: torch.device, batch_size: int) -> Iterator[MapPair]:
        stream_b = self._stream(model_b, device, batch_size)
        for batch_a, batch_b in zip(self._stream(model_a, device, batch_size), stream_b):
            yield batch_a.patterns, batch_b.patterns, batch_a.lengths

    def position_inputs(self) -> list[PositionInput]:
        lengths = [b.length for b in self.buckets for _ in range(b.count)]
        seen = [b.seen for b in self.buckets for _ in range(b.count)]
        return [
            PositionInput(torch.tensor(ids), s, length, start - 1)
            for (ids, start), s, length in zip(self.encoded, seen, lengths)
        ]


class WindowGroup(Group):
    """The windows of one context size: every row of a window is output, and none is padding."""

    def __init__(self, windows: ContextWindows):
        self.windows = windows
        self.buckets = [InputBucket(windows.context, windows.seen, "heldout", len(windows.files))]
        self.label, self.one_layer_at_a_time = windows.label, True
        self.width = windows.context
        self.queries = len(windows.files) * windows.context

    def batches(self, model, device: torch.device, batch_size: int) -> Iterator[AttentionBatch]:
        for batch in window_batches(self.windows.tokens, model, batch_size):
            yield AttentionBatch(run_patterns(model, batch.to(device)), None, None)  # [batch, layer, head, c, c]

    def pairs(self, model_a, model_b, device: torch.device, batch_size: int) -> Iterator[MapPair]:
        for batch in window_batches(self.windows.tokens, model_a, batch_size):
            batch = batch.to(device)
            yield run_patterns(model_a, batch), run_patterns(model_b, batch), None

    def position_inputs(self) -> list[PositionInput]:
        return [PositionInput(row, self.windows.seen, self.windows.context) for row in self.windows.tokens]


@dataclass
class Inputs:
    """Everything one analysis of one subject (or a pair) reads."""

    groups: list[Group]
    skipped: int  # inputs left out: longer than a model reads
    task: str  # the task's name, or "code"
    task_options: dict[str, Any]
    pad_id: int | None = None  # a task tokenizer's padding id

    @property
    def count(self) -> int:
        return sum(b.count for g in self.groups for b in g.buckets)

    def position_inputs(self) -> list[PositionInput]:
        return [i for g in self.groups for i in g.position_inputs()]
