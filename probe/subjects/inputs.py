"""What an analysis reads, whatever the subject: groups of inputs, each group one stream of token batches,
split into buckets that the results report one by one. The analyses read a batch's attention maps one layer
(or one block of layers) at a time (:func:`probe.analysis.patterns.read_layers`), in batches sized by a
memory budget (:mod:`probe.subjects.memory`).

- A task run reads one group: up to ``n_per_bucket`` gold examples (input + output) of every length bucket λ
  (:func:`probe.subjects.examples.sample_buckets`), batched together, right-padded.
- A code model (a ``probe pretrain`` run, an imported run, an ``hf:`` model) reads one group per context size:
  windows of held-out files (:mod:`probe.subjects.windows`), a context size standing for a length bucket.

Every analysis (compare, distances, positions) is written once against :class:`Inputs`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from probe.subjects.examples import Bucket
from probe.subjects.memory import batches_within
from probe.subjects.windows import ContextWindows
from probe.tasks import Tokenizer

if TYPE_CHECKING:
    from probe.tasks import Task


@dataclass(frozen=True)
class PositionInput:
    """One sequence to read: its tokens, whether its length was seen in training, its group (length
    bucket or context size) and its landmark (index of ``<sep>``; None where there is none)."""

    tokens: Tensor  # [pos] long
    seen: bool
    group: int
    landmark: int | None = None


def padded(rows: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """[batch, width] long: each row's ids, right-padded with ``pad_id`` to the longest."""
    tokens = torch.full((len(rows), max(len(ids) for ids in rows)), pad_id, dtype=torch.long)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = torch.as_tensor(ids)
    return tokens


@dataclass(frozen=True)
class InputBucket:
    """Inputs of one length (a task's λ, or a window's context size c), and where they come from."""

    length: int
    seen: bool
    split: str  # test, valid (a task's IID examples) or heldout (code windows)
    count: int  # inputs in it


@dataclass(frozen=True)
class TokenBatch:
    """One batch of inputs, and which of their rows are a model's output."""

    tokens: Tensor  # [batch, width] long, right-padded
    lengths: Tensor | None  # [batch] true lengths (None: no padding, every row real)
    output_start: Tensor | None  # [batch] first output position (None: every row is output, as in a window)
    answer_start: Tensor | None = None  # [batch] first position of the answer, after a scratchpad (None: output_start)


class Group:
    """Inputs read as one stream of batches."""

    buckets: list[InputBucket]
    label: str | None  # "1x": a window group's context multiple, added to result labels
    width: int  # the longest input, in tokens
    queries: int  # output query rows over all inputs (per layer and head)
    answer_queries: int  # of them, the rows of an answer (after a scratchpad; all of them without one)

    def sizes(self) -> list[int]:
        """[input]: tokens of each input, in reading order."""
        raise NotImplementedError

    def token_batch(self, start: int, stop: int) -> TokenBatch:
        """Inputs [start, stop) as one batch."""
        raise NotImplementedError

    def token_batches(self, per_cell: int, batch_size: int, budget: int) -> Iterator[TokenBatch]:
        """Consecutive batches of at most ``batch_size`` inputs whose (query, key) cells, ``per_cell`` bytes
        each while a batch is read, stay within ``budget`` bytes (one input at least)."""
        for start, stop in batches_within(self.sizes(), per_cell, batch_size, budget):
            yield self.token_batch(start, stop)

    def position_inputs(self) -> list[PositionInput]:
        raise NotImplementedError

    def input_lengths(self) -> list[int]:
        """[input]: the bucket length of each input, in reading order."""
        return [b.length for b in self.buckets for _ in range(b.count)]


class ExampleGroup(Group):
    """A task's sampled examples of every bucket, read in one stream."""

    def __init__(self, buckets: Sequence[Bucket], tokenizer: Tokenizer, task: Task):
        self.pad_id = tokenizer.pad_id
        examples = [e for b in buckets for e in b.examples]
        self.buckets = [InputBucket(b.length, b.seen, b.split, len(b.examples)) for b in buckets]
        self.label = None
        self.encoded = [tokenizer.encode_example(e) for e in examples]  # (ids, target start)
        self.answer_starts = [  # the scratchpad's tokens, through its end marker, precede the answer
            start + len(tokenizer.encode(task.before_answer(e.target))) for e, (_, start) in zip(examples, self.encoded)
        ]
        self.width = max(len(ids) for ids, _ in self.encoded)
        self.queries = sum(len(ids) - start for ids, start in self.encoded)
        self.answer_queries = sum(len(ids) - start for (ids, _), start in zip(self.encoded, self.answer_starts))

    def sizes(self) -> list[int]:
        return [len(ids) for ids, _ in self.encoded]

    def token_batch(self, start: int, stop: int) -> TokenBatch:
        rows = self.encoded[start:stop]
        return TokenBatch(
            padded([ids for ids, _ in rows], self.pad_id),
            torch.tensor([len(ids) for ids, _ in rows]),
            torch.tensor([target_start for _, target_start in rows]),
            torch.tensor(self.answer_starts[start:stop]),
        )

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
        self.label = windows.label
        self.width = windows.context
        self.queries = self.answer_queries = len(windows.files) * windows.context

    def sizes(self) -> list[int]:
        return [self.windows.context] * len(self.windows.files)

    def token_batch(self, start: int, stop: int) -> TokenBatch:
        return TokenBatch(self.windows.tokens[start:stop], None, None)

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
