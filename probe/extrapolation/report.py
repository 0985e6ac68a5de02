"""What `probe extrapolate` found, as one type: per run, each intervention's score on the unseen lengths
(exact match) or contexts (perplexity), per bucket, with bootstrap intervals; written as JSON, CSV, Markdown
and a figure per PE."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.models.interventions import Intervention

KIND_ORDER = ("none", "fixed", "tuned")
STEM = "extrapolation"
IID_MARGIN = 0.05
"""An intervention whose IID exact match falls more than this (5 points) below the untouched run's, or a language
model's whose perplexity within its context (at most 1 x T) rises by more than this share (5%), is flagged
wherever it is reported, and never called best: it buys unseen lengths with the lengths trained on."""
NO_CHANGE = {"temperature": "temperature=1", "head-temperature": "head-temperature=1", "window": "window=off"}


@dataclass
class Outcome:
    """One intervention on one run."""

    intervention: Intervention  # resolved: every value it acted with
    family: str  # none, log-length, cap, rope, given, temperature, window, head-temperature
    kind: str  # none | fixed | tuned
    iid: float | None  # the check that seen lengths are kept: IID exact match, or perplexity at <= 1 x T
    test: dict[str, float]  # the headline: OOD exact match, or perplexity at the longest multiple past 1
    buckets: list[dict[str, Any]]  # {"at": length or multiple, "mean", "low", "high", "n"}
    tuning: dict[str, Any] | None = None  # what was tried on the validation slice, and its scores
    valid: tuple[float, float] | None = None  # its validation slice's score (tuning.Score.key): what best reads

    def to_json(self) -> dict[str, Any]:
        return {
            "intervention": self.intervention.to_json(),
            "family": self.family,
            "kind": self.kind,
            "iid": self.iid,
            "test": self.test,
            "buckets": self.buckets,
            "tuning": self.tuning,
            "valid": None if self.valid is None else list(self.valid),
        }


@dataclass
class RunExtrapolation:
    """A run untouched and under each intervention."""

    label: str
    pe: str
    path: str
    seed: int
    trained_length: int  # L: what log-length, cap and rope read as the length trained on
    validation: str  # the slice tuned on, named
    outcomes: list[Outcome]
    skipped: dict[str, str]  # family -> why this run takes none
    trained_length_is: str = ""  # how L was read
    context: int | None = None  # T of a language model's multiples

    @property
    def baseline(self) -> Outcome:
        return self.outcomes[0]

    @property
    def is_language_model(self) -> bool:
        return self.context is not None

    def iid_change(self, outcome: Outcome) -> float | None:
        """``outcome``'s IID exact match less the untouched run's; for a language model, its perplexity within
        the context relative to the untouched one's (+0.1: 10% higher). None where either has none."""
        base = self.baseline.iid
        if outcome.iid is None or base is None:
            return None
        return outcome.iid / base - 1 if self.is_language_model else outcome.iid - base

    def iid_dropped(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` lost more than :data:`IID_MARGIN` of IID exact match (or of perplexity within T)."""
        change = self.iid_change(outcome)
        if change is None:
            return False
        worse = change if self.is_language_model else -change
        return round(worse, 9) > IID_MARGIN  # exactly the margin is not more, however rounded

    def best(self) -> Outcome | None:
        """The intervention that scores highest on the validation slice among those that keep IID (within
        :data:`IID_MARGIN`) and beat untouched there on its measure (exact match, or the NLL of a language
        model), not on a tie-break alone: chosen as the tuned families choose, never on the test; ties go to the
        first (fixed rules before tuned). None where none improves on untouched there."""
        base = self.baseline.valid
        if base is None:
            return None
        better = [
            o for o in self.outcomes[1:] if o.valid is not None and o.valid[0] > base[0] and not self.iid_dropped(o)
        ]
        return max(better, key=lambda o: o.valid, default=None)

    def to_json(self) -> dict[str, Any]:
        best = self.best()
        outcomes = [
            {**o.to_json(), "shown": shown(o), "iid_change": self.iid_change(o), "iid_dropped": self.iid_dropped(o)}
            for o in self.outcomes
        ]
        return {
            "label": self.label,
            "pe": self.pe,
            "path": self.path,
            "seed": self.seed,
            "trained_length": self.trained_length,
            "trained_length_is": self.trained_length_is,
            "context": self.context,
            "validation": self.validation,
            "skipped": self.skipped,
            "outcomes": outcomes,
            "best": None if best is None else shown(best),  # on validation, among those that keep IID
        }


@dataclass
class ExtrapolationReport:
    """What `probe extrapolate` found: per run, each intervention beside the run untouched, in exact match or
    perplexity (``measure``); a table by :meth:`to_rows`, its files (JSON, CSV, Markdown, figures) by
    :meth:`write`."""

    runs: list[RunExtrapolation]
    measure: str  # "exact match" | "perplexity"
    folder: Path
    seed: int = 0

    name = STEM  # its outputs' folder (probe.analysis.report.Report)

    @property
    def context(self) -> int | None:
        contexts = {r.context for r in self.runs}
        return contexts.pop() if len(contexts) == 1 else None

    @property
    def higher_is_better(self) -> bool:
        return self.measure == "exact match"

    def to_json(self) -> dict[str, Any]:
        runs = [r.to_json() for r in self.runs]
        return {"measure": self.measure, "seed": self.seed, "iid_margin": IID_MARGIN, "runs": runs}

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per (run, intervention, bucket), the headline as bucket "test"."""
        rows = []
        for run in self.runs:
            for o in run.outcomes:
                common = {
                    "run": run.label,
                    "pe": run.pe,
                    "intervention": shown(o),
                    "family": o.family,
                    "kind": o.kind,
                    "iid": o.iid,
                    "iid_dropped": run.iid_dropped(o),
                }
                rows.append({**common, "bucket": "test", "context": None, **_cell(o.test)})
                rows += [{**common, "bucket": b["at"], "context": b.get("context"), **_cell(b)} for b in o.buckets]
        return rows

    def to_markdown(self) -> str:
        return "\n".join(summary(self))

    def write(self, out_dir: str | Path) -> list[str]:
        """JSON, CSV, Markdown, a figure per PE and each fitted per-head temperature file under ``out_dir``, as
        `probe extrapolate` writes them; the paths written."""
        from probe.analysis.report import write_tables
        from probe.atomic import atomic_write_json
        from probe.figures import write_figure
        from probe.figures.extrapolation import extrapolation_figure

        out_dir = Path(out_dir)
        written = write_tables(self, out_dir, STEM, self.to_markdown() + "\n")
        for pe in dict.fromkeys(r.pe for r in self.runs):
            runs = [r.to_json() for r in self.runs if r.pe == pe]
            written += write_figure(extrapolation_figure(runs, self.measure), out_dir / f"{STEM}_{_safe(pe)}")
        for run in self.runs:
            for o in run.outcomes:
                if o.family == "head-temperature" and o.kind == "tuned":
                    path = out_dir / f"head_temperatures_{_safe(run.label)}.json"
                    atomic_write_json(path, head_temperature_file(run, o))
                    written.append(path)
        return [str(p) for p in written]


def head_temperature_file(run: RunExtrapolation, outcome: Outcome) -> dict[str, Any]:
    """What ``--intervene head-temperature=FILE`` reads back: the temperatures fitted for ``run``, and on what."""
    return {
        "temperatures": [list(row) for row in outcome.intervention.head_temperatures],
        "run": run.path,
        "fitted": outcome.intervention.head_source,
        "on": run.validation,
    }


def shown(outcome: Outcome) -> str:
    """The intervention as reports print it: its name, and a tuned family that settled on no change as the value
    it settled on (``temperature=1``), not as ``none``."""
    if outcome.kind == "tuned" and outcome.intervention.is_identity:
        return NO_CHANGE.get(outcome.family, f"{outcome.family}: no change")
    return outcome.intervention.name


def iid_cell(run: RunExtrapolation, outcome: Outcome) -> str:
    """``96.0%``, or ``27.5% (-68.5 pts, dropped)`` where IID fell past :data:`IID_MARGIN`; a language model's
    perplexity within T, ``14.20``, or ``31.07 (+118.8%, dropped)``."""
    if outcome.iid is None:
        return "-"
    dropped = run.iid_dropped(outcome)
    if run.is_language_model:
        return f"{outcome.iid:.2f}" + (f" ({100 * run.iid_change(outcome):+.1f}%, dropped)" if dropped else "")
    return f"{100 * outcome.iid:.1f}%" + (f" ({100 * run.iid_change(outcome):+.1f} pts, dropped)" if dropped else "")


def iid_heading(measure: str) -> str:
    """The column of the check that seen lengths are kept."""
    return "IID" if measure == "exact match" else "perplexity within T"


def dropped_words(run: RunExtrapolation) -> str:
    """What the tables' ``dropped`` means for ``run``."""
    if run.is_language_model:
        return f"dropped: perplexity within T rose over {100 * IID_MARGIN:.0f}% above untouched (never called best)"
    return f"dropped: IID exact match fell more than {100 * IID_MARGIN:.0f} points below untouched (never called best)"


def kept_words(run: RunExtrapolation) -> str:
    """What keeping IID means for ``run``, for the lines that say it."""
    if run.is_language_model:
        return f"keeps perplexity within T (at most {100 * IID_MARGIN:.0f}% higher)"
    return f"keeps IID (within {100 * IID_MARGIN:.0f} pts)"


def best_line(run: RunExtrapolation, higher_is_better: bool) -> str:
    """``best on validation that keeps IID (within 5 pts): temperature=0.8 (test +6.2 pts)``, or that none
    improves on untouched there."""
    best = run.best()
    if best is None:
        return f"{run.label}: no intervention that {kept_words(run)} improves on untouched on the validation slice"
    change = best.test["mean"] - run.baseline.test["mean"]
    delta = f"{100 * change:+.1f} pts" if higher_is_better else f"{change:+.2f}"
    return f"{run.label}: best on the validation slice that {kept_words(run)}: {shown(best)} (test {delta})"


def _cell(stats: dict[str, Any]) -> dict[str, Any]:
    return {"mean": stats["mean"], "low": stats["low"], "high": stats["high"], "n": stats["n"]}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


def format_value(stats: dict[str, float], measure: str) -> str:
    if measure == "exact match":
        return f"{100 * stats['mean']:.1f}% [{100 * stats['low']:.1f}, {100 * stats['high']:.1f}]"
    return f"{stats['mean']:.2f} [{stats['low']:.2f}, {stats['high']:.2f}]"


def summary(report: ExtrapolationReport) -> list[str]:
    """The Markdown tables: per run, each intervention's headline against untouched, fixed rules and tuned
    ones apart; then per run, each bucket."""
    headline = "OOD exact match (unseen lengths)" if report.measure == "exact match" else "perplexity past T"
    lines = [f"# Extrapolation: {headline}, 95% bootstrap intervals over examples", ""]
    for run in report.runs:
        lines += [
            f"## {run.label}",
            "",
            f"L = {run.trained_length} ({run.trained_length_is}); tuned on {run.validation}.",
            "",
            f"| kind | family | intervention | {iid_heading(report.measure)} | {headline} | change |",
            "|---|---|---|---|---|---|",
        ]
        base = run.baseline.test["mean"]
        for o in sorted(run.outcomes, key=lambda o: KIND_ORDER.index(o.kind)):
            change = o.test["mean"] - base
            delta = f"{100 * change:+.1f} pts" if report.measure == "exact match" else f"{change:+.2f}"
            lines.append(
                f"| {o.kind} | {o.family} | {shown(o)} | {iid_cell(run, o)} | {format_value(o.test, report.measure)} "
                f"| {delta} |"
            )
        for family, why in run.skipped.items():
            lines.append(f"| - | {family} | not applicable: {why} | - | | |")
        lines += ["", best_line(run, report.higher_is_better) + ".", ""]
        if any(run.iid_dropped(o) for o in run.outcomes):
            lines += [dropped_words(run) + ".", ""]
        keys = [b["at"] for b in run.baseline.buckets]
        unit = "length" if report.measure == "exact match" else "x T"
        lines += [
            "| intervention | " + " | ".join(f"{k} {unit}" if unit == "x T" else str(k) for k in keys) + " |",
            "|---|" + "---|" * len(keys),
        ]
        for o in run.outcomes:
            cells = {b["at"]: b for b in o.buckets}
            values = [
                (f"{100 * cells[k]['mean']:.1f}" if report.measure == "exact match" else f"{cells[k]['mean']:.2f}")
                if k in cells
                else "-"
                for k in keys
            ]
            lines.append(f"| {shown(o)} | " + " | ".join(values) + " |")
        lines.append("")
    return lines


def headline_rows(run: dict[str, Any], measure: str) -> list[dict[str, Any]]:
    """One row per intervention of a run (as :meth:`RunExtrapolation.to_json` gives it): its kind, the
    headline score with its interval and its change against untouched, and IID exact match for task runs."""
    base = run["outcomes"][0]["test"]["mean"]
    scale = 100 if measure == "exact match" else 1
    rows = []
    for o in run["outcomes"]:
        test = o["test"]
        row = {"kind": o["kind"], "family": o["family"], "intervention": o.get("shown", o["intervention"]["name"])}
        if o["iid"] is not None:
            row["IID"] = scale * o["iid"]
            row["IID dropped"] = bool(o.get("iid_dropped"))
        row |= {
            measure: scale * test["mean"],
            "low": scale * test["low"],
            "high": scale * test["high"],
            "change": scale * (test["mean"] - base),
        }
        rows.append(row)
    return rows
