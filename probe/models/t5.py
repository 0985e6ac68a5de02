"""T5's relative bias (Appendix B.2, Eq. t5_relative_bias): <q_t, k_i> = q_t^T k_i + b_h[bucket(t - i)].

As in T5 (and the paper's released code), one table of B x n_heads learned scalars serves every
layer: the bias is computed once per forward pass, in the first layer that asks, and reused by
the others. ``t5_shared=False`` gives each layer a table of its own instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe.models.config import ModelConfig
from probe.models.positional import PositionalEncoding, relative_positions


def t5_relative_bucket(relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal T5 bucket of a distance ``relative_position`` = query - key >= 0 (Section B.2).

    The first ``num_buckets // 2`` distances get a bucket each; distances up to ``max_distance``
    share the other half on a log scale; farther ones all fall in the last bucket. With B = 5,
    D = 6 this reproduces the paper's example matrix.
    """
    n = relative_position.clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # Float log of n / max_exact; n = 0 is never used on this branch (is_small covers it).
    scaled = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return torch.where(is_small, n.to(torch.long), large)


class T5RelativeBias(PositionalEncoding):
    kind = "t5"
    label = "T5's Relative Bias"
    color = "#2ca02c"
    figure_rank = 1
    adds_bias = True

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        n_tables = 1 if config.t5_shared else config.n_layers
        # [table, bucket, head]; T5 initialises this like its other weights, N(0, 1) scaled down.
        self.relative_attention_bias = nn.Parameter(torch.zeros(n_tables, config.t5_num_buckets, config.n_heads))
        self._memo: dict[tuple, torch.Tensor] = {}

    def begin_forward(self) -> None:
        self._memo.clear()

    def buckets(self, query_len: int, key_len: int, offset: int, device: torch.device) -> torch.Tensor:
        """[query, key] bucket indices."""
        distance = relative_positions(query_len, key_len, offset, device)
        return t5_relative_bucket(distance, self.config.t5_num_buckets, self.config.t5_max_distance)

    def bias(self, layer: int, query_len: int, key_len: int, offset: int, device: torch.device) -> torch.Tensor:
        table = 0 if self.config.t5_shared else layer
        key = (table, query_len, key_len, offset, device)
        if key not in self._memo:
            buckets = self.buckets(query_len, key_len, offset, device)  # [query, key]
            values = self.relative_attention_bias[table][buckets]  # [query, key, head]
            self._memo[key] = values.permute(2, 0, 1)  # [head, query, key]
        return self._memo[key]
