"""Sinusoidal absolute position embedding (Appendix B.2, Eq. ape_sinusoidal).

p_j = [sin(w_1 j), cos(w_1 j), ..., sin(w_{d/2} j), cos(w_{d/2} j)], w_i = 1 / base^(2i/d) with
i = 0 .. d/2 - 1 (Vaswani et al.). The paper uses this fixed variant, not the learned one,
because it is defined for every position, so unseen lengths remain possible. The vectors pass
through ``hook_pos_embed`` [batch, pos, d_model] before they are added to the residual stream.
"""

from __future__ import annotations

import torch

from probe.models.positional import Option, PositionalEncoding


def sinusoidal_embedding(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """[pos, d_model] sinusoids at integer ``positions``, sin in even and cos in odd dimensions.

    Computed in float64 and returned as float64, so long positions stay exact to the caller's dtype.
    """
    if d_model % 2:
        raise ValueError(f"the sinusoidal embedding needs an even d_model, got {d_model}")
    i = torch.arange(d_model // 2, dtype=torch.float64, device=positions.device)
    omega = base ** (-2.0 * i / d_model)  # [d_model / 2]
    angles = positions.to(torch.float64)[:, None] * omega[None, :]  # [pos, d_model / 2]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # [pos, d_model]


class SinusoidalAPE(PositionalEncoding):
    kind = "ape"
    relative = False
    adds_embedding = True
    options = {
        "base": Option(
            float, 10000.0, "omega_i = 1 / base^(2i/d)", check=lambda v, o, c: None if v > 1 else "must be above 1"
        ),
        "scale": Option(
            float,
            1.0,
            "p_j times this (1: the paper's; W_E's init std puts p_j on the tokens' scale, as at base)",
            check=lambda v, o, c: None if v > 0 else "must be positive",
        ),
    }

    def embedding(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        table = sinusoidal_embedding(positions, self.config.d_model, self.option["base"])  # [pos, d_model]
        return (table * self.option["scale"]).to(dtype)
