"""A run's evaluation as one type (what ``eval.json`` holds), and the means over seeds every study reports.

Section 3's measure: greedy exact match per length bucket, on held-out IID examples (the training
lengths) and the test split (seen and unseen lengths). :func:`probe.analysis.evaluation.evaluate_run`
makes an :class:`EvalReport`; every reader (``probe eval``, the explorer, `probe reproduce`, `probe sweep`)
reads ``eval.json`` through :func:`read_eval`, and means over seeds come from :func:`mean_over_seeds` only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVAL = "eval.json"


@dataclass(frozen=True)
class Bucket:
    """Exact match on the examples of one length (``seen``: a training length)."""

    length: int
    n: int
    correct: int
    accuracy: float
    seen: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "n": self.n,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "seen": self.seen,
        }


@dataclass(frozen=True)
class LastStep:
    """A run whose published checkpoint was selected on IID validation: its last step's accuracy beside it."""

    step: int
    iid_accuracy: float
    ood_accuracy: float | None

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "iid_accuracy": self.iid_accuracy, "ood_accuracy": self.ood_accuracy}


@dataclass
class EvalReport:
    """One run's exact match per length bucket, and its IID (training lengths) and OOD (unseen) means."""

    label: str
    path: str
    task: str
    task_folder: str
    pe: str
    seed: int
    iid_accuracy: float
    ood_accuracy: float | None  # None: the task has no unseen length
    buckets: list[Bucket]
    n_examples: int
    task_options: dict[str, Any] = field(default_factory=dict)
    pe_options_at_inference: dict[str, Any] = field(default_factory=dict)
    selected_step: int | None = None  # the step selection on IID validation published
    last: LastStep | None = None
    written_to: str | None = None  # where evaluate_run wrote it
    intervention: dict[str, Any] = field(default_factory=dict)  # on its attention at inference (resolved)
    asked: dict[str, Any] = field(default_factory=dict)  # the examples asked for (n_test, n_valid): what a rerun reuses
    seconds: float | None = None  # wall time of the evaluation where it ran (None: written before it was timed)

    def to_json(self) -> dict[str, Any]:
        """The dict ``eval.json`` holds, its keys in the order they have always been written."""
        data: dict[str, Any] = {
            "label": self.label,
            "path": self.path,
            "pe_options_at_inference": self.pe_options_at_inference,
            "task": self.task,
            "task_folder": self.task_folder,
            "task_options": self.task_options,
            "pe": self.pe,
            "seed": self.seed,
            "n_examples": self.n_examples,
            "iid_accuracy": self.iid_accuracy,
            "ood_accuracy": self.ood_accuracy,
            "buckets": [b.to_json() for b in self.buckets],
        }
        if self.selected_step is not None:
            data["selected_step"] = self.selected_step
        if self.last is not None:
            data["last"] = self.last.to_json()
        if self.written_to is not None:
            data["written_to"] = self.written_to
        if self.intervention:
            data["intervention"] = self.intervention
        if self.asked:
            data["asked"] = self.asked
        if self.seconds is not None:
            data["seconds"] = self.seconds
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalReport:
        """The report ``data`` holds; older files without ``n``, ``correct``, ``label`` or options read too.
        Raises KeyError, TypeError or ValueError where ``data`` is not such a report."""
        buckets = [
            Bucket(
                length=_number(b["length"], int),
                n=int(b.get("n", 0)),
                correct=int(b.get("correct", 0)),
                accuracy=_number(b["accuracy"], float),
                seen=_flag(b["seen"]),
            )
            for b in data["buckets"]
        ]
        last = data.get("last")
        return cls(
            label=str(data.get("label", data["pe"])),
            path=str(data.get("path", "")),
            task=str(data["task"]),
            task_folder=str(data["task_folder"]),
            pe=str(data["pe"]),
            seed=int(data["seed"]),
            iid_accuracy=float("nan") if data["iid_accuracy"] is None else _number(data["iid_accuracy"], float),
            ood_accuracy=None if data["ood_accuracy"] is None else _number(data["ood_accuracy"], float),
            buckets=buckets,
            n_examples=int(data.get("n_examples", sum(b.n for b in buckets))),
            task_options=dict(data.get("task_options", {})),
            pe_options_at_inference=dict(data.get("pe_options_at_inference", {})),
            selected_step=None if data.get("selected_step") is None else int(data["selected_step"]),
            last=None
            if last is None
            else LastStep(int(last["step"]), float(last["iid_accuracy"]), _optional(last["ood_accuracy"])),
            written_to=data.get("written_to"),
            intervention=dict(data.get("intervention", {})),
            asked=dict(data.get("asked", {})),
            seconds=_optional(data.get("seconds")),
        )

    @property
    def beside_another(self) -> bool:
        """Written beside an evaluation on more examples (``eval+n=N.json``), which it did not replace."""
        return self.written_to is not None and Path(self.written_to).stem.endswith(f"+n={self.n_examples}")

    @property
    def name(self) -> str:
        """Its files' stem: ``eval``, or where :func:`~probe.analysis.evaluation.evaluate_run` wrote it
        (``eval+factor=4+scaling=yarn``, ``eval+n=100``)."""
        return Path(EVAL).stem if self.written_to is None else Path(self.written_to).stem

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per length bucket, for a table or a DataFrame."""
        return [{"label": self.label, "pe": self.pe, "seed": self.seed, **b.to_json()} for b in self.buckets]

    def write(self, out_dir: str | Path) -> list[str]:
        """``<name>.json`` and ``<name>.csv`` (a row per length bucket) under ``out_dir``; the paths written."""
        from probe.analysis.report import write_tables

        return [str(p) for p in write_tables(self, out_dir, self.name)]

    def curve(self) -> dict[str, Any]:
        """Inputs of :func:`probe.figures.accuracy_by_length` for this run."""
        return {
            "label": self.label,
            "pe": self.pe,
            "lengths": [b.length for b in self.buckets],
            "accuracy": [b.accuracy for b in self.buckets],
            "counts": [b.n for b in self.buckets],
        }


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return kind(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"not a boolean: {value!r}")
    return value


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def read_eval(folder: str | Path, name: str = EVAL) -> EvalReport | None:
    """A run folder's ``eval.json`` (or ``name`` beside it), or None when it is missing, unreadable or not
    such a report (then ``probe eval`` rewrites it).

    :param folder: a run folder ``probe eval`` has evaluated.
    :param name: another report beside it (``eval+n=100.json``, ``eval[temperature=0.8].json``, ...)."""
    try:
        return EvalReport.from_json(json.loads((Path(folder) / name).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are there (None and NaN left out); None where none is."""
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept else None


@dataclass(frozen=True)
class SeedMean:
    """One PE on one task folder, means over its seeds: the numbers the paper's figures show."""

    task_folder: str
    pe: str
    seeds: list[int]
    iid_accuracy: float | None
    ood_accuracy: float | None  # None: no unseen length
    ood_range: tuple[float, float] | None  # (lowest, highest) OOD of its seeds; None with fewer than two
    lengths: list[int]
    accuracy: list[float | None]  # per length
    seen: list[bool]
    selected_steps: list[int]  # of the runs selected on IID validation
    last_iid: float | None  # those runs' last steps
    last_ood: float | None


def pe_keys(reports: Sequence[EvalReport]) -> list[str]:
    """Each report's PE as results group by it: its PE folder's name (``rotary+base=500``) where runs of
    that PE were trained with different options, so two models are never read as two seeds of one;
    the PE's name otherwise, as the studies' reports have always grouped."""
    folders = [Path(r.path).parent.name for r in reports]
    names = [f if f.startswith(f"{r.pe}+") else r.pe for r, f in zip(reports, folders)]
    variants: dict[str, set[str]] = {}
    for r, name in zip(reports, names):
        variants.setdefault(r.pe, set()).add(name)
    return [name if len(variants[r.pe]) > 1 else r.pe for r, name in zip(reports, names)]


def mean_over_seeds(reports: Sequence[EvalReport]) -> list[SeedMean]:
    """Per task folder and PE (folders in the order they first appear, PEs within each too): IID, OOD and
    per-length means over seeds. A seed without unseen lengths adds nothing to the OOD mean."""
    groups: dict[str, dict[str, list[EvalReport]]] = {}
    for r, key in zip(reports, pe_keys(reports)):
        groups.setdefault(r.task_folder, {}).setdefault(key, []).append(r)
    return [_seed_mean(folder, pe, mine) for folder, by_pe in groups.items() for pe, mine in by_pe.items()]


def _seed_mean(folder: str, pe: str, mine: list[EvalReport]) -> SeedMean:
    by_length: dict[int, list[float]] = {}
    seen: dict[int, bool] = {}
    for r in mine:
        for b in r.buckets:
            by_length.setdefault(b.length, []).append(b.accuracy)
            seen[b.length] = b.seen
    lengths = sorted(by_length)
    last = [r.last for r in mine if r.last is not None]
    ood = [r.ood_accuracy for r in mine if r.ood_accuracy is not None]
    return SeedMean(
        task_folder=folder,
        pe=pe,
        seeds=sorted(r.seed for r in mine),
        iid_accuracy=mean(r.iid_accuracy for r in mine),
        ood_accuracy=mean(r.ood_accuracy for r in mine),
        ood_range=(min(ood), max(ood)) if len(ood) > 1 else None,
        lengths=lengths,
        accuracy=[mean(by_length[n]) for n in lengths],
        seen=[seen[n] for n in lengths],
        selected_steps=[r.selected_step for r in mine if r.selected_step is not None],
        last_iid=mean(x.iid_accuracy for x in last),
        last_ood=mean(x.ood_accuracy for x in last),
    )
