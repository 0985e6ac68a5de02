"""Learned absolute position embedding (GPT-2; Radford et al. 2019): a trained [n_ctx, d_model]
table W_pos whose row t is added to the token embedding at position t, through ``hook_pos_embed``
[batch, pos, d_model].

The table has a row for each position the model takes, 0 .. n_ctx - 1, and none beyond: the model
refuses a sequence longer than n_ctx with one line before any lookup, and positions given
explicitly (``model(tokens, positions=...)``) outside the table are one line too. That is why the
paper uses the sinusoidal APE instead (Appendix B.2), which is defined at every position. Rows past
the training lengths exist when n_ctx exceeds them, but stay untrained (weight decay only shrinks them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from probe.errors import ProbeError
from probe.models.positional import ModelShape, PositionalEncoding


class LearnedAPE(PositionalEncoding):
    kind = "learned"
    relative = False
    adds_embedding = True

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        self.W_pos = nn.Parameter(torch.empty(config.n_ctx, config.d_model))  # [n_ctx, d_model]

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """The std W_E gets under the model's scheme, so position and token start on one scale: N(0, 1)
        under ``t5`` (T5's embedding), N(0, 0.8 / sqrt(d_model)) under ``gpt2`` (TransformerLens'
        draw for every weight matrix, W_pos of its own learned-position models included)."""
        std = 1.0 if init == "t5" else 0.8 / math.sqrt(self.config.d_model)
        with torch.no_grad():
            self.W_pos.copy_(torch.randn(self.W_pos.shape, generator=generator, dtype=self.W_pos.dtype) * std)

    def embedding(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[pos, d_model] rows of W_pos (``F.embedding``: a deterministic backward, as PEEmbed's) at
        ``positions``, some of this pass's (a slice, or each packed example's own). The pass's positions
        are checked against the table once (``geometry``): the steps of one length then read nothing back
        to the host, so a step can be captured."""
        self.geometry(("rows_checked",), lambda: self._check(self.positions))
        return F.embedding(positions, self.W_pos).to(dtype)

    def _check(self, positions: torch.Tensor) -> torch.Tensor:
        """``positions``, or one line if any is outside the table."""
        n_ctx = self.W_pos.size(0)
        if len(positions) and not (0 <= int(positions.min()) and int(positions.max()) < n_ctx):
            raise ProbeError(
                f"positions {int(positions.min())} .. {int(positions.max())} go past the learned "
                f"table's {n_ctx} rows (positions 0 .. {n_ctx - 1}, n_ctx={n_ctx})"
            )
        return positions
