"""Transformer-XL's relative position encoding (Dai et al. 2019, "Transformer-XL", Section 3.3), as
the paper's released code builds it (``transformer_xl_relative_encoding``; the paper reports no
results for it).

The logit of query i and key j <= i is the sum of four terms:

    A_ij = q_i^T k_j  +  u^T k_j  +  q_i^T W_R R_{i-j}  +  v^T W_R R_{i-j}
           (content)    (content    (position,            (position
                         bias)       per query)            bias)

R_d is the sinusoid of the distance d over d_model, [sin(d w_0) ... sin(d w_{m-1}), cos(d w_0) ...
cos(d w_{m-1})] with w_k = 10000^(-2k / d_model), as the released code orders it, and distances
beyond ``clamp`` (its 1000) share R_clamp. Each layer has its own projection W_R (d_model to each
head's d_head) and its own u, v per head (one set per attention layer, as there). The two bias
terms and the position term go through ``hook_pos_scores``; the layer's 1/sqrt(d_head) scale, if it
has one, applies to them as to q^T k. R depends on i - j only, so the encoding is relative.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe.models.positional import ModelShape, Option, PositionalEncoding


class TransformerXL(PositionalEncoding):
    kind = "txl"
    relative = True
    scores_term = True
    options = {
        "clamp": Option(
            int,
            1000,
            "distances beyond clamp share its sinusoid (the released code's 1000)",
            check=lambda v, o, c: None if v >= 1 else "must be at least 1",
        ),
    }
    examples = ({"clamp": 3},)

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        layers, heads, d_head = config.n_layers, config.n_heads, config.d_head
        self.projection = nn.Parameter(torch.zeros(layers, config.d_model, heads, d_head))  # W_R per layer
        self.content_bias = nn.Parameter(torch.zeros(layers, heads, d_head))  # u
        self.position_bias = nn.Parameter(torch.zeros(layers, heads, d_head))  # v
        self.scale = math.sqrt(d_head) if config.attn_scale else 1.0
        frequencies = 10000.0 ** (-torch.arange(0, config.d_model, 2, dtype=torch.float64) / config.d_model)
        self.register_buffer("frequencies", frequencies, persistent=False)  # [d_model / 2]

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """As the released code draws them: W_R ~ N(0, d_model^-1/2), u and v ~ N(0, 0.2^2) (T5's
        initializer factor 1)."""
        with torch.no_grad():
            for table, std in (
                (self.projection, self.config.d_model**-0.5),
                (self.content_bias, 0.2),
                (self.position_bias, 0.2),
            ):
                table.copy_(torch.randn(table.shape, generator=generator, dtype=table.dtype) * std)

    def sinusoids(self, span: int, dtype: torch.dtype) -> torch.Tensor:
        """[span, d_model] R_d for d = 0 .. span - 1, clamped at ``clamp``."""
        distances = torch.arange(span, device=self.frequencies.device).clamp(max=self.option["clamp"])
        angles = distances.double()[:, None] * self.frequencies[None, :]  # [span, d_model / 2]
        return torch.cat([angles.sin(), angles.cos()], dim=-1).to(dtype)

    def span(self, query_len: int, key_len: int) -> int:
        """1 + the largest distance of this pass, read on the host once per positions (``geometry``), so
        the steps of one length read nothing back and a step can be captured."""
        return self.geometry(("span", query_len, key_len), lambda: int(self.distances(query_len, key_len).max()) + 1)

    def score_term(self, layer: int, q: torch.Tensor, k: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """[batch, head, query, key] (u^T k_j + (q_i + v)^T W_R R_{i-j}) / scale, in float32 (float64
        for a float64 model) also under autocast."""
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(q.device.type, enabled=False):
            q, k = q.to(dtype), k.to(dtype)
            distances = self.distances(q.shape[1], k.shape[1])  # [query, key]
            span = self.span(q.shape[1], k.shape[1])
            r = torch.einsum(
                "sd,dhe->she", self.sinusoids(span, dtype), self.projection[layer].to(dtype)
            )  # [span, head, d_head]
            by_distance = torch.einsum(
                "bqhe,she->bhqs", q + self.position_bias[layer].to(dtype), r
            )  # [batch, head, query, span]
            position = by_distance.gather(-1, distances.expand(*by_distance.shape[:2], *distances.shape))
            content = torch.einsum("he,bkhe->bhk", self.content_bias[layer].to(dtype), k)[
                :, :, None, :
            ]  # [batch, head, 1, key]
            return (content + position) / self.scale
