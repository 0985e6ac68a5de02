"""D^(l) of many inputs, batch by batch and layer block by layer block: the one loop behind `probe compare`,
timing the forward passes ("collect") apart from the metric ("metric").

Both models' maps of a block of layers are held at once (A's layer l and B's layer at its relative depth), in
float32; the block is every layer where one batch's maps fit the memory budget, fewer for long inputs (a
forward pass per block, each stopped after its last layer), one layer at the least.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import Tensor

from probe.analysis.budget import WORKING_BYTES
from probe.analysis.inputs import Group
from probe.analysis.patterns import capture_layers
from probe.analysis.run_info import Progress
from probe.metrics import layer_distances

STORED_BYTES = 4  # a kept float32 map's bytes per (head, query, key) cell


def sync(device: torch.device) -> None:
    """Wait for the GPU, so a stage's time is its own and not the next one's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def layer_block(n_layers: int, heads: int, width: int, budget: int) -> int:
    """How many layers' maps (``heads`` of both models per layer) one input may hold at once: all that fit
    ``budget`` beside one layer's working set, one at the least."""
    stored, working = heads * width * width * STORED_BYTES, heads * width * width * WORKING_BYTES
    return max(1, min(n_layers, (budget - working) // max(stored, 1)))


def group_distances(
    model_a,
    model_b,
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
    n_layers, heads = model_a.cfg.n_layers, model_a.cfg.n_heads + model_b.cfg.n_heads
    block = layer_block(n_layers, heads, group.width, budget)
    per_cell = heads * (block * STORED_BYTES + WORKING_BYTES)
    values, pairwise, done, n = [], [], 0, len(group.sizes())
    for batch in group.token_batches(per_cell, batch_size, budget):
        tokens, lengths = batch.tokens.to(device), batch.lengths
        lengths = None if lengths is None else lengths.to(device)
        per_layer, pairs = [], []
        for first in range(0, n_layers, block):
            layers = range(first, min(first + block, n_layers))
            if progress:
                inputs = f"inputs {done + 1}-{done + len(tokens)} of {n}"
                what = f"{group.label or ''} {inputs}, layers {first + 1}-{layers.stop}"
                progress(what, done * n_layers + first * len(tokens), n * n_layers)
            start = time.perf_counter()
            maps_a = capture_layers(model_a, tokens, layers, lengths)
            maps_b = capture_layers(model_b, tokens, [layers_b[layer] for layer in layers], lengths)
            sync(device)
            timings["collect"] = timings.get("collect", 0.0) + time.perf_counter() - start
            start = time.perf_counter()
            for layer in layers:
                a = maps_a.pop(layer)[:, None].double()  # [batch, 1, head_A, query, key]
                b = maps_b[layers_b[layer]][:, None].double()  # [batch, 1, head_B, query, key]
                result = layer_distances(a, b, metric=metric, lengths=lengths)
                per_layer.append(result.per_layer.cpu())  # [batch, 1]
                pairs.append(result.pairwise.cpu())  # [batch, 1, head_A, head_B]
            del maps_a, maps_b
            sync(device)
            timings["metric"] = timings.get("metric", 0.0) + time.perf_counter() - start
        done += len(tokens)
        values.append(torch.cat(per_layer, 1))  # [batch, layer]
        pairwise.append(torch.cat(pairs, 1))  # [batch, layer, head_A, head_B]
    return torch.cat(values), torch.cat(pairwise)
