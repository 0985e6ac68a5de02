"""D^(l) of many inputs, batch by batch: the one loop behind `probe compare`, timing the forward passes
("collect") apart from the metric ("metric").

Both models read each batch at once and meet layer by layer (:func:`probe.analysis.patterns.read_pairs`): A's
layer l and B's layer at its relative depth are compared as they are made and let go, so one pass of each
model holds a layer or two, whatever the depth and the context.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from probe.analysis.patterns import read_pairs
from probe.metrics import layer_distances
from probe.subjects.inputs import Group
from probe.subjects.memory import WORKING_BYTES
from probe.subjects.run_info import Progress

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

STORED_BYTES = 4  # a kept float32 map's bytes per (head, query, key) cell


def sync(device: torch.device) -> None:
    """Wait for the GPU, so a stage's time is its own and not the next one's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def group_distances(
    model_a: TransformerLensModel,
    model_b: TransformerLensModel,
    group: Group,
    layers_b: Sequence[int],
    metric: str,
    device: torch.device,
    batch_size: int,
    budget: int,
    timings: dict[str, float],
    progress: Progress | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-input D^(l) [input, layer of A] and D_AT of every head pair [input, layer, head_A, head_B], layer l
    of A against layer ``layers_b[l]`` of B, in float64; forward passes timed as "collect", the metric as
    "metric" (seconds added to ``timings``)."""
    heads = model_a.cfg.n_heads + model_b.cfg.n_heads
    per_cell = heads * (WORKING_BYTES + 2 * STORED_BYTES)  # a layer of A, two of B, their float64 copies
    values, pairwise, done, n = [], [], 0, len(group.sizes())
    for batch in group.token_batches(per_cell, batch_size, budget):
        tokens, lengths = batch.tokens.to(device), batch.lengths
        if progress:
            progress(f"{group.label or ''} inputs {done + 1}-{done + len(tokens)} of {n}", done, n)
        start = time.perf_counter()
        per_layer, pairs, metric_s = _batch_distances(
            model_a, model_b, tokens, None if lengths is None else lengths.to(device), layers_b, metric
        )
        sync(device)
        timings["metric"] = timings.get("metric", 0.0) + metric_s
        timings["collect"] = timings.get("collect", 0.0) + time.perf_counter() - start - metric_s
        done += len(tokens)
        values.append(per_layer)
        pairwise.append(pairs)
    return torch.cat(values), torch.cat(pairwise)


def _batch_distances(
    model_a, model_b, tokens: Tensor, lengths: Tensor | None, layers_b: Sequence[int], metric: str
) -> tuple[Tensor, Tensor, float]:
    """One batch: D^(l) [batch, layer], D_AT [batch, layer, head_A, head_B] and the seconds spent on the
    metric, as both models' layers meet."""
    per_layer, pairs, seconds = [], [], [0.0]

    def fold(layer: int, maps_a: Tensor, maps_b: Tensor) -> None:  # each [batch, head, query, key]
        start = time.perf_counter()
        a, b = maps_a[:, None].double(), maps_b[:, None].double()  # [batch, 1, head, query, key]
        result = layer_distances(a, b, metric=metric, lengths=lengths)
        per_layer.append(result.per_layer.cpu())  # [batch, 1]
        pairs.append(result.pairwise.cpu())  # [batch, 1, head_A, head_B]
        seconds[0] += time.perf_counter() - start

    read_pairs(model_a, model_b, tokens, layers_b, fold, lengths)
    return torch.cat(per_layer, 1), torch.cat(pairs, 1), seconds[0]
