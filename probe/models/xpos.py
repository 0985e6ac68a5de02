"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554): Rotary plus an
exponential decay, so that the score of a query at n and a key at m carries zeta_j^((n - m) / gamma)
in rotated pair j, on top of Rotary's angle (n - m) theta_j.

A query at n is rotated as :class:`~probe.models.rotary.Rotary` rotates it, then scaled per pair by
zeta_j^(n / gamma); a key at m is rotated and scaled by zeta_j^(-m / gamma), with

    zeta_j = (2j / r + gamma') / (1 + gamma'),   j = 0 .. r/2 - 1,

over the r rotated dimensions (GPT-NeoX pairing: j turns with j + r/2, both scaled alike, so scaling
commutes with the rotation); the unrotated dimensions are left unscaled. gamma' = 0.4 and the scale
base gamma = 512 are the paper's values (and those of its authors' code, torchscale's ``XPOS``).
zeta_j rises from gamma' / (1 + gamma') to nearly 1 with j: the fast-turning pairs decay fastest.
``scale_base=0`` turns the decay off, leaving plain Rotary. Rotary's other options (``fraction``,
``base``, ``nope_every``, and its ``scaling`` of the angles past the training length) carry over
unchanged: they set the angles, and the decay multiplies whatever rotation they give.

Positions are not centred. The authors' code subtracts half the length before scaling, to keep the
scales near 1; the score is the same either way (the centre cancels in n - m), and uncentred, a
key's scale never changes once it is cached, so the KV cache stays exact. The price: a key's scale
zeta_0^(-m / gamma) grows with m, and with the defaults leaves float32's (and bf16's) range near
m = 36 000. The scales are computed in float64 and multiplied into the rotation tables. The scaled
queries and keys pass through ``hook_rot_q`` / ``hook_rot_k``.
"""

from __future__ import annotations

import math

import torch

from probe.models.positional import Option
from probe.models.rotary import Rotary

ZETA_OFFSET = 0.4  # gamma' (Sun et al. 2022)


def _check_scale_base(value: float, options: dict, config) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "must be 0 (no decay) or a positive number"


def xpos_zeta(rotary_dim: int) -> torch.Tensor:
    """[r / 2] zeta_j = (2j / r + gamma') / (1 + gamma'), float64."""
    j = torch.arange(rotary_dim // 2, dtype=torch.float64)
    return (2 * j / rotary_dim + ZETA_OFFSET) / (1 + ZETA_OFFSET)


class XPos(Rotary):
    kind = "xpos"
    options = {
        **Rotary.options,
        "scale_base": Option(
            float,
            512.0,
            "gamma: queries scale by zeta^(n/gamma), keys by zeta^(-m/gamma) (0: no decay)",
            check=_check_scale_base,
        ),
    }
    examples = ({"scale_base": 0}, {"fraction": 0.25, "scale_base": 16.0}, {"nope_every": 2})
    preset_options = {}  # xPos rotates the whole head at every preset

    def scales(self, positions: torch.Tensor, sign: int) -> torch.Tensor:
        """[pos, r] zeta_j^(sign x position / gamma) on the rotated dimensions (j and j + r/2 alike;
        the others are left unscaled); float64."""
        zeta = xpos_zeta(self.rotary_dim).to(positions.device)  # [r / 2]
        log_zeta = torch.cat([zeta, zeta]).log()  # [r]
        exponent = sign * positions.to(torch.float64)[:, None] / self.option["scale_base"]  # [pos, 1]
        return (exponent * log_zeta[None, :]).exp()

    def _scaled(self, x: torch.Tensor, start: int, sign: int) -> torch.Tensor:
        """Rotated, then scaled; the scales ride on the cos and signed-sin tables (a pair's two
        dimensions share one scale, so it commutes with the turn), so xPos costs Rotary's operations."""
        dtype = self._table_dtype(x)
        table = self._table(dtype)  # [2, key, r]
        if self.option["scale_base"]:
            table = self.geometry(
                ("xpos", dtype, sign), lambda: table * self.scales(self.positions, sign).to(dtype)
            )  # [2, key, r] x [key, r]
        return self._turn(x, start, table)

    def rotate(self, layer: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Queries at ``start ..``: rotated, then scaled by zeta^(n / gamma)."""
        return self._scaled(x, start, 1)

    def rotate_keys(self, layer: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Keys at ``start ..``: rotated, then scaled by zeta^(-m / gamma)."""
        return self._scaled(x, start, -1)
