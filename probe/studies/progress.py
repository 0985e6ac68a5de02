"""How far a sitting of a study has come, and how long the rest should take at its own pace so far.

A study runs for hours, so its log says more than the latest run's step: how many of the sitting's runs have
trained, what share of their training tokens, and the time left, read from the tokens trained since the
sitting began (selection passes, evaluations and the machine's load are in that pace, as no price measured
beforehand can have them). A step counts its run's tokens per step: a scratchpad's rows are many times a
baseline's, so steps counted alike would read a sitting's scratchpads at its baselines' pace. Runs the recipe
rule adds as it climbs join the count when they start. A pause is not in the pace: a silence while runs are
training, many times longer than their steps' usual spacing, is a stopped study (Ctrl-Z, ``kill -STOP``) or a
frozen machine, and is left out of the time the pace is read over."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from probe.studies.sweep import SweepRun, duration, steps_left

PAUSE_FLOOR = 120.0  # seconds: a silence between steps shorter than this is never taken for a pause
PAUSE_FACTOR = 10  # ... nor one under this many times the usual spacing of steps (a slow preset's log interval)


class SittingProgress:
    """Tokens trained against the tokens the sitting's runs had left, by run folder: each run's steps at its
    ``tokens_per_step`` (:func:`~probe.studies.sweep.cost.mean_batch_tokens` where a study's runs differ)."""

    def __init__(
        self,
        runs: Sequence[SweepRun] = (),
        clock: Callable[[], float] = time.monotonic,
        tokens_per_step: Callable[[SweepRun], float] = lambda run: 1.0,
    ) -> None:
        self.clock, self.began, self.tokens_per_step = clock, clock(), tokens_per_step
        self.span: dict[str, tuple[int, int]] = {}  # run folder -> (its step when the sitting began, its last step)
        self.weight: dict[str, float] = {}  # run folder -> its tokens per step
        self.at: dict[str, int] = {}  # run folder -> its latest step
        self.last_heard: float | None = None  # when the latest step came
        self.spacing: list[float] = []  # seconds between steps while runs were training
        self.paused = 0.0  # seconds of silences taken for pauses
        self.expect(runs)

    def expect(self, runs: Sequence[SweepRun]) -> None:
        """Count ``runs`` in the sitting (those already counted stay as they were)."""
        for run in runs:
            key = str(run.path)
            if key not in self.span:
                self.span[key] = (run.config.steps - steps_left(run), run.config.steps)
                self.weight[key] = self.tokens_per_step(run)

    def update(self, path: str, step: int) -> None:
        """A run reached ``step``."""
        if path not in self.span:
            return
        now = self.clock()
        if self.last_heard is not None and self._training():  # no evaluation can lie in this silence
            silence = now - self.last_heard
            usual = statistics.median(self.spacing) if self.spacing else 0.0
            if self.spacing and silence > max(PAUSE_FLOOR, PAUSE_FACTOR * usual):
                self.paused += silence - usual
            else:
                self.spacing.append(silence)
        self.last_heard = now
        self.at[path] = max(step, self.at.get(path, 0))

    def _training(self) -> bool:
        """Whether a run of the sitting has started and not reached its last step."""
        return any(self.at[path] < self.span[path][1] for path in self.at)

    def last_step(self, path: str) -> int | None:
        return self.span[path][1] if path in self.span else None

    def line(self) -> str:
        """``3/10 runs, 41% of their tokens, about 12.5 min left`` (the time once a step is taken)."""
        total = sum((end - start) * self.weight[path] for path, (start, end) in self.span.items())
        done = sum(
            max(0, self.at.get(path, start) - start) * self.weight[path] for path, (start, _) in self.span.items()
        )
        trained = sum(1 for path, (start, end) in self.span.items() if self.at.get(path, start) >= end)
        line = f"{trained}/{len(self.span)} runs, {done / total if total else 1:.0%} of their tokens"
        elapsed = self.clock() - self.began - self.paused
        if done and elapsed > 0:
            line += f", about {duration((total - done) * elapsed / done)} left"
        return line
