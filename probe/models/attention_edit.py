"""What an attention layer holds when it attends under an edit, and the tensor algebra of applying it.

An edit (:class:`Edit`) is plain data a layer reads, not a hook: a factor per head and query that multiplies
the logits, keys hidden outside windows, and an optional cap on relative distance with the turn that scores
a far key as if it sat at the cap (ReRoPE, Su 2023). :mod:`probe.models.attach` compiles an
:class:`~probe.models.interventions.Intervention` into one per layer. Both attention routes read it: the
reference route changes the scores with :func:`edited_scores`; the fused route folds the factor into the
queries and the windows into the kernel's mask (:mod:`probe.models.fused_attention`). :func:`far_pair` is the
one turning helper every ReRoPE goes through, for probe's layers and ``hf:`` models alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from probe.errors import ProbeError

Turn = Callable[[Tensor, int], Tensor]  # x [batch, 1, head or 1, d_head] -> each vector turned to one position


class Edit(Protocol):
    """One attention layer's edit: scores x :meth:`factor`, :meth:`hidden` keys masked, distances past ``cap``
    read as ``cap`` (through the bias, or through the layer's rotation where ``turns``)."""

    cap: int | None
    turns: bool  # the cap acts through the layer's rotation (ReRoPE), not through its bias
    windows: tuple[tuple[int, int], ...]  # (window, sinks) each query sees; () for all

    def factor(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """[head or 1, query, 1] multiplier of the logits of queries that are the last of ``key_len``; None: 1."""

    def hidden(self, query_len: int, key_len: int, device: torch.device) -> Tensor | None:
        """[query, key] True for keys the windows hide; None where they hide none."""

    @property
    def keeps_masked_out(self) -> bool:
        """Whether masked logits must be kept out of the product (its factor carries a gradient)."""


def query_positions(scores: Tensor) -> Tensor:
    """[query] absolute positions of the rows of ``scores`` [..., query, key]: the last ``query`` of ``key``."""
    query, key = scores.shape[-2:]
    return torch.arange(key - query, key, device=scores.device)


def outside_window(positions: Tensor, key_len: int, window: int, sinks: int) -> Tensor:
    """[query, key] True where a key is neither among the query's last ``window`` nor the first ``sinks``."""
    keys = torch.arange(key_len, device=positions.device)
    return (positions[:, None] - keys[None, :] >= window) & (keys[None, :] >= sinks)


def capped_bias(bias: Tensor, cap: int) -> Tensor:
    """``bias`` [head, query, key] with each row's value beyond distance ``cap`` replaced by its value at
    distance ``cap`` (rows are the last ``query`` of ``key`` positions)."""
    positions = query_positions(bias)
    keys = torch.arange(bias.size(-1), device=bias.device)
    index = torch.maximum(keys[None, :], positions[:, None] - cap)  # [query, key]
    return bias.gather(-1, index.expand_as(bias))


def turned_to(x: Tensor, at: int, turn: Turn) -> Tensor:
    """``x`` [..., d_head] with every vector turned to position ``at``. A turn to one position is linear, so it
    is ``x`` times the matrix of the unit vectors turned: one small matmul, whatever the PE's rotation is."""
    units = torch.eye(x.size(-1), dtype=x.dtype, device=x.device)
    matrix = turn(units[:, None, None, :], at)[:, 0, 0]  # [d_head, d_head]: row i is unit i turned
    return x if at == 0 and torch.equal(matrix, units) else x @ matrix  # plain RoPE leaves a key at 0 as it is


def far_pair(q: Tensor, k: Tensor, cap: int, turn: Turn, far: int | None = None) -> tuple[Tensor, Tensor]:
    """What ReRoPE scores a key more than ``cap`` behind its query with: the unturned queries ``q`` turned to
    ``cap`` and the unturned keys ``k`` turned to 0, [batch, pos, head, d_head]; with ``far``, only the last
    ``far`` queries and the first ``far`` keys (those that meet a key more than ``cap`` away)."""
    if far is not None:
        q, k = q[:, -far:], k[:, :far]
    return turned_to(q, cap, turn), turned_to(k, 0, turn)


def _capped_rotation(scores: Tensor, q: Tensor, k: Tensor, cap: int, turn: Turn, scale: float) -> Tensor:
    """``scores`` [batch, head, query, key] with each key more than ``cap`` behind its query scored by
    :func:`far_pair` from the unturned ``q`` [batch, query, head, d_head] and ``k`` [batch, key, kv_head, d_head]."""
    if not k.size(1) == q.size(1) == scores.size(-1):  # a cache keeps no unturned keys on an hf model
        raise ProbeError("cap on a rotating PE reads each sequence in one pass, not token by token with a cache")
    positions = query_positions(scores)
    beyond = positions[:, None] - torch.arange(scores.size(-1), device=scores.device)[None, :] > cap
    if not bool(beyond.any()):
        return scores
    turned, still = far_pair(q, k, cap, turn)
    if still.size(2) != turned.size(2):  # grouped keys (hf models): each serves heads / kv_heads queries
        still = still.repeat_interleave(turned.size(2) // still.size(2), dim=2)
    far = turned.transpose(1, 2) @ still.permute(0, 2, 3, 1) / scale  # [batch, head, query, key]
    return torch.where(beyond, far.to(scores.dtype), scores)


def edited_scores(
    scores: Tensor,
    edit: Edit,
    q: Tensor | None = None,
    k: Tensor | None = None,
    turn: Turn | None = None,
    scale: float = 1.0,
) -> Tensor:
    """``scores`` [batch, head, query, key] under ``edit``, as the reference route applies it: far keys of a
    capped rotation scored from the unturned ``q`` and ``k`` by the layer's ``turn`` (divided by its ``scale``),
    then the logits times the factor, then the hidden keys masked."""
    if edit.turns:
        scores = _capped_rotation(scores, q, k, edit.cap, turn, scale)
    query_len, key_len = scores.shape[-2:]
    factor = edit.factor(query_len, key_len, scores.dtype, scores.device)
    if factor is not None and edit.keeps_masked_out:
        # masked logits (-inf) are kept out of the product: their gradient would be -inf x 0 = NaN
        masked = ~torch.isfinite(scores)
        scores = (scores.masked_fill(masked, 0) * factor).masked_fill(masked, float("-inf"))
    elif factor is not None:
        scores = scores * factor
    hidden = edit.hidden(query_len, key_len, scores.device)
    return scores if hidden is None else scores.masked_fill(hidden, float("-inf"))
