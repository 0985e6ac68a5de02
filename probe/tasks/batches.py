"""Examples -> token tensors -> length-bucketed batches, deterministic and resumable.

Sequences are ``<bos> source <sep> target <eos>`` (or the authors' format, as the tokenizer says),
right-padded. The training objective (Section 3) is log p(y | x): only the target tokens and
``<eos>`` are scored. Batches group examples of similar length (little padding, so little wasted
compute), or, as the authors' Hugging Face Trainer draws them, are cut from a plain shuffle; either
way in an order that depends only on the seed and the epoch, so a resumed run sees exactly the
batches an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import torch

from probe.tasks import Example, Tokenizer

PACKED_WIDTH = 2  # packed rows hold up to 2x the longest example's tokens


@dataclass
class EncodedSet:
    """[n, max_len] right-padded ids, each row's length and the index of its first target token."""

    tokens: torch.Tensor  # [n, max_len] long
    lengths: torch.Tensor  # [n]
    target_start: torch.Tensor  # [n]
    pad_id: int = 0  # the id padding takes (never attended by, nor scored for, a real token)

    def __len__(self) -> int:
        return self.tokens.size(0)

    def batch(
        self, index: torch.Tensor, width: int | None = None, rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens [batch, pos] trimmed to the longest row, and the loss mask [batch, pos - 1] that
        marks which next-token predictions are target tokens. With ``width`` and ``rows`` (a fixed
        geometry's) the grid is padded to exactly that: padding rows score nothing."""
        width = width or int(self.lengths[index].max())
        tokens = self.tokens[index, :width]
        position = torch.arange(1, width)[None, :]  # position of each predicted token
        mask = (position >= self.target_start[index, None]) & (position < self.lengths[index, None])
        pad_rows, pad_cols = (rows or len(index)) - len(index), width - tokens.size(1)
        if pad_rows or pad_cols:
            tokens = torch.nn.functional.pad(tokens, (0, pad_cols, 0, pad_rows), value=self.pad_id)
            mask = torch.nn.functional.pad(mask, (0, 0, 0, pad_rows), value=False)
        return tokens, mask

    def packed_batch(
        self, index: torch.Tensor, width: int | None = None, rows: int | None = None, factor: int = PACKED_WIDTH
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The same examples packed into as few rows of ``width`` tokens (default: ``factor`` x the longest) as
        first-fit, longest first, puts them in: tokens [rows, width], the loss mask [rows, width - 1]
        (no prediction across two examples), and each token's example within its row [rows, width]
        (-1 for padding), for ``PETransformer.forward(segments=...)``. The scored (context, target)
        pairs are :meth:`batch`'s, in fewer padded tokens: on SCAN's paper split, random batches of
        64 hold 2,374 tokens padded and 1,524 packed (1,437 real; length-grouped ones 1,530). Rows
        twice the longest pack as tightly as longer ones there and keep attention, whose cost grows
        with a row's length, small; where lengths spread widely (a scratchpad's, 50 to 600 tokens), rows
        as wide as the longest (``factor`` 1) hold about as many tokens and train 1.2-1.5x faster
        (``bench/pack_width.py``). With ``rows`` (a fixed geometry's), the grid is exactly ``rows`` x
        ``width``, padded with rows of padding; otherwise trimmed to what it holds."""
        lengths = self.lengths[index].tolist()
        width = width or factor * max(lengths)
        if width < max(lengths):
            raise ValueError(f"rows of {width} tokens cannot hold an example of {max(lengths)}")
        packing = first_fit(lengths, width)
        if rows is None:
            rows = len(packing)
            width = min(width, max(sum(lengths[i] for i in members) for members in packing))  # no padding tail
        elif rows < len(packing):
            raise ValueError(f"a grid of {rows} rows cannot hold this batch: it packs into {len(packing)}")
        row, start, segment = [0] * len(lengths), [0] * len(lengths), [0] * len(lengths)  # per example
        for r, members in enumerate(packing):
            at = 0
            for k, i in enumerate(members):
                row[i], start[i], segment[i] = r, at, k
                at += lengths[i]
        counts = torch.tensor(lengths)
        owner = torch.repeat_interleave(torch.arange(len(lengths)), counts)  # [tokens] each real token's example
        offset = torch.arange(len(owner)) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        at = (torch.tensor(row)[owner], torch.tensor(start)[owner] + offset)  # its cell in the grid
        example = index[owner]
        tokens = torch.full((rows, width), self.pad_id, dtype=torch.long)
        segments = torch.full((rows, width), -1, dtype=torch.long)
        scored = torch.zeros(rows, width, dtype=torch.bool)  # [rows, width] target tokens
        tokens[at] = self.tokens[example, offset]
        segments[at] = torch.tensor(segment)[owner]
        scored[at] = offset >= self.target_start[example]
        return tokens, scored[:, 1:], segments


def first_fit(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Positions in ``lengths`` per row, longest first, each into the first row with room."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        for r, free in enumerate(room):
            if free >= n:
                rows[r].append(i)
                room[r] = free - n
                break
        else:
            rows.append([i])
            room.append(width - n)
    return rows


@dataclass(frozen=True)
class Geometry:
    """One batch shape for every step of a run, so a step compiles once and can be captured: ``rows``
    x ``width`` tokens, examples packed into rows (``packed``) or one to a row, right-padded."""

    rows: int
    width: int
    packed: bool

    def cut(self, data: EncodedSet, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The batch of ``index`` on this grid: :meth:`EncodedSet.packed_batch`'s or :meth:`EncodedSet.batch`'s."""
        if self.packed:
            return data.packed_batch(index, self.width, self.rows)
        return data.batch(index, self.width, self.rows)


def fixed_geometry(
    data: EncodedSet, batch_size: int, seed: int, steps: int, *, grouped: bool, packed: bool, factor: int = PACKED_WIDTH
) -> Geometry:
    """The smallest grid that holds every batch of a run of ``steps`` from its start: ``batch_size``
    rows of the longest example, or, ``packed``, rows of ``factor`` x the longest example,
    as many as the fullest of the run's batches packs into (found by packing each: the stream is
    deterministic, so a resumed run's batches are among them)."""
    longest = int(data.lengths.max())
    if not packed:
        return Geometry(batch_size, longest, False)
    width = factor * longest
    lengths = data.lengths.tolist()
    rows = max(
        len(first_fit([lengths[i] for i in index.tolist()], width))
        for _, _, index in islice(batch_stream(data, batch_size, seed, grouped=grouped), steps)
    )
    return Geometry(rows, width, True)


def encode(examples: Sequence[Example], tokenizer: Tokenizer) -> EncodedSet:
    rows, starts = zip(*(tokenizer.encode_example(example) for example in examples))
    lengths = torch.tensor([len(row) for row in rows])
    tokens = torch.full((len(rows), int(lengths.max())), tokenizer.pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    return EncodedSet(tokens, lengths, torch.tensor(starts), tokenizer.pad_id)


def epoch_batches(
    data: EncodedSet, batch_size: int, seed: int, epoch: int, pool: int = 32, grouped: bool = True
) -> list[torch.Tensor]:
    """The batches of one epoch: shuffle, sort pools of ``pool`` batches by length, cut, shuffle
    the batch order; or, not ``grouped``, cut the shuffle as it is. Depends only on (seed, epoch)."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(data), generator=generator)
    if not grouped:
        return list(order.split(batch_size))
    batches = []
    chunk = batch_size * pool
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[torch.argsort(data.lengths[part], stable=True)]
        batches.extend(part.split(batch_size))
    shuffle = torch.randperm(len(batches), generator=generator)
    return [batches[i] for i in shuffle.tolist()]


def batch_stream(
    data: EncodedSet, batch_size: int, seed: int, epoch: int = 0, position: int = 0, grouped: bool = True
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Endless (epoch, position, index) stream, starting at ``(epoch, position)``."""
    while True:
        batches = epoch_batches(data, batch_size, seed, epoch, grouped=grouped)
        for i in range(position, len(batches)):
            yield epoch, i, batches[i]
        epoch, position = epoch + 1, 0
