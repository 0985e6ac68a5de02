"""D^(l) of many inputs, batch by batch: the one loop behind `probe compare` on a task's length buckets
and on a code run's windows, timing the forward passes ("collect") apart from the metric ("metric").
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from probe.metrics import layer_distances

MapPair = tuple[Tensor, Tensor, Tensor | None]  # A's and B's maps [batch, layer, head, query, key], lengths [batch]


def sync(device: torch.device) -> None:
    """Wait for the GPU, so a stage's time is its own and not the next one's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_layer_distances(
    pairs: Iterator[MapPair],
    layers_b: Sequence[int],
    metric: str,
    device: torch.device,
    timings: dict[str, float],
    one_layer_at_a_time: bool = False,
) -> tuple[Tensor, Tensor]:
    """Per-input D^(l) [input, layer of A] and D_AT of every head pair [input, layer, head_A, head_B], layer l
    of A against layer ``layers_b[l]`` of B, in float64, from batches of both models' attention maps.

    Producing a batch is timed as "collect", the metric as "metric" (seconds added to ``timings``).
    ``one_layer_at_a_time`` holds one layer's maps in float64 at once instead of the batch's (long windows).
    """
    values, pairwise = [], []
    while True:
        start = time.perf_counter()
        pair = next(pairs, None)
        sync(device)
        timings["collect"] = timings.get("collect", 0.0) + time.perf_counter() - start
        if pair is None:
            break
        maps_a, maps_b, lengths = pair
        start = time.perf_counter()
        if one_layer_at_a_time:
            layers = [
                layer_distances(
                    maps_a[:, layer : layer + 1].double(), maps_b[:, other : other + 1].double(), metric=metric
                )
                for layer, other in enumerate(layers_b)
            ]
            values.append(torch.cat([r.per_layer for r in layers], 1).cpu())  # [batch, layer]
            pairwise.append(torch.cat([r.pairwise for r in layers], 1).cpu())  # [batch, layer, head_A, head_B]
        else:
            result = layer_distances(
                maps_a.double(),
                maps_b[:, layers_b].double(),
                metric=metric,
                lengths=None if lengths is None else lengths.to(maps_a.device),
            )
            values.append(result.per_layer.cpu())  # [batch, layer]
            pairwise.append(result.pairwise.cpu())  # [batch, layer, head_A, head_B]
        sync(device)
        timings["metric"] = timings.get("metric", 0.0) + time.perf_counter() - start
    return torch.cat(values), torch.cat(pairwise)
