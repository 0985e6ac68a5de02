"""The interface every positional encoding implements (Appendix B.2: each PE is a way of
computing the dot product <q_t, k_i>, or of initialising the hidden state).

A PE may add a vector to the token embeddings (APE), add a [head, query, key] term to the
attention logits (T5, ALiBi), or rotate queries and keys (Rotary, applied by the attention
layer). NoPE does none of these. One instance lives on the model as ``model.pe``.
"""

from __future__ import annotations

import torch
from torch import nn

from probe.models.config import ModelConfig


class PositionalEncoding(nn.Module):
    """Base class: contributes nothing. Subclasses override what they add."""

    kind: str = ""  # the name on the command line and in run folders
    label: str = ""  # the name in tables and figures
    color: str = "#7f7f7f"  # its colour in every figure
    relative: bool = True  # attention scores invariant to shifting every position (APE's are not)
    figure_rank: int = 99  # the paper's figures order PEs from most to least NoPE-like
    adds_embedding: bool = False
    adds_bias: bool = False
    rotates: bool = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config

    def embedding(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[pos, d_model] vectors added to the token embeddings at ``positions`` (0-based)."""
        raise NotImplementedError(f"{self.kind} adds no positional embedding")

    def bias(self, layer: int, query_len: int, key_len: int, offset: int, device: torch.device) -> torch.Tensor:
        """[head, query, key] term added to the attention logits.

        Queries sit at positions ``offset .. offset + query_len - 1`` (``offset`` > 0 when keys and
        values come from a cache); keys at ``0 .. key_len - 1``.
        """
        raise NotImplementedError(f"{self.kind} adds no attention bias")

    def begin_forward(self) -> None:
        """Called once at the start of every forward pass (drops per-pass memos)."""


def relative_positions(query_len: int, key_len: int, offset: int, device: torch.device) -> torch.Tensor:
    """[query, key] matrix of t - i (query position minus key position), clamped at 0 above the
    diagonal, where the causal mask hides the keys anyway."""
    query = torch.arange(offset, offset + query_len, device=device)[:, None]
    key = torch.arange(key_len, device=device)[None, :]
    return (query - key).clamp(min=0)
