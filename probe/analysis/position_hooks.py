"""The one forward pass `probe positions` makes per batch: hooks on every residual stream, every
head's logits and pattern and every attention output fold what they see into sufficient statistics
(:mod:`probe.metrics.position_stats`) and the probes' rows, so only one layer's maps are alive at a time
and a 1B model reads long windows within a memory budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.metrics.position_stats import (
    LogitBases,
    LogitSums,
    MomentSums,
    decompose_logits,
    logit_bases,
    logit_sums,
    moment_sums,
    row_entropy,
    sink_share,
)
from probe.subjects.inputs import PositionInput, padded
from probe.subjects.memory import WORKING_BYTES, batches_within, memory_budget
from probe.subjects.run_info import Progress

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel


def hook_names(model: TransformerLensModel) -> tuple[list[str], list[str], list[str], list[str]]:
    """(streams, logits, patterns, attention outputs): TransformerLens' hook names, checked to exist."""
    L = model.cfg.n_layers
    streams = ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(L))]
    scores = [f"blocks.{layer}.attn.hook_attn_scores" for layer in range(L)]
    patterns = [f"blocks.{layer}.attn.hook_pattern" for layer in range(L)]
    outputs = [f"blocks.{layer}.hook_attn_out" for layer in range(L)]
    missing = [n for n in (*streams, *scores, *patterns, *outputs) if n not in model.hook_dict]
    if missing:
        raise ProbeError(
            f"the model has no hook {missing[0]}: its positions cannot be read by TransformerLens' hook names"
        )
    return streams, scores, patterns, outputs


def probe_positions(length: int, most: int) -> Tensor:
    """[kept] the positions of a sequence of ``length`` whose streams the probes read: all of them,
    or ``most`` evenly spaced ones (first and last included) for longer sequences."""
    if length <= most:
        return torch.arange(length)
    return torch.linspace(0, length - 1, most).round().long().unique()


@dataclass
class Collected:
    """What the hooks keep: statistics only, each layer's head decomposition, and the probes' rows."""

    rows: list[list[Tensor]]  # [stream][batch]: [kept, d_model]
    example: list[Tensor]  # [batch]: [kept] index of the input
    position: list[Tensor]  # [batch]: [kept]
    shares: dict[str, list[dict[str, Tensor]]]  # seen, unseen, seen_rows, unseen_rows -> [layer]: share -> [head]
    sinks: dict[int, list[list[Tensor]]]  # first k -> [layer][batch]: [examples, head]
    uniform: dict[int, list[Tensor]]  # first k -> [batch]: [examples]
    moments: list[MomentSums | None]  # [layer]: [pos, d_model]
    entropy: list[list[Tensor]] = field(default_factory=list)  # [layer][batch]: [examples, head] mean row entropy
    uniform_entropy: list[Tensor] = field(default_factory=list)  # [batch]: [examples] that of uniform attention

    def decomposition(self, view: str) -> dict[str, Tensor] | None:
        """Every layer's shares of one view stacked: share -> [layer, head]; None where no input was read."""
        layers = self.shares.get(view)
        if not layers:
            return None
        return {name: torch.stack([layer[name] for layer in layers]) for name in layers[0]}

    def moment_sums(self) -> MomentSums:
        """All layers' moments stacked: sums [layer, pos, d_model]."""
        return MomentSums(
            self.moments[0].count,
            torch.stack([m.sums for m in self.moments]),
            torch.stack([m.squares for m in self.moments]),
        )


HEAD_CHUNK = 8  # heads whose float64 logits are centred and summed at once
CHUNK_BYTES = HEAD_CHUNK * 8 * 2  # a head chunk's float64 logits and their sum over the batch


def head_chunks(scores: Tensor, lengths: Tensor) -> LogitSums:
    """:func:`logit_sums` of [batch, head, query, key] logits, ``HEAD_CHUNK`` heads at a time."""
    parts = [logit_sums(scores[:, h : h + HEAD_CHUNK], lengths) for h in range(0, scores.shape[1], HEAD_CHUNK)]
    if len(parts) == 1:
        return parts[0]
    return LogitSums(
        torch.cat([p.sums for p in parts]),
        torch.cat([p.squares for p in parts]),
        torch.cat([p.row_means for p in parts]),
        torch.cat([p.row_squares for p in parts]),
        parts[0].counts,
    )


def stats_bytes(heads: int, widths: Sequence[int]) -> int:
    """Bytes one layer's logit statistics hold while every input is read: per set of inputs (seen, unseen)
    of at most ``width`` tokens, a float64 sum per head and causal cell, and the cells' counts."""
    return sum((heads + 1) * 8 * w * (w + 1) // 2 for w in widths)


def layer_blocks(n_layers: int, per_layer: int, step: int, budget: int) -> list[range]:
    """Consecutive blocks of layers whose statistics (``per_layer`` bytes each) fit ``budget`` beside one
    batch's ``step``: all layers where they fit, one at the least."""
    block = max(1, min(n_layers, (budget - step) // max(per_layer, 1)))
    return [range(first, min(first + block, n_layers)) for first in range(0, n_layers, block)]


def _explicit(value: Tensor, hook) -> None:
    """A hook that keeps nothing: a layer before a block takes the explicit attention path, as it does when it
    is read, so a block's numbers do not depend on the blocks before it."""


class _BlockDone(Exception):
    """Raised after the last stream of a block of layers: the rest of the forward pass is not needed."""


@torch.inference_mode()
def collect(
    model: TransformerLensModel,
    inputs: Sequence[PositionInput],
    *,
    pad_id: int,
    batch_size: int,
    max_probe_positions: int,
    device: torch.device,
    sink_first: Sequence[int],
    budget: int | None = None,
    progress: Progress | None = None,
) -> Collected:
    """Hooked forward passes over ``inputs``, a block of layers at a time: each layer's hooks fold its logits,
    patterns and outputs into statistics at once (one layer's maps alive), and a block's logit statistics,
    which grow with the square of the inputs' length, are decomposed into head shares and dropped before the
    next block is read. The blocks are every layer where their statistics fit ``budget`` (default
    :func:`probe.subjects.memory.memory_budget`), so a long context costs forward passes, not memory; each
    pass stops after its block's last layer. Hooks are bound to the names asked for (a bridge's hook may carry
    its canonical name instead)."""
    names = hook_names(model)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    budget = memory_budget() if budget is None else budget
    out = Collected(
        [[] for _ in names[0]],  # one list of rows per stream
        [],
        [],
        {},
        {k: [[] for _ in range(L)] for k in sink_first},
        {k: [] for k in sink_first},
        [None] * L,
        [[] for _ in range(L)],
    )
    model.eval()
    folds = _Folds(out, sink_first)
    bases: dict[tuple[bool, bool], LogitBases] = {}  # (seen, within rows) -> the fits' pseudo-inverses
    widths = {flag: max((len(x.tokens) for x in inputs if x.seen == flag), default=0) for flag in (True, False)}
    step = H * WORKING_BYTES + CHUNK_BYTES  # per (query, key) cell of one input of a batch
    blocks = layer_blocks(
        L, stats_bytes(H, [w for w in widths.values() if w]), step * max(widths.values()) ** 2, budget
    )
    sizes = [len(x.tokens) for x in inputs]
    for block in blocks:
        hooks = folds.for_block(block, names)
        for start, stop in batches_within(sizes, step, batch_size, budget):
            if progress:
                what = f"layers {block.start + 1}-{block.stop} of {L}, inputs {start + 1}-{stop} of {len(inputs)}"
                progress(what, (block.start * len(inputs) + start * len(block)), L * len(inputs))  # layer-inputs read
            chosen = inputs[start:stop]
            folds.start_batch(
                chosen, start, stop, first_block=block.start == 0, most=max_probe_positions, device=device
            )
            try:
                model.run_with_hooks(
                    padded([x.tokens for x in chosen], pad_id).to(device), return_type=None, fwd_hooks=hooks
                )
            except _BlockDone:
                pass
        _decompose(folds.logits, out.shares, bases)
    return out


class _Folds:
    """The hooks of one :func:`collect`: each folds what its layer sees of the current batch into
    ``out`` (and the block's logit sums) at once, so only one layer's maps are alive."""

    def __init__(self, out: Collected, sink_first: Sequence[int]) -> None:
        self.out, self.sink_first = out, sink_first
        self.batch: dict[str, Any] = {}  # the current batch's rows, positions, lengths and seen masks
        self.logits: dict[int, dict[bool, LogitSums]] = {}  # the block's layers: seen -> sums [head, cell]

    def for_block(self, block: range, names: tuple[list[str], ...]) -> list[tuple[str, Any]]:
        """The hooks that read ``block``'s layers (and the embedding with the first block); the pass
        stops at the block's last stream, and layers before it take the path they take when read."""
        streams, scores, patterns, outputs = names
        self.logits.clear()
        self.logits.update({layer: {} for layer in block})
        return [
            *((patterns[layer], _explicit) for layer in range(block.start)),  # the same path as in one block
            *([(streams[0], self.on_stream(0, False))] if block.start == 0 else []),
            *((scores[layer], self.on_scores(layer)) for layer in block),
            *((patterns[layer], self.on_pattern(layer)) for layer in block),
            *((outputs[layer], self.on_output(layer)) for layer in block),
            *((streams[layer + 1], self.on_stream(layer + 1, layer == block[-1])) for layer in block),
        ]

    def start_batch(
        self,
        chosen: Sequence[PositionInput],
        start: int,
        stop: int,
        *,
        first_block: bool,
        most: int,
        device: torch.device,
    ) -> None:
        """Set the batch the hooks read: the probes' rows and positions (recorded once, with the
        first block), the inputs' lengths and which of them are seen."""
        lengths = torch.tensor([len(x.tokens) for x in chosen])
        kept = [probe_positions(len(x.tokens), most) for x in chosen]
        rows = torch.cat([torch.full_like(k, row) for row, k in enumerate(kept)])
        positions = torch.cat(kept)
        if first_block:
            self.out.example.append(torch.arange(start, stop)[rows])
            self.out.position.append(positions)
        seen = torch.tensor([x.seen for x in chosen], device=device)
        self.batch.update(
            rows=rows.to(device),
            positions=positions.to(device),
            lengths=lengths.to(device),
            seen={flag: seen == flag for flag in (True, False) if (seen == flag).any()},
        )

    def on_stream(self, stream: int, last: bool):
        """Keep the probes' rows of one residual stream; the block's last one ends the pass."""
        out, batch = self.out, self.batch

        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model] -> [kept, d_model]
            out.rows[stream].append(value[batch["rows"], batch["positions"]].float().cpu())
            if last:
                raise _BlockDone

        return hook

    def on_scores(self, layer: int):
        """Add a layer's logits to its sums, seen and unseen inputs apart."""
        batch, logits = self.batch, self.logits

        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for flag, chosen in batch["seen"].items():
                part = head_chunks(value[chosen], batch["lengths"][chosen])
                kept = logits[layer].get(flag)
                logits[layer][flag] = part if kept is None else kept.add_(part)

        return hook

    def on_pattern(self, layer: int):
        """Keep a layer's sink shares and row entropies per input and head (uniform attention's once)."""
        out, batch, sink_first = self.out, self.batch, self.sink_first

        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for k in sink_first:
                share, uniform = sink_share(value, batch["lengths"], k)  # [batch, head], [batch]
                out.sinks[k][layer].append(share.cpu())
                if layer == 0:
                    out.uniform[k].append(uniform.cpu())
            entropy, uniform = row_entropy(value, batch["lengths"])  # [batch, head], [batch]
            out.entropy[layer].append(entropy.cpu())
            if layer == 0:
                out.uniform_entropy.append(uniform.cpu())

        return hook

    def on_output(self, layer: int):
        """Add a layer's attention outputs to its moments per position."""
        out, batch = self.out, self.batch

        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model]
            moments = moment_sums(value, batch["lengths"])
            out.moments[layer] = moments if out.moments[layer] is None else out.moments[layer] + moments

        return hook


def _decompose(
    logits: dict[int, dict[bool, LogitSums]],
    shares: dict[str, list[dict[str, Tensor]]],
    bases: dict[tuple[bool, bool], LogitBases],
) -> None:
    """Each layer's head shares (:func:`decompose_logits`, raw and within rows) appended to ``shares``; the
    fits' pseudo-inverses are computed once per set of inputs and view (``bases``) and shared by all layers."""
    for layer in sorted(logits):
        for flag, name in ((True, "seen"), (False, "unseen")):
            stats = logits[layer].get(flag)
            if stats is None:
                continue
            for within, view in ((False, name), (True, f"{name}_rows")):
                if (flag, within) not in bases:
                    bases[flag, within] = logit_bases(stats.counts, within)
                found = decompose_logits(stats, within, bases[flag, within])
                shares.setdefault(view, []).append({k: v.cpu() for k, v in found.items()})
        del logits[layer]
