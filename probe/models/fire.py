"""FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context
Transformers", Section 3): for a query at position i and a key at j <= i,

    <q_i, k_j> = q_i^T k_j + b(i, j),   b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),

with psi(x) = log(c x + 1), f_theta: R -> R^heads a two-layer ReLU MLP (1 -> 32 -> heads), and c
and the threshold L learned. Dividing by psi(i) maps every query's distances into [0, 1]
("progressive interpolation"); the threshold keeps short prefixes (i < L) from being stretched.

As in the paper's reference implementation (its appendix listing, PyTorch): c is used as |c|,
starting at 0.1; L is |s| x L0 with a learned multiplier s starting at 1 (so L learns at a rate
relative to its size); the normaliser gets 1e-6 added; the MLP starts as ``torch.nn.Linear``
does (U(+-1/sqrt(fan_in)) weights and biases). The paper's FIRE has its own f_theta, c and L in
every layer (``shared=false``, the default); ``shared=true`` is its layerwise-shared variant,
one FIRE for all layers.

The normaliser reads the query's absolute position i, so FIRE is not shift-invariant
(``relative = False``) once a query passes L. L starts at the listing's 512, tuned for language
models trained on thousands of tokens: below it every query shares one normaliser psi(L) (FIRE is
then a learned function of log-distance) until training moves L. On this toolkit's tasks (tens
of tokens), ``-p threshold=8`` makes FIRE interpolate from the first step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe.models.positional import ModelShape, Option, PositionalEncoding

EPS = 1e-6  # added to the normaliser psi(max(L, i)), as the paper's listing does


def _positive(value: float, options: dict, config) -> str | None:
    return None if value > 0 else "must be positive"


class FIRE(PositionalEncoding):
    kind = "fire"
    relative = False
    adds_bias = True
    options = {
        "hidden": Option(int, 32, "width of the MLP f_theta (the paper's 32)", check=_positive),
        "c": Option(
            float,
            0.1,
            "initial c of psi(x) = log(c x + 1), learned (the paper's 0.1)",
            check=_positive,
            at_inference=False,
        ),
        "threshold": Option(
            float,
            512.0,
            "threshold L of the normaliser psi(max(L, i)): this times a scale learned from 1 (the listing's 512)",
            check=_positive,
        ),
        "shared": Option(bool, False, "one FIRE for every layer (the paper's layerwise sharing), or one per layer"),
    }
    examples = ({"shared": True}, {"threshold": 8.0, "hidden": 8})

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        n_tables = 1 if self.option["shared"] else config.n_layers
        hidden, heads = self.option["hidden"], config.n_heads
        # f_theta(x) = relu(x weight_in + bias_in) weight_out + bias_out, one per table
        self.weight_in = nn.Parameter(torch.zeros(n_tables, hidden))  # [table, hidden]
        self.bias_in = nn.Parameter(torch.zeros(n_tables, hidden))  # [table, hidden]
        self.weight_out = nn.Parameter(torch.zeros(n_tables, hidden, heads))  # [table, hidden, head]
        self.bias_out = nn.Parameter(torch.zeros(n_tables, heads))  # [table, head]
        self.c = nn.Parameter(torch.full((n_tables,), self.option["c"]))  # [table]: psi's c is |c|
        self.threshold_scale = nn.Parameter(torch.ones(n_tables))  # [table]: L = |s| x threshold

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """``torch.nn.Linear``'s U(+-1/sqrt(fan_in)) for the MLP (the paper's listing builds it from
        ``nn.Linear``), whatever ``init``; c and s at their starting values."""
        with torch.no_grad():
            for param, fan_in in (
                (self.weight_in, 1),
                (self.bias_in, 1),
                (self.weight_out, self.option["hidden"]),
                (self.bias_out, self.option["hidden"]),
            ):
                bound = 1 / math.sqrt(fan_in)
                param.copy_((torch.rand(param.shape, generator=generator, dtype=param.dtype) * 2 - 1) * bound)
            self.c.fill_(self.option["c"])
            self.threshold_scale.fill_(1.0)

    def threshold(self, table: int) -> torch.Tensor:
        """The learned threshold L of ``table`` (a 0-d tensor)."""
        return self.threshold_scale[table].abs() * self.option["threshold"]

    def bias(self, layer: int, query_len: int, key_len: int) -> torch.Tensor:
        """Computed once per forward pass per table, in the parameters' dtype (autocast off: a bf16
        MLP would round the bias)."""
        table = 0 if self.option["shared"] else layer

        def make() -> torch.Tensor:
            c = self.c[table].abs()
            with torch.autocast(device_type=c.device.type, enabled=False):
                queries = self.positions[key_len - query_len : key_len].to(c.dtype)  # [query]
                distance = self.distances(query_len, key_len).to(c.dtype)  # [query, key]
                normaliser = torch.log1p(c * torch.maximum(queries, self.threshold(table))) + EPS  # [query]
                x = torch.log1p(c * distance) / normaliser[:, None]  # [query, key], in [0, 1]
                # addmm: one fused pass per layer of the MLP over the query x key pairs
                pairs = x.reshape(-1, 1)  # [pair, 1]
                hidden = torch.addmm(self.bias_in[table], pairs, self.weight_in[table][None]).relu_()  # [pair, hidden]
                values = torch.addmm(self.bias_out[table], hidden, self.weight_out[table])  # [pair, head]
            return values.T.reshape(-1, query_len, key_len)  # [head, query, key]

        return self.per_pass(("fire", table, query_len, key_len), make)
