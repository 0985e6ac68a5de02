"""Honest tuning of interventions with a parameter: chosen on a validation slice, never on the test.

A fixed rule (log-length, a cap at the training length) needs no tuning. A searched one is chosen on
validation examples that the test numbers leave out (:func:`validation_split`): a global temperature and a
window (with sinks) by a grid, a temperature per head by gradient descent on the validation loss with every
weight of the model frozen (Wang et al. 2024, Sec. 4 fit one scale per head the same way).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.models.attach import attached
from probe.models.interventions import Intervention

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

TEMPERATURES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)  # logits / t: sharper below 1
WINDOW_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the training length
SINKS = (0, 1, 4)
HEAD_STEPS = 30
HEAD_BATCH = 128  # validation examples per step of the per-head fit
HEAD_LR = 0.05
HEAD_EVERY = 10  # steps between the snapshots validation picks from
Item = TypeVar("Item")


@dataclass(frozen=True)
class Score:
    """How an intervention does on the validation slice: higher ``primary`` is better (exact match, or minus
    the NLL), ``secondary`` breaks ties (minus the NLL)."""

    primary: float
    secondary: float = 0.0

    def key(self) -> tuple[float, float]:
        return (round(self.primary, 12), round(self.secondary, 12))

    @property
    def known(self) -> bool:
        """Whether it is a score at all: NaN (nothing on the slice was read) ranks nowhere, never first."""
        return not (math.isnan(self.primary) or math.isnan(self.secondary))


@dataclass
class Tuned:
    """The intervention chosen, and what was tried with its validation score (the report shows both)."""

    intervention: Intervention
    family: str
    tried: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "chosen": self.intervention.name, "tried": self.tried}


def validation_split(
    items: Sequence[Item], key: Callable[[Item], str], group: Callable[[Item], Any], share: float, most: int
) -> tuple[list[Item], list[Item]]:
    """(validation, test): per group (a length), the ``share`` of its items (at most ``most``, at least one
    where the group has two different ones) that come first by the SHA-256 of ``key(item)``, identical items
    on one side together (copy's count variant repeats examples: one in both would be tuned on and scored on);
    the rest, in their order, is the test. Deterministic: the same items give the same split on any machine,
    whatever their order."""
    by_group: dict[Any, list[Item]] = {}
    for item in items:
        by_group.setdefault(group(item), []).append(item)
    held: set[tuple[Any, str]] = set()
    for name, members in by_group.items():
        counts = Counter(key(item) for item in members)
        keys = sorted(counts, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
        take = min(most, max(1 if len(keys) > 1 else 0, math.floor(share * len(members))))
        size = 0
        for k in keys[:-1]:  # the test keeps one key at least
            if size >= take or (size and size + counts[k] > take):
                break
            held.add((name, k))
            size += counts[k]
    chosen = [(group(i), key(i)) in held for i in items]
    return [i for i, c in zip(items, chosen) if c], [i for i, c in zip(items, chosen) if not c]


def grid_search(family: str, grid: Sequence[Intervention], score: Callable[[Intervention], Score]) -> Tuned:
    """The best of ``grid`` on validation (ties: the first, the grid listing milder changes first); a NaN score
    is never chosen, and ProbeError where no candidate has a score."""
    tried, best, best_key = [], None, None
    for candidate in grid:
        result = score(candidate)
        tried.append({"intervention": candidate.name, "validation": result.primary, "tie_break": result.secondary})
        if result.known and (best_key is None or result.key() > best_key):
            best, best_key = candidate, result.key()
    if best is None:
        raise ProbeError("not tunable: no candidate has a validation score")
    return Tuned(best, family, tried)


def temperature_grid() -> list[Intervention]:
    """Temperatures from no change outwards, so a tie keeps the mildest."""
    return [Intervention(temperature=t) for t in sorted(TEMPERATURES, key=lambda t: (abs(math.log(t)), t))]


def window_grid(trained: int) -> list[Intervention]:
    """Windows of a quarter to all of the training length, with 0, 1 or 4 sinks; the widest first."""
    windows = sorted({max(1, round(f * trained)) for f in WINDOW_FRACTIONS}, reverse=True)
    return [Intervention(window=w, sinks=s) for w in windows for s in SINKS]


def fit_head_temperatures(
    model: TransformerLensModel,
    losses: Callable[[int], Iterable[Tensor]],
    steps: int = HEAD_STEPS,
    lr: float = HEAD_LR,
    every: int = HEAD_EVERY,
) -> list[tuple[int, tuple[tuple[float, ...], ...]]]:
    """(step, [layer][head] temperatures) every ``every`` steps of lowering the validation loss of ``model`` with
    its weights frozen: one log inverse temperature per head, from 0 (no change), by Adam. ``losses(step)`` yields
    the step's minibatch loss in parts, each taken back as it comes (a language model's windows one at a time,
    so one window's activations are held, not all). The scales fold into the fused attention kernels
    (:func:`probe.models.attach.attached` with ``learned``). The caller picks among the snapshots on
    validation: a lower loss need not be more exact matches."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    device = next(model.parameters()).device
    log_scale = torch.zeros(n_layers, n_heads, dtype=torch.float32, device=device, requires_grad=True)
    frozen = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam([log_scale], lr=lr)
    snapshots = []
    try:
        with attached(model, learned=log_scale), torch.enable_grad():
            for step in range(1, steps + 1):
                optimizer.zero_grad()
                for part in losses(step):
                    part.backward()
                optimizer.step()
                if step % every == 0 or step == steps:
                    temperatures = (-log_scale.detach()).exp().double().cpu()  # t = 1 / scale
                    snapshots.append((step, tuple(tuple(float(t) for t in row) for row in temperatures)))
    finally:
        for p, was in zip(model.parameters(), frozen):
            p.requires_grad_(was)
    return snapshots
