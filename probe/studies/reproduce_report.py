"""`probe reproduce`'s report: per scenario ours beside the paper's released runs, where they differ, the
ranks per category with their intervals over seeds, and the report's files (JSON, Markdown, HTML)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.analysis.chance import GUESS_SHOWN, guess_of
from probe.analysis.eval_report import EvalReport, mean_over_seeds, read_eval
from probe.analysis.evaluation import mean_ranks
from probe.reference import SCRATCHPAD_GROUP, category, dataset_for, paper_runs, paper_summary
from probe.studies import section6_view
from probe.studies.ranks import (
    mean_reciprocal_ranks,
    paper_ordering,
    rank_intervals,
    ranked_over_seeds,
    ranked_text,
    rests_on,
    without_repeats,
)
from probe.studies.sweep import SweepRun

if TYPE_CHECKING:
    import plotly.graph_objects as go

REPORT = "report"
RANKING_ONLY = frozenset({"section3", "section6"})
"""Studies that rank PEs only: no NoPE' (the seed baseline the attention analyses read against), no
attention analyses."""


def _by_pe(evals: Sequence[EvalReport]) -> dict[str, dict[str, Any]]:
    """Per PE, from eval reports of one task folder: IID and OOD exact match and accuracy per length, means
    over seeds (:func:`~probe.analysis.eval_report.mean_over_seeds`), and the examples per length (the
    fewest over the seeds), which the figures show beside each bucket."""
    return {
        m.pe: {
            "iid": m.iid_accuracy,
            "ood": m.ood_accuracy,
            "ood_range": m.ood_range,
            "seeds": m.seeds,
            "lengths": m.lengths,
            "accuracy": m.accuracy,
            "seen": m.seen,
            "counts": _counts(evals, m.pe, m.lengths),
            "selected_steps": m.selected_steps,
            "last_iid": m.last_iid,
            "last_ood": m.last_ood,
        }
        for m in mean_over_seeds(evals)
    }


def _counts(evals: Sequence[EvalReport], pe: str, lengths: Sequence[int]) -> list[int]:
    """Examples per length of ``pe``'s runs among ``evals``, the fewest over its seeds."""
    counts: dict[int, int] = {}
    for e in evals:
        if e.pe == pe:
            for b in e.buckets:
                counts[b.length] = min(counts.get(b.length, b.n), b.n)
    return [counts[n] for n in lengths]


def disagreements(
    ours: dict[str, dict[str, Any]],
    paper: dict[str, dict[str, Any]],
    folder: str,
    gap: float = 0.15,
    clear: float = 0.05,
    tie: float = 0.01,
) -> list[str]:
    """Sentences naming where our OOD accuracy departs from the paper's by ``gap`` or more, and each
    pair of PEs that one side orders clearly (by ``clear`` or more) and the other reverses; pairs
    both sides call close (NoPE ≈ T5 in the paper) are not an inversion, and neither is a pair we
    tie (within ``tie``: 0.0% against 0.04% orders nothing)."""
    pes = [pe for pe in paper if pe in ours and ours[pe]["ood"] is not None]
    notes = []
    for pe in pes:
        difference = ours[pe]["ood"] - paper[pe]["ood"]
        if abs(difference) >= gap:
            notes.append(
                f"{folder}: {pe} reaches {100 * ours[pe]['ood']:.1f}% OOD where the paper's reaches "
                f"{100 * paper[pe]['ood']:.1f}% ({'+' if difference > 0 else ''}{100 * difference:.1f} "
                "points)."
            )
    for i, a in enumerate(pes):
        for b in pes[i + 1 :]:
            mine, theirs = ours[a]["ood"] - ours[b]["ood"], paper[a]["ood"] - paper[b]["ood"]
            if mine * theirs < 0 and abs(mine) >= tie and max(abs(mine), abs(theirs)) >= clear:
                high, low = (a, b) if mine > 0 else (b, a)
                notes.append(
                    f"{folder}: we rank {high} above {low} ({100 * ours[high]['ood']:.1f}% vs "
                    f"{100 * ours[low]['ood']:.1f}% OOD); the paper ranks {low} above {high} "
                    f"({100 * paper[low]['ood']:.1f}% vs {100 * paper[high]['ood']:.1f}%)."
                )
    return notes


def build_report(runs: Sequence[SweepRun], analyses: dict[str, Any], *, scale: str) -> dict[str, Any]:
    """The report's data from the study's run folders (:func:`report_of` their evaluations)."""
    evals = {str(r.path): read_eval(r.path) for r in runs}
    missing = [r.label for r in runs if evals[str(r.path)] is None]
    baseline_seed = None if scale in RANKING_ONLY else max(r.config.seed for r in runs)
    return report_of(
        [e for e in evals.values() if e is not None],
        analyses,
        scale=scale,
        baseline_seed=baseline_seed,
        missing=missing,
    )


def report_of(
    evaluations: Sequence[EvalReport],
    analyses: dict[str, Any],
    *,
    scale: str,
    baseline_seed: int | None = None,
    missing: Sequence[str] = (),
) -> dict[str, Any]:
    """The report's data: per scenario ours (NoPE at ``baseline_seed`` apart, as the NoPE' baseline it is)
    and the paper's, the ranks, the analyses, the notes; ``missing`` names what was not evaluated."""

    def is_baseline(e: EvalReport) -> bool:
        return e.pe == "nope" and e.seed == baseline_seed

    evaluated = [e for e in evaluations if not is_baseline(e)]
    tasks: dict[str, Any] = {}
    ours_queries: dict[str, dict[Any, dict[str, float]]] = {}
    for folder in dict.fromkeys(e.task_folder for e in evaluations):
        first = next(e for e in evaluations if e.task_folder == folder)
        task, resolved = first.task, first.task_options
        dataset = dataset_for(task, resolved)
        mine = [e for e in evaluated if e.task_folder == folder]
        baseline = [e for e in evaluations if e.task_folder == folder and is_baseline(e)]
        ours = _by_pe(mine)
        paper = paper_summary(dataset) if dataset else None
        name = category(task, resolved)
        for e in mine:
            if e.ood_accuracy is not None:
                ours_queries.setdefault(name, {}).setdefault((folder, e.seed), {})[e.pe] = e.ood_accuracy
        tasks[folder] = {
            "task": task,
            "options": resolved,
            "category": name,
            "paper_dataset": dataset,
            "ours": ours,
            "baseline": _by_pe(baseline).get("nope"),
            "paper": paper,
            "guess": guess_of(first),
            "notes": disagreements(ours, paper, folder) if paper else [],
            **analyses.get(folder, {}),
        }
    return {
        "scale": scale,
        "tasks": tasks,
        **_ranks(ours_queries, _paper_queries(tasks)),
        "mrr_on_papers_scenarios": _on_papers_scenarios(ours_queries, tasks),
        "mean_rank": {"ours": mean_ranks([e for e in evaluated if not e.task_options.get("scratchpad")])},
        "missing": list(missing),
        "notes": [n for t in tasks.values() for n in t["notes"]] + _unmatched(tasks),
    }


def _unmatched(tasks: dict[str, Any]) -> list[str]:
    """One note naming the scenarios whose task and options rebuild none of the paper's released splits (a
    scratchpad, a training length it did not train), where there are any: one line, not one a scenario."""
    alone = [folder for folder, entry in tasks.items() if not entry["paper"]]
    if alone and len(alone) == len(tasks) > 1:
        return [f"the paper's released results hold no run of any of the {len(alone)} scenarios here to compare with."]
    return [f"the paper's released results hold no run to compare with of: {', '.join(alone)}."] if alone else []


def _paper_queries(tasks: dict[str, Any]) -> dict[str, dict[Any, dict[str, float]]]:
    """{category: {(dataset, seed): {pe: OOD}}} of the paper's released runs of the report's scenarios."""
    queries: dict[str, dict[Any, dict[str, float]]] = {}
    for entry in tasks.values():
        if entry["paper_dataset"]:
            for run in paper_runs(entry["paper_dataset"]):
                key = (entry["paper_dataset"], run["seed"])
                queries.setdefault(entry["category"], {}).setdefault(key, {})[run["pe"]] = run["ood"]
    return queries


def _ranks(ours: dict[str, dict[Any, dict[str, float]]], paper: dict[str, dict[Any, dict[str, float]]]) -> dict:
    """The ranks, ours and the paper's: ties broken as the authors' notebook breaks them, with intervals over
    seeds, and again with ties split; and whether the paper's ordering holds in ours."""
    intervals = {"ours": rank_intervals(ours), "paper": rank_intervals(paper)}
    return {
        "mrr": {"ours": mean_reciprocal_ranks(ours), "paper": mean_reciprocal_ranks(paper)},
        "mrr_intervals": intervals,
        "mrr_ties_shared": {"ours": rank_intervals(ours, ties="shared"), "paper": rank_intervals(paper, ties="shared")},
        "paper_ordering": paper_ordering(intervals["ours"]),
    }


def _on_papers_scenarios(ours: dict[str, dict[Any, dict[str, float]]], tasks: dict[str, Any]) -> dict[str, Any]:
    """Our overall ranks again on the scenarios the paper's released runs hold (ties broken, then split): the
    paper's overall ranks rest on those alone, so this is the like-for-like row beside them. Empty where it holds
    none of ours."""
    like = {
        key: q
        for name, queries in ours.items()
        if name != SCRATCHPAD_GROUP
        for key, q in queries.items()
        if tasks[key[0]]["paper"]
    }
    ranked = {ties: ranked_over_seeds(like, ties=ties) for ties in ("first", "shared")}
    return {ties: entry for ties, entry in ranked.items() if entry}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def seed_range(ours: dict[str, Any], percent: Callable[[float | None], str]) -> str:
    """`` [low, high]``: the lowest and highest OOD exact match of a PE's seeds, where it has several."""
    spread = ours.get("ood_range")
    return "" if not spread else f" [{percent(spread[0])}, {percent(spread[1])}]"


def _selection(ours: dict[str, Any]) -> str:
    """`` best step 3400; last step 94.2% / 20.1% |`` where runs were selected on IID validation (the last step
    where the grid scored it too, ``eval_last``: Section 6's grid does not, its decoding being costly), else an
    empty cell."""
    if not ours.get("selected_steps"):
        return " |"
    steps = ",".join(map(str, ours["selected_steps"]))
    last = "" if ours.get("last_iid") is None else f"; last step {_pct(ours['last_iid'])} / {_pct(ours['last_ood'])}"
    return f" best step {steps}{last} |"


def markdown(report: dict[str, Any]) -> str:
    """The Markdown summary: per task, ours beside the paper's; Section 6's report where the study is its; the
    MRR; the notes."""
    lines = [f"# probe reproduce ({report['scale']} study)", ""]
    for folder, entry in report["tasks"].items():
        lines += scenario_table(folder, entry)
    if report.get("section6"):
        lines += ["## The paper's Section 6: does a scratchpad make the PE irrelevant?", ""]
        lines += [section6_view.markdown(report["section6"])]
    lines += [
        "## Mean reciprocal rank by OOD exact match (higher is better)",
        "",
        "One query per scenario and seed; [low, high]: 95% bootstrap interval over seeds (none with one seed).",
        "Ties broken as the authors' notebook breaks them (Rotary, ALiBi, T5, APE, NoPE last), then split evenly.",
    ]
    ours = report.get("mrr_intervals", {}).get("ours", {})
    if SCRATCHPAD_GROUP in ours:
        apart = f"Overall leaves out the runs {SCRATCHPAD_GROUP}, ranked on their own"
        if "overall" not in without_repeats(ours):  # overall would be the one other category again
            apart = f"The runs {SCRATCHPAD_GROUP} are ranked on their own, apart from the others"
        lines.append(f"{apart}: Section 4 ranks tasks without one.")
    lines.append("")
    for key, rule in (("mrr_intervals", ""), ("mrr_ties_shared", ", ties split")):
        for who in ("ours", "paper"):
            lines += rank_lines(report.get(key, {}).get(who, {}), who + rule)
    if report.get("paper_ordering"):
        lines += ["", "## The paper's ordering (Figure mrr-per-category), ours", ""]
        lines += [f"- {line}" for line in report["paper_ordering"]]
    lines += ["", "## Where we differ from the paper", ""] + [
        f"- {note}" for note in report["notes"] or ["nothing flagged"]
    ]
    return "\n".join(lines) + "\n"


def scenario_table(folder: str, entry: dict[str, Any]) -> list[str]:
    """A scenario's section: each PE's IID and OOD, the paper's beside them where it released a run of the
    scenario (no empty columns where it did not), NoPE' apart, the selection where runs were selected, and the
    constant guess's score where it is a floor worth naming."""
    from probe.models.registry import PE_LABELS

    paper = entry["paper"]
    rows = [*entry["ours"].values(), *([entry["baseline"]] if entry.get("baseline") else [])]
    selected = any(row.get("selected_steps") for row in rows)  # a column for the selection, if any
    header = ["PE", "seeds", "IID (ours)", "OOD (ours)", *(["IID (paper)", "OOD (paper)"] if paper else [])]
    with_last = any(row.get("last_iid") is not None for row in rows)
    header += ["selected on IID validation" + (" (last step IID / OOD)" if with_last else "")] if selected else []
    lines = [f"## {folder} ({entry['category']})", "", _row(header), "|---" * len(header) + "|"]
    for pe, ours in entry["ours"].items():
        theirs = (paper or {}).get(pe, {})
        cells = [PE_LABELS.get(pe, pe), ",".join(map(str, ours["seeds"])), _pct(ours["iid"])]
        cells += [_pct(ours["ood"]) + seed_range(ours, _pct)]
        cells += [_pct(theirs.get("iid")), _pct(theirs.get("ood"))] if paper else []
        lines.append(_row(cells) + (_selection(ours) if selected else ""))
    if base := entry.get("baseline"):
        cells = ["NoPE' (the baseline seed)", ",".join(map(str, base["seeds"])), _pct(base["iid"]), _pct(base["ood"])]
        cells += ["", ""] if paper else []
        lines.append(_row(cells) + (_selection(base) if selected else ""))
    if (guess := entry.get("guess")) is not None and guess >= GUESS_SHOWN:
        lines += ["", f"A constant guess (the commonest training answer) scores {_pct(guess)} on these unseen"]
        lines += ["lengths: an OOD at or under it is no better than chance."]
    return [*lines, ""]


def _row(cells: list[str]) -> str:
    """A Markdown table row; an empty cell is ``| |``."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def rank_lines(intervals: dict[str, Any], who: str) -> list[str]:
    """One Markdown item per category of :func:`~probe.studies.ranks.rank_intervals` (``overall`` where it pools
    more than one): each PE's mean reciprocal rank, best first, with its interval over seeds where it has width."""
    ranks = without_repeats(intervals)
    return [f"- {who}, {name} ({rests_on(entry)}): {ranked_text(entry)}" for name, entry in ranks.items()]


def _accuracy_curves(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One scenario's curves for :func:`~probe.figures.accuracy_by_length`: ours with each bucket's count, NoPE'
    and the paper's released runs dashed."""
    from probe.models.registry import PE_LABELS

    curves = [
        {
            "label": f"{PE_LABELS.get(pe, pe)} (ours)",
            "pe": pe,
            "lengths": t["lengths"],
            "accuracy": t["accuracy"],
            "counts": t.get("counts"),
        }
        for pe, t in entry["ours"].items()
    ]
    if entry.get("baseline"):
        base = entry["baseline"]
        curves.append(
            {
                "label": f"NoPE' (ours, seed {','.join(map(str, base['seeds']))})",
                "pe": "nope",
                "lengths": base["lengths"],
                "accuracy": base["accuracy"],
                "counts": base.get("counts"),
                "dashed": True,
            }
        )
    for pe, theirs in (entry["paper"] or {}).items():
        lengths = list(theirs["ood_by_length"])
        curves.append(
            {
                "label": f"{PE_LABELS.get(pe, pe)} (paper)",
                "pe": pe,
                "dashed": True,
                "lengths": lengths,
                "accuracy": [theirs["ood_by_length"][n] for n in lengths],
            }
        )
    return curves


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """{name: plotly figure} of the report, the paper's series dashed beside ours; Section 6's where the study is
    its."""

    from probe.figures import accuracy_by_length, attended_distance_figure, layer_distance_figure

    out: dict[str, Any] = {}
    for folder, entry in report["tasks"].items():
        curves = _accuracy_curves(entry)
        seen = [n for t in entry["ours"].values() for n, s in zip(t["lengths"], t["seen"]) if s]
        out[f"accuracy_{folder}"] = accuracy_by_length(
            curves,
            (min(seen), max(seen)) if seen else None,
            f"{folder}: exact match by length; ours solid, the paper's released runs dotted (unseen lengths)",
        )
        for metric, data in entry.get("compare", {}).items():
            label = "D^(l), JSD" if metric == "jsd" else "D^(l), released code's metric"
            out[f"distance_{folder}_{metric}"] = layer_distance_figure(
                data["curves"], f"{folder}: D(NoPE, ·) per layer", label
            )
        if entry.get("distances"):
            out[f"attended_{folder}"] = attended_distance_figure(
                entry["distances"]["series"], f"{folder}: normalized attended distance (unseen lengths)"
            )
    for who in ("ours", "paper"):
        if intervals := report.get("mrr_intervals", {}).get(who):  # a report written before them has none
            out[f"mrr_{who}"] = interval_rank_figure(
                intervals, f"Mean reciprocal rank by OOD exact match, {who} (higher is better)"
            )
    if report.get("section6"):
        out |= section6_view.figures(report["section6"])
    return out


def interval_rank_figure(intervals: dict[str, Any], title: str) -> go.Figure:
    """The ranks of :func:`~probe.studies.ranks.rank_intervals` as bars per category (``overall`` where it pools
    more than one), each with its interval over seeds where there are two seeds or more, and what they rest on
    under ``title``: the figure of the ranking the report's lines print."""
    from probe.figures import rank_figure

    ranks = without_repeats(intervals)
    means = {name: {pe: r["mrr"] for pe, r in entry["pes"].items()} for name, entry in ranks.items()}
    spans = {name: {pe: (r["low"], r["high"]) for pe, r in entry["pes"].items()} for name, entry in ranks.items()}
    seeds = sorted({seed for entry in ranks.values() for seed in entry["seeds"]})
    scenarios = max(entry["scenarios"] for entry in ranks.values())
    bars = "bars: 95% bootstrap interval over seeds" if len(seeds) > 1 else "one seed: no interval"
    rests = f"{scenarios} scenario{'s' * (scenarios != 1)}, seed(s) {', '.join(map(str, seeds))}; {bars}"
    return rank_figure(
        means,
        f"{title}<br><sup>{rests}</sup>",
        "mean reciprocal rank (1 = always first)",
        y_range=(0, 1.05),
        intervals=spans if len(seeds) > 1 else None,  # a bootstrap over one seed is a point, not an interval
    )


def write_report(report: dict[str, Any], out: str | Path) -> list[Path]:
    """``report.json``, ``summary.md`` and one self-contained ``report.html`` (plotly inlined once)."""
    from probe.atomic import atomic_write_json, atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "report.json", report)
    summary = markdown(report)
    atomic_write_text(out / "summary.md", summary)
    parts, first = [], True
    for name, figure in figures(report).items():
        parts.append(figure.to_html(full_html=False, include_plotlyjs=first, div_id=name))
        first = False
    notes = "".join(f"<li>{n}</li>" for n in report["notes"]) or "<li>nothing flagged</li>"
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>probe reproduce</title></head><body>"
        f"<h1>probe reproduce ({report['scale']} study)</h1><h2>Where we differ from the paper</h2><ul>{notes}</ul>"
        + "".join(parts)
        + "</body></html>"
    )
    atomic_write_text(out / "report.html", html)
    return [out / "report.json", out / "summary.md", out / "report.html"]


def find_reports(root: str | Path) -> list[Path]:
    """Folders under ``root`` (two levels down at most) that hold a ``probe reproduce`` report."""
    root = Path(root)
    candidates = [root / REPORT, *root.glob(f"*/{REPORT}"), *root.glob(f"*/*/{REPORT}")]
    return [folder for folder in candidates if (folder / "report.json").is_file()]


def read_report(folder: str | Path) -> dict[str, Any] | None:
    """A report folder's report.json, or None when missing or unreadable."""
    try:
        data = json.loads((Path(folder) / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "tasks" in data else None
