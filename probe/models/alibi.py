"""ALiBi (Press et al. 2022; Appendix B.2, Eq. alibi): <q_t, k_i> = q_t^T k_i - m_h (t - i).

Fixed per-head slopes: for 8 heads 1/2, 1/4, ..., 1/256; for n heads a power of two, the
geometric sequence starting at 2^(-8/n); otherwise the standard rule of the ALiBi authors: the
slopes of the closest smaller power of two, then every other slope of twice that many.
"""

from __future__ import annotations

import math

import torch

from probe.models.positional import ModelShape, PositionalEncoding


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2 ** (-8 / n)
    return [start ** (h + 1) for h in range(n)]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """[head] ALiBi slopes m_h, float64."""
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = _power_of_two_slopes(closest)
    if closest != n_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(PositionalEncoding):
    kind = "alibi"
    adds_bias = True

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        self.register_buffer("slopes", alibi_slopes(config.n_heads), persistent=False)  # float64: exact

    def bias(self, layer: int, query_len: int, key_len: int) -> torch.Tensor:
        """Computed once per forward pass (in float64, so slope x distance is exact) for all layers."""

        def make() -> torch.Tensor:
            distance = self.distances(query_len, key_len)  # [query, key]
            return -self.slopes.to(distance.device)[:, None, None] * distance[None]  # [head, query, key]

        return self.per_pass(("alibi", query_len, key_len), make)
