"""Checkpoint selection on IID validation, as the authors report their numbers.

Their trainer evaluates every 2,000 of 40,000 steps on the validation split
(``configs/final.jsonnet``: ``eval_steps``; ``configs/trainer/default.jsonnet``:
``metric_for_best_model`` seq_acc) and their runtime reports the test accuracy of the best
validation checkpoint (``evaluate(load_best=True)``). Hugging Face's Trainer replaces the best only
on a strict improvement, so among tied checkpoints the earliest stays. Selection reads validation
data only: it never sees a test length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

AUTHORS_EVERY = 2000 / 40_000  # their evaluation interval, as a share of their run


def every(steps: int) -> int:
    """The authors' interval scaled to a run of ``steps``: 20 evaluations a run, the last at its end."""
    return max(1, round(AUTHORS_EVERY * steps))


def best_of(history: Sequence[tuple[int, float]]) -> tuple[int, float]:
    """(step, score) of the best score in ``history`` (in step order), the earliest among ties."""
    if not history:
        raise ValueError("no evaluations to select from")
    best = history[0]
    for step, score in history[1:]:
        if score > best[1]:
            best = (step, score)
    return best


@dataclass
class Selection:
    """The evaluations so far and the weights of the best, kept as training goes."""

    history: list[tuple[int, float]] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] | None = None

    @property
    def best(self) -> tuple[int, float] | None:
        return best_of(self.history) if self.history else None

    def consider(self, step: int, score: float, model: torch.nn.Module) -> None:
        """Record ``score`` at ``step``; keep ``model``'s weights if it beats every earlier one."""
        improves = not self.history or score > self.best[1]
        self.history.append((step, score))
        if improves:
            # kept where the model is: a GPU's copy costs no transfer and no sync
            self.best_state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}

    def to_dict(self) -> dict[str, Any]:
        step, score = self.best if self.history else (None, None)
        return {"best_step": step, "best_valid_exact_match": score, "history": [list(entry) for entry in self.history]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], best_state: dict[str, torch.Tensor] | None) -> Selection:
        return cls([(int(step), float(score)) for step, score in data.get("history", [])], best_state)
