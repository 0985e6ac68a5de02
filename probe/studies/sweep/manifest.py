"""The sweep manifest (``sweep-NAME.json``): each run's state, attempts, timings, node and error."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.studies.sweep.grid import SweepRun

STATES = ("pending", "running", "done", "failed", "interrupted", "elsewhere")  # elsewhere: another process holds it
RESULTS = (
    "status",
    "steps",
    "train_seconds",
    "eval_seconds",
    "final_loss",
    "steps_per_second",
    "iid_accuracy",
    "ood_accuracy",
    "heldout_loss",
    "heldout_perplexity",
)  # what a finished attempt recorded: cleared when the run is to be done again


class Manifest:
    """The sweep's record on disk: one entry per run (state, attempts, timings, node, error),
    rewritten atomically after every change of state."""

    def __init__(self, path: str | Path, name: str, runs: Sequence[SweepRun]):
        self.path = Path(path)
        previous: dict[str, dict[str, Any]] = {}
        self.ray: dict[str, Any] = {}
        if self.path.is_file():
            try:
                old = json.loads(self.path.read_text())
                previous = {e["label"]: e for e in old.get("runs", [])}
                self.ray = old.get("ray", {})
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                previous = {}
        self.name = name
        self.created = time.time()
        self.entries: dict[str, dict[str, Any]] = {}
        for run in runs:
            entry = {
                "label": run.label,
                "path": str(run.path),
                "task": run.path.parent.parent.name,
                "pe": run.config.pe,
                "seed": run.config.seed,
                "state": "pending",
                "attempts": 0,
                "node": None,
                "started": None,
                "finished": None,
                "seconds": None,
                "error": None,
            }
            old = previous.get(run.label, {})
            entry.update(
                {
                    k: old[k]
                    for k in (
                        "attempts",
                        "node",
                        "started",
                        "finished",
                        "seconds",
                        "error",
                        "train_seconds",
                        "eval_seconds",
                        "status",
                        "iid_accuracy",
                        "ood_accuracy",
                        "heldout_loss",
                        "heldout_perplexity",
                        "history",
                        "held_by",
                    )
                    if k in old
                }
            )
            self.entries[run.label] = entry
        for label, old in previous.items():  # runs this invocation left out (--pe, --seed ...) stay recorded
            self.entries.setdefault(label, old)

    def pending(self, label: str) -> None:
        """Mark a run to be done (again), its last attempt's results cleared so that none is read as
        this attempt's; written with the next write."""
        entry = self.entries[label]
        for key in RESULTS:
            entry.pop(key, None)
        entry.update(state="pending", error=None, finished=None, seconds=None)

    def update(self, label: str, write: bool = True, **fields: Any) -> dict[str, Any]:
        self.entries[label].update(fields)
        if write:
            self.write()
        return self.entries[label]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for entry in self.entries.values():
            counts[entry["state"]] = counts.get(entry["state"], 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "created": self.created,
            "updated": time.time(),
            "ray": self.ray,
            "counts": self.counts(),
            "runs": list(self.entries.values()),
        }

    def write(self) -> None:
        from probe.atomic import atomic_write_json

        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.to_dict())


def manifest_path(root: str | Path, name: str) -> Path:
    return Path(root) / f"sweep-{name}.json"


def find_manifests(root: str | Path) -> list[Path]:
    """The sweep manifests (``sweep-NAME.json``) in a checkpoints root, by name."""
    return sorted(p for p in Path(root).glob("sweep-*.json") if p.is_file())


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A manifest as :class:`Manifest` wrote it (ProbeError if it is not one)."""
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
        if not all(isinstance(e["label"], str) for e in manifest["runs"]):
            raise TypeError
    except OSError as error:
        raise ProbeError(f"cannot read sweep manifest {path}: {error.strerror}") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ProbeError(f"{path} is not a sweep manifest (corrupt JSON or no list of runs)") from None
    return manifest
