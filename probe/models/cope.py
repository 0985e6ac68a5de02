"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", Section 3).

Positions count tokens the query selects, not tokens. For query i and key j <= i:

- gates: g_ik = sigmoid(q_i^T k_k) for every key k <= i;
- contextual position: p_ij = sum_{k=j}^{i} g_ik, clamped at p_max = ``npos`` - 1;
- a learned vector per integer position e[0 .. npos-1], interpolated at the fractional p_ij:
  e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p];
- the logit of (i, j) gets q_i^T e[p_ij], i.e. attention softmax_j q_i^T (k_j + e[p_ij]).

As the paper computes it (Section 3 and its Appendix B code), q_i^T e[p] is formed for the
``npos`` integer p only ([batch, head, query, npos]) and interpolated there, which equals
interpolating the vectors since the dot product is linear. ``npos`` (p_max + 1) is the paper's
hyperparameter, set well below the context length in its experiments; the default 64 here is
this project's choice (x-transformers defaults to 16), of the order of the tasks' longest
training sequences (34 to 117 tokens): counts up to 63 keep vectors of their own, larger ones
(longer test inputs, if every token counts) share e[63].

Scales follow the paper's code (Appendix B): the gates are the sigmoid of the logits as the
layer computes them, after its 1/sqrt(d_head) scale (TransformerLens' ``attn_scale``; none with
``attn_scale=False``) and the causal mask (a masked key has gate sigmoid(-inf) = 0, so it never
counts), while q_i^T e[p] uses the unscaled query. One table of vectors per layer is shared by
the heads, as in Appendix B (one CoPE module per attention layer, heads folded into the batch);
each head still counts with its own gates. Positions count gates, which do not depend on where
the tokens sit, so the encoding is relative: shifting every position leaves the logits unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe.models.positional import ModelShape, Option, PositionalEncoding


class CoPE(PositionalEncoding):
    kind = "cope"
    relative = True
    scores_term = True
    options = {
        "npos": Option(
            int,
            64,
            "position vectors e[0 .. npos-1]; contextual positions clamp at p_max = npos - 1",
            check=lambda v, o, c: None if v >= 2 else "must be at least 2",
        ),
    }

    examples = ({"npos": 4},)

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        # [layer, npos, d_head]: e[p] of every layer, shared by its heads; drawn in ``initialise``
        self.position_vectors = nn.Parameter(torch.zeros(config.n_layers, self.option["npos"], config.d_head))

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """N(0, s / attn_scale), s the spread of a key's coordinates at initialisation (1 under
        ``t5``, whose W_K is N(0, d_model^-1/2); 0.8 under ``gpt2``): q^T e[p] then starts on the
        scale of the logits q^T k / attn_scale it is added to. (The paper's code starts from zeros,
        which leaves every logit without a positional term until training moves the table.)"""
        config = self.config
        key_std = 1.0 if init == "t5" else 0.8
        attn_scale = math.sqrt(config.d_head) if config.attn_scale else 1.0
        table = self.position_vectors
        with torch.no_grad():
            table.copy_(torch.randn(table.shape, generator=generator, dtype=table.dtype) * (key_std / attn_scale))

    def contextual_positions(self, scores: torch.Tensor) -> torch.Tensor:
        """[batch, head, query, key] p_ij = sum_{k=j}^{i} sigmoid(scores_ik), clamped at
        npos - 1; masked keys (-inf) count 0."""
        gates = torch.sigmoid(scores)  # [batch, head, query, key]
        return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.option["npos"] - 1)

    def score_term(self, layer: int, q: torch.Tensor, k: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """[batch, head, query, key] q_i^T e[p_ij], interpolated between the integer positions, in
        float32 (float64 for a float64 model) also under autocast, whose bf16 would round the
        positions and the dot products."""
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(q.device.type, enabled=False):
            positions = self.contextual_positions(scores.to(dtype))  # [batch, head, query, key]
            floor = positions.floor()
            weight = positions - floor  # share of e[ceil p]
            table = self.position_vectors[layer].to(dtype)  # [npos, d_head]
            at_integers = torch.einsum("bqhd,pd->bhqp", q.to(dtype), table)  # [batch, head, query, npos]
            below = at_integers.gather(-1, floor.long())  # [batch, head, query, key]
            above = at_integers.gather(-1, positions.ceil().long())
            return (1 - weight) * below + weight * above
