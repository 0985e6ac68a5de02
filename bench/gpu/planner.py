"""How many whole paper-scale runs the time left can hold, from rates measured minutes before on the
same device: a run is its steps at the measured member-step rate, its selection evaluations, the test
split's scoring, and its start (build, warm-up, capture). Runs go one after another, so each one's
numbers are on disk before the next starts; the plan is remade before each run from the time then
left and the longest run so far."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ORDER = ("nope", "t5", "alibi", "rotary", "ape")  # the paper's SCAN OOD: NoPE 79.7, T5 79.8 first


@dataclass(frozen=True)
class RunCost:
    """What one whole run costs, each term from a measurement (seconds, or steps per second)."""

    steps: int
    member_steps_per_s: float
    evaluations: int  # selection evaluations in a run (the authors': 20)
    evaluation_s: float  # one selection evaluation
    scoring_s: float  # the test split and held-out IID examples, teacher-forced, and publishing
    startup_s: float  # build, warm-up and capture before the first step counts

    def seconds(self) -> float:
        training = self.steps / self.member_steps_per_s if self.member_steps_per_s > 0 else float("inf")
        return training + self.evaluations * self.evaluation_s + self.scoring_s + self.startup_s


def plan(pes: Sequence[str], cost: RunCost, seconds_left: float, margin_s: float, slack: float = 1.1) -> list[str]:
    """The first PEs of ``pes`` whose whole runs, one after another, each estimated at ``slack`` times
    its cost, end ``margin_s`` before ``seconds_left`` runs out (none if even one does not)."""
    per_run = slack * cost.seconds()
    room = seconds_left - margin_s
    if room <= 0 or per_run == float("inf"):
        return []
    return list(pes[: int(room // per_run)])


def measured_pes(records: Iterable[dict], preset: str, seed: int, steps: int, precision: str = "auto") -> set[str]:
    """PEs that some earlier record holds a whole run of (this preset, seed, step count and forward
    precision; a record that names none ran ``auto``): a later chance measures the others, and the
    results merge."""
    done = set()
    wanted = (preset, seed, steps, precision)
    for record in records:
        settings = record.get("settings", {})
        found = (settings.get("preset"), settings.get("seed"), settings.get("steps"), settings.get("precision", "auto"))
        if found != wanted:
            continue
        done.update(pe for pe, run in record.get("runs", {}).items() if run.get("test"))
    return done


def load_records(results: Path, device_type: str) -> list[dict]:
    """The kit's earlier records for ``device_type`` under ``results`` (a damaged one is skipped)."""
    records = []
    for path in sorted(results.glob(f"gpu_kit_*_{device_type}.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def candidates(asked: Sequence[str] | None, done: set[str]) -> list[str]:
    """``asked`` as given (``--pes``), or else the paper's five in :data:`ORDER` less those ``done``."""
    return list(asked) if asked else [pe for pe in ORDER if pe not in done]
