"""The one forward pass `probe positions` makes per batch: hooks on every residual stream, every
head's logits and pattern and every attention output fold what they see into sufficient statistics
(:mod:`probe.metrics.position_stats`) and the probes' rows, so only one layer's maps are alive at a time
and a 1B model reads long windows within a memory budget.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.metrics.position_stats import LogitSums, MomentSums, logit_sums, moment_sums, sink_share


@dataclass(frozen=True)
class PositionInput:
    """One sequence to read: its tokens, whether its length was seen in training, its group (length
    bucket or context size) and its landmark (index of ``<sep>``; None where there is none)."""

    tokens: Tensor  # [pos] long
    seen: bool
    group: int
    landmark: int | None = None


def hook_names(model) -> tuple[list[str], list[str], list[str], list[str]]:
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


def batches_within(
    inputs: Sequence[PositionInput], batch_size: int, per_square_token: int, max_bytes: int
) -> Iterator[list[int]]:
    """Indices of consecutive inputs: at most ``batch_size``, and a padded batch's [batch, head, T, T] maps
    (``per_square_token`` bytes per query-key pair of one example) within ``max_bytes`` (one input at least)."""
    start = 0
    while start < len(inputs):
        stop, width = start + 1, len(inputs[start].tokens)
        while stop < len(inputs) and stop - start < batch_size:
            wider = max(width, len(inputs[stop].tokens))
            if (stop - start + 1) * wider * wider * per_square_token > max_bytes:
                break
            width, stop = wider, stop + 1
        yield list(range(start, stop))
        start = stop


def probe_positions(length: int, most: int) -> Tensor:
    """[kept] the positions of a sequence of ``length`` whose streams the probes read: all of them,
    or ``most`` evenly spaced ones (first and last included) for longer sequences."""
    if length <= most:
        return torch.arange(length)
    return torch.linspace(0, length - 1, most).round().long().unique()


@dataclass
class Collected:
    """What the hooks keep, per layer: statistics only, and the probes' rows."""

    rows: list[list[Tensor]]  # [stream][batch]: [kept, d_model]
    example: list[Tensor]  # [batch]: [kept] index of the input
    position: list[Tensor]  # [batch]: [kept]
    logits: list[dict[bool, LogitSums]]  # [layer]: seen -> sums [head, T, T]
    sinks: dict[int, list[list[Tensor]]]  # first k -> [layer][batch]: [examples, head]
    uniform: dict[int, list[Tensor]]  # first k -> [batch]: [examples]
    moments: list[MomentSums | None]  # [layer]: [pos, d_model]

    def logit_sums(self, seen: bool) -> LogitSums | None:
        """All layers' sums for seen (or unseen) inputs, stacked: sums [layer, head, T, T]."""
        parts = [layer.get(seen) for layer in self.logits]
        if any(p is None for p in parts):
            return None
        return LogitSums(
            torch.stack([p.sums for p in parts]),
            torch.stack([p.squares for p in parts]),
            torch.stack([p.row_sums for p in parts]),
            torch.stack([p.row_squares for p in parts]),
            parts[0].counts,
        )

    def moment_sums(self) -> MomentSums:
        """All layers' moments stacked: sums [layer, pos, d_model]."""
        return MomentSums(
            self.moments[0].count,
            torch.stack([m.sums for m in self.moments]),
            torch.stack([m.squares for m in self.moments]),
        )


HEAD_CHUNK = 8  # heads whose float64 logits are centred and summed at once


def head_chunks(scores: Tensor, lengths: Tensor) -> LogitSums:
    """:func:`logit_sums` of [batch, head, query, key] logits, ``HEAD_CHUNK`` heads at a time."""
    parts = [logit_sums(scores[:, h : h + HEAD_CHUNK], lengths) for h in range(0, scores.shape[1], HEAD_CHUNK)]
    return LogitSums(
        torch.cat([p.sums for p in parts]),
        torch.cat([p.squares for p in parts]),
        torch.cat([p.row_sums for p in parts]),
        torch.cat([p.row_squares for p in parts]),
        parts[0].counts,
    )


@torch.inference_mode()
def collect(
    model,
    inputs: Sequence[PositionInput],
    *,
    pad_id: int,
    batch_size: int,
    max_probe_positions: int,
    device: torch.device,
    sink_first: Sequence[int],
    max_bytes: int = 2**30,
) -> Collected:
    """One forward pass per batch; each layer's hooks fold its logits, patterns and outputs into statistics
    at once, so at most one layer's maps are alive. Hooks are bound to the names asked for (a bridge's
    hook may carry its canonical name instead)."""
    streams, scores, patterns, outputs = hook_names(model)
    L = model.cfg.n_layers
    out = Collected(
        [[] for _ in streams],
        [],
        [],
        [{} for _ in range(L)],
        {k: [[] for _ in range(L)] for k in sink_first},
        {k: [] for k in sink_first},
        [None] * L,
    )
    model.eval()
    batch: dict[str, Any] = {}  # the current batch's rows, positions, lengths and seen masks

    def on_stream(stream: int):
        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model] -> [kept, d_model]
            out.rows[stream].append(value[batch["rows"], batch["positions"]].cpu())

        return hook

    def on_scores(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for flag, chosen in batch["seen"].items():
                part = head_chunks(value[chosen], batch["lengths"][chosen])
                kept = out.logits[layer].get(flag)
                out.logits[layer][flag] = part if kept is None else kept + part

        return hook

    def on_pattern(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for k in sink_first:
                share, uniform = sink_share(value, batch["lengths"], k)  # [batch, head], [batch]
                out.sinks[k][layer].append(share.cpu())
                if layer == 0:
                    out.uniform[k].append(uniform.cpu())

        return hook

    def on_output(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model]
            moments = moment_sums(value, batch["lengths"])
            out.moments[layer] = moments if out.moments[layer] is None else out.moments[layer] + moments

        return hook

    hooks = [
        *((n, on_stream(s)) for s, n in enumerate(streams)),
        *((n, on_scores(layer)) for layer, n in enumerate(scores)),
        *((n, on_pattern(layer)) for layer, n in enumerate(patterns)),
        *((n, on_output(layer)) for layer, n in enumerate(outputs)),
    ]
    per_square_token = model.cfg.n_heads * (4 + 4) + HEAD_CHUNK * 8 * 3  # float32 logits, pattern; float64 chunk
    for indices in batches_within(inputs, batch_size, per_square_token, max_bytes):
        chosen = [inputs[i] for i in indices]
        lengths = torch.tensor([len(x.tokens) for x in chosen])
        tokens = torch.full((len(chosen), int(lengths.max())), pad_id, dtype=torch.long)
        for row, x in enumerate(chosen):
            tokens[row, : len(x.tokens)] = x.tokens
        kept = [probe_positions(len(x.tokens), max_probe_positions) for x in chosen]
        rows = torch.cat([torch.full_like(k, row) for row, k in enumerate(kept)])
        positions = torch.cat(kept)
        out.example.append(torch.tensor(indices)[rows])
        out.position.append(positions)
        seen = torch.tensor([x.seen for x in chosen], device=device)
        batch.update(
            rows=rows.to(device),
            positions=positions.to(device),
            lengths=lengths.to(device),
            seen={flag: seen == flag for flag in (True, False) if (seen == flag).any()},
        )
        model.run_with_hooks(tokens.to(device), return_type=None, fwd_hooks=hooks)
    return out
