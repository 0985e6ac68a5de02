"""T5's relative bias (Appendix B.2, Eq. t5_relative_bias): <q_t, k_i> = q_t^T k_i + b_h[bucket(t - i)].

As in T5 (and the paper's released code), one table of B x n_heads learned scalars serves every
layer: the bias is computed once per forward pass, in the first layer that asks, and reused by
the others. Option ``shared=false`` gives each layer a table of its own instead.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from probe.models.positional import ModelShape, Option, PositionalEncoding


def t5_relative_bucket(relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal T5 bucket of a distance ``relative_position`` = query - key >= 0 (Section B.2).

    Of B = ``num_buckets``, the first E = B // 2 distances get a bucket each; a distance n >= E gets
    E + floor(log(n / E) / log(max_distance / E) x (B - E)), capped at the last bucket B - 1. The
    floor makes the last bucket start before ``max_distance``: at 113 for the defaults B = 32, D = 128
    (14 for B = 8, D = 20); every distance from there on shares it. ``max_distance`` must exceed E.
    With B = 5, D = 6 this reproduces the paper's example matrix.
    """
    n = relative_position.clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # Float log of n / max_exact; n = 0 is never used on this branch (is_small covers it).
    scaled = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return torch.where(is_small, n.to(torch.long), large)


def _check_max_distance(value: int, options: dict[str, Any], config: ModelShape) -> str | None:
    """D must exceed the exact buckets B // 2: the log-spaced half divides by log(D / (B // 2)), zero or
    negative otherwise (buckets below 0, an index error at the first pass)."""
    exact = options["num_buckets"] // 2
    if value > exact:
        return None
    return f"must exceed num_buckets // 2 = {exact}, the exact buckets of num_buckets={options['num_buckets']}"


class T5RelativeBias(PositionalEncoding):
    kind = "t5"
    adds_bias = True
    options = {
        "num_buckets": Option(
            int,
            32,
            "B: distance buckets (half exact, half log-spaced)",
            check=lambda v, o, c: None if v >= 2 else "must be at least 2",
        ),
        "max_distance": Option(
            int,
            128,
            "D: scale of the log-spaced buckets; the last starts before D (at 113 for the defaults)",
            check=_check_max_distance,
        ),
        "shared": Option(bool, True, "one table for every layer (T5), or one per layer"),
    }
    examples = ({"shared": False}, {"num_buckets": 8, "max_distance": 12})

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        n_tables = 1 if self.option["shared"] else config.n_layers
        # [table, bucket, head]; drawn by the model's initialisation like its other weights
        self.relative_attention_bias = nn.Parameter(torch.zeros(n_tables, self.option["num_buckets"], config.n_heads))

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """N(0, d_model^-1/2), T5's scale for it; TransformerLens' N(0, 0.8 / sqrt(d_model)) under gpt2."""
        d = self.config.d_model
        std = d**-0.5 if init == "t5" else 0.8 / math.sqrt(d)
        table = self.relative_attention_bias
        with torch.no_grad():
            table.copy_(torch.randn(table.shape, generator=generator, dtype=table.dtype) * std)

    def buckets(self, query_len: int, key_len: int) -> torch.Tensor:
        """[query, key] bucket indices of this pass's positions."""
        return self.geometry(
            ("buckets", query_len, key_len),
            lambda: t5_relative_bucket(
                self.distances(query_len, key_len), self.option["num_buckets"], self.option["max_distance"]
            ),
        )

    def bias(self, layer: int, query_len: int, key_len: int) -> torch.Tensor:
        table = 0 if self.option["shared"] else layer

        def make() -> torch.Tensor:
            # index_select on the flat buckets: its backward (index_add) is several times faster than a
            # 2-d gather's at T = 512
            by_head = self.relative_attention_bias[table].T  # [head, bucket]
            values = by_head.index_select(1, self.buckets(query_len, key_len).flatten())  # [head, query x key]
            return values.view(-1, query_len, key_len)  # [head, query, key]

        return self.per_pass(("t5", table, query_len, key_len), make)
