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


@dataclass
class Outcome:
    """One intervention on one run."""

    intervention: Intervention  # resolved: every value it acted with
    family: str  # none, log-length, cap, rope, given, temperature, window, head-temperature
    kind: str  # none | fixed | tuned
    iid: float | None  # exact match on IID examples (task runs), a check that seen lengths are kept
    test: dict[str, float]  # the headline: OOD exact match, or perplexity at the longest multiple past 1
    buckets: list[dict[str, Any]]  # {"at": length or multiple, "mean", "low", "high", "n"}
    tuning: dict[str, Any] | None = None  # what was tried on the validation slice, and its scores

    def to_json(self) -> dict[str, Any]:
        return {
            "intervention": self.intervention.to_json(),
            "family": self.family,
            "kind": self.kind,
            "iid": self.iid,
            "test": self.test,
            "buckets": self.buckets,
            "tuning": self.tuning,
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

    def to_json(self) -> dict[str, Any]:
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
            "outcomes": [o.to_json() for o in self.outcomes],
        }


@dataclass
class ExtrapolationReport:
    runs: list[RunExtrapolation]
    measure: str  # "exact match" | "perplexity"
    folder: Path
    seed: int = 0

    @property
    def context(self) -> int | None:
        contexts = {r.context for r in self.runs}
        return contexts.pop() if len(contexts) == 1 else None

    @property
    def higher_is_better(self) -> bool:
        return self.measure == "exact match"

    def to_json(self) -> dict[str, Any]:
        return {"measure": self.measure, "seed": self.seed, "runs": [r.to_json() for r in self.runs]}

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per (run, intervention, bucket), the headline as bucket "test"."""
        rows = []
        for run in self.runs:
            for o in run.outcomes:
                common = {
                    "run": run.label,
                    "pe": run.pe,
                    "intervention": o.intervention.name,
                    "family": o.family,
                    "kind": o.kind,
                    "iid": o.iid,
                }
                rows.append({**common, "bucket": "test", "context": None, **_cell(o.test)})
                rows += [{**common, "bucket": b["at"], "context": b.get("context"), **_cell(b)} for b in o.buckets]
        return rows

    def to_markdown(self) -> str:
        return "\n".join(summary(self))

    def write(self, out_dir: str | Path) -> list[str]:
        from probe.atomic import atomic_write_json, atomic_write_text, write_json_and_csv
        from probe.figures import write_figure
        from probe.figures.extrapolation import extrapolation_figure

        out_dir = Path(out_dir)
        written = write_json_and_csv(out_dir, STEM, self.to_json(), self.to_rows())
        atomic_write_text(out_dir / f"{STEM}.md", self.to_markdown() + "\n")
        written.append(out_dir / f"{STEM}.md")
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
            "| kind | family | intervention | "
            + ("IID | " if report.measure == "exact match" else "")
            + f"{headline} | change |",
            "|---|---|---|" + ("---|" if report.measure == "exact match" else "") + "---|---|",
        ]
        base = run.baseline.test["mean"]
        for o in sorted(run.outcomes, key=lambda o: KIND_ORDER.index(o.kind)):
            iid = f"{100 * o.iid:.1f}% | " if o.iid is not None else ""
            change = o.test["mean"] - base
            delta = f"{100 * change:+.1f} pts" if report.measure == "exact match" else f"{change:+.2f}"
            lines.append(
                f"| {o.kind} | {o.family} | {o.intervention.name} | {iid}{format_value(o.test, report.measure)} "
                f"| {delta} |"
            )
        for family, why in run.skipped.items():
            lines.append(
                f"| - | {family} | "
                + ("- | " if report.measure == "exact match" else "")
                + f"not applicable: {why} | |"
            )
        lines.append("")
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
            lines.append(f"| {o.intervention.name} | " + " | ".join(values) + " |")
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
        row = {"kind": o["kind"], "family": o["family"], "intervention": o["intervention"]["name"]}
        if o["iid"] is not None:
            row["IID"] = scale * o["iid"]
        row |= {
            measure: scale * test["mean"],
            "low": scale * test["low"],
            "high": scale * test["high"],
            "change": scale * (test["mean"] - base),
        }
        rows.append(row)
    return rows
