"""A study's recipe rule as data: the rungs a scenario climbs, and the bar that stops it.

The Section 3 study fixes one recipe per scenario before its first run, by a rule that reads IID exact
match only, as `probe eval` scores it (the validation examples and the test split's examples at training
lengths; ``grids/section3.toml``'s ``[ladder]``): seed 0 of every PE trains at the first rung's
steps; while the median PE's IID exact match stays under the bar, seed 0 trains again at the next rung;
the scenario's recipe is the first rung that reaches the bar, or the last rung where none does. Its other
seeds train at that rung only. Test lengths choose nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.errors import ProbeError


@dataclass(frozen=True)
class Ladder:
    steps: tuple[int, ...]  # each rung's training steps, cheapest first
    median_iid: float  # the bar, on the median PE's IID exact match at seed 0

    @classmethod
    def from_grid(cls, table: Mapping[str, Any] | None) -> Ladder | None:
        """A grid's ``[ladder]`` table (``steps = [...]``, ``median_iid = ...``), or None where it has none."""
        if table is None:
            return None
        try:
            steps, bar = tuple(int(s) for s in table["steps"]), float(table["median_iid"])
        except (KeyError, TypeError, ValueError) as error:
            raise ProbeError(f"grid: [ladder] needs steps = [N, ...] and median_iid = X ({error})") from None
        if not steps or list(steps) != sorted(set(steps)) or steps[0] < 1 or not 0 < bar <= 1:
            raise ProbeError(f"grid: [ladder] steps must rise from 1 and median_iid lie in (0, 1]; got {table}")
        return cls(steps, bar)

    def root(self, root: Path, steps: int) -> Path:
        """Where a rung's runs live: the first rung's in the study's folder, each later one's beside it
        (``<root>-steps<N>``), so a scenario's rungs never share a run folder."""
        return root if steps == self.steps[0] else root.with_name(f"{root.name}-steps{steps}")

    def tag(self, steps: int) -> str:
        """A rung's mark in a summary's file name: none for the first, ``+steps<N>`` for the others."""
        return "" if steps == self.steps[0] else f"+steps{steps}"

    def climbs(self, seed0_iid: Sequence[float], steps: int) -> int | None:
        """The next rung's steps when seed 0's IID exact match at ``steps`` (one per PE) is under the bar
        and a rung is left; None where the scenario stays at ``steps``."""
        at = self.steps.index(steps)
        if statistics.median(seed0_iid) >= self.median_iid or at + 1 == len(self.steps):
            return None
        return self.steps[at + 1]

    def due(self, medians: Mapping[int, float]) -> int:
        """The rung a scenario trains at next, from the median PE's seed-0 IID at each rung read so far: its
        chosen rung, else the first rung the rule has not read (the first, before any)."""
        chosen = self.chosen(medians)
        return chosen if chosen is not None else self.steps[len(medians)]

    def chosen(self, medians: Mapping[int, float]) -> int | None:
        """The scenario's rung from the median PE's seed-0 IID at each rung tried: the first at the bar,
        else the last rung; None while the rule needs a rung not trained yet."""
        for steps in self.steps:
            if steps not in medians:
                return None
            if medians[steps] >= self.median_iid or steps == self.steps[-1]:
                return steps
        return None
