"""KERPLE (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation"): <q_m, k_n> = q_m^T k_n + k(m, n), with k a conditionally positive definite kernel
of the distance |m - n| and learned per-head parameters r1, r2 (the paper's two variants):

- ``log`` (the one the paper recommends): k(m, n) = -r1 log(1 + r2 |m - n|), r1, r2 > 0;
- ``power``: k(m, n) = -r1 |m - n|^r2, r1 > 0, 0 < r2 <= 2.

Following the authors' released code (github.com/chijames/KERPLE, ``ParallelKerpleLog`` and
``ParallelKerplePower`` in megatron/mpu/layers.py):

- positivity is a projection, not a reparameterisation: before every forward pass the parameters
  are clamped in place to r >= 0.01 (and r2 <= 2 for ``power``), so an optimiser step that pushes
  one out of range is undone before the next pass uses it, and its gradient is the kernel's own;
- initialisation is uniform: ``log`` draws r1 ~ U(0, 2), r2 ~ U(0, 1); ``power`` draws
  r1 ~ U(0, 1), r2 ~ U(0, 2) (the code's ``bias_p`` ~ 2 U(0, 1) is the log's r1 and the power's
  exponent, its ``bias_a`` ~ U(0, 1) the other parameter);
- one module is built once and handed to every layer, so one set of r1, r2 per head serves all
  layers (``shared=true``, the default); ``shared=false`` gives each layer its own set.
"""

from __future__ import annotations

import torch
from torch import nn

from probe.models.positional import ModelShape, Option, PositionalEncoding

EPS = 1e-2  # the released code's lower bound on r1 and r2
POWER_MAX = 2.0  # the power variant's upper bound on r2: |m - n|^r2 is CPD only for r2 <= 2

VARIANTS = ("log", "power")


class KERPLE(PositionalEncoding):
    kind = "kerple"
    adds_bias = True
    options = {
        "variant": Option(
            str,
            "log",
            "kernel: log, -r1 log(1 + r2 |m - n|), or power, -r1 |m - n|^r2",
            choices=VARIANTS,
            at_inference=False,
        ),
        "shared": Option(bool, True, "one r1, r2 per head for every layer (the authors' code), or one per layer"),
    }
    examples = ({"variant": "power"}, {"shared": False})

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        n_tables = 1 if self.option["shared"] else config.n_layers
        # [table, head]; drawn by initialise, projected into the feasible set every pass
        self.r1 = nn.Parameter(torch.full((n_tables, config.n_heads), EPS))
        self.r2 = nn.Parameter(torch.full((n_tables, config.n_heads), EPS))

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """The released code's uniform draws (for either ``init``), projected as a pass would."""
        scale_r1, scale_r2 = (2.0, 1.0) if self.option["variant"] == "log" else (1.0, 2.0)
        with torch.no_grad():
            for param, scale in ((self.r1, scale_r1), (self.r2, scale_r2)):
                param.copy_(torch.rand(param.shape, generator=generator, dtype=param.dtype) * scale)
        self.project()

    def project(self) -> None:
        """Clamp r1, r2 into the kernel's range in place, as the released code does before each
        pass (through ``.data``: the gradient of a graph already built is left alone)."""
        self.r1.data.clamp_(min=EPS)
        self.r2.data.clamp_(min=EPS, max=POWER_MAX if self.option["variant"] == "power" else None)

    def begin_forward(self, positions: torch.Tensor) -> None:
        super().begin_forward(positions)
        self.project()

    def bias(self, layer: int, query_len: int, key_len: int) -> torch.Tensor:
        """Computed once per forward pass per table, in the parameters' dtype (autocast off)."""
        table = 0 if self.option["shared"] else layer

        def make() -> torch.Tensor:
            r1 = self.r1[table][:, None, None]  # [head, 1, 1]
            r2 = self.r2[table][:, None, None]
            with torch.autocast(device_type=r1.device.type, enabled=False):
                distance = self.distances(query_len, key_len).to(r1.dtype)[None]  # [1, query, key]
                if self.option["variant"] == "log":
                    return -r1 * torch.log1p(r2 * distance)  # [head, query, key]
                return -r1 * distance.pow(r2)

        return self.per_pass(("kerple", table, query_len, key_len), make)
