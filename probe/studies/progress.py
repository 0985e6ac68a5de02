"""How far a sitting of a study has come, and how long the rest should take at its own pace so far.

A study runs for hours, so its log says more than the latest run's step: how many of the sitting's runs have
trained, what share of their steps, and the time left, read from the steps taken since the sitting began
(selection passes, evaluations and the machine's load are in that pace, as no price measured beforehand can
have them). Runs the recipe rule adds as it climbs join the count when they start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from probe.studies.sweep import SweepRun, duration, steps_left


class SittingProgress:
    """Steps taken against the steps the sitting's runs had left, by run folder."""

    def __init__(self, runs: Sequence[SweepRun] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self.began = clock, clock()
        self.span: dict[str, tuple[int, int]] = {}  # run folder -> (its step when the sitting began, its last step)
        self.at: dict[str, int] = {}  # run folder -> its latest step
        self.expect(runs)

    def expect(self, runs: Sequence[SweepRun]) -> None:
        """Count ``runs`` in the sitting (those already counted stay as they were)."""
        for run in runs:
            key = str(run.path)
            if key not in self.span:
                self.span[key] = (run.config.steps - steps_left(run), run.config.steps)

    def update(self, path: str, step: int) -> None:
        """A run reached ``step``."""
        if path in self.span:
            self.at[path] = max(step, self.at.get(path, 0))

    def last_step(self, path: str) -> int | None:
        return self.span[path][1] if path in self.span else None

    def line(self) -> str:
        """``3/10 runs, 41% of their steps, about 12.5 min left`` (the time once a step is taken)."""
        total = sum(end - start for start, end in self.span.values())
        done = sum(max(0, self.at.get(path, start) - start) for path, (start, _) in self.span.items())
        trained = sum(1 for path, (start, end) in self.span.items() if self.at.get(path, start) >= end)
        line = f"{trained}/{len(self.span)} runs, {done / total if total else 1:.0%} of their steps"
        elapsed = self.clock() - self.began
        if done and elapsed > 0:
            line += f", about {duration((total - done) * elapsed / done)} left"
        return line
