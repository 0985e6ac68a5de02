"""The Section 3 study's report, merged from its committed summaries (one per scenario and seed).

    python bench/section3_report.py                          # bench/results/section3/*.json, seeds 0 1 2
    python bench/section3_report.py --seeds 0 --figures docs/img

`probe reproduce --scale section3 --task all --summaries bench/results/section3` writes the summaries as
each scenario lands (``--seeds N``; seeds may be run in separate sittings and on other machines). This
script merges them (naming every scenario and seed it expected and did not find), and writes
``bench/results/section3_report.json`` and ``.md``: per scenario IID and OOD exact match per PE (means
over seeds, the paper's released runs beside where they exist), the recipe and where it stands on the
recipe rule (grids/section3.toml: the median PE's IID at seed 0), training wall time, what a constant guess
scores on each scenario's unseen lengths (the floor of its OOD); the mean reciprocal
rank per category and overall with bootstrap intervals over seeds, ours and the paper's released runs';
one line per category on whether the paper's ordering holds. The ranks rest on every scenario at the seeds
all of them hold, so a study half-way through a seed is ranked at the seeds before it. ``--figures DIR``
draws the headline (``section3_mrr_*``) and every scenario's accuracy against length (``section3_showcase``)
as PNGs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, add_study_arguments, fill_block  # noqa: E402

from probe.analysis.chance import no_better  # noqa: E402
from probe.atomic import atomic_write_json, atomic_write_text  # noqa: E402
from probe.models.registry import FIGURE_ORDER, PE_LABELS  # noqa: E402
from probe.studies.ranks import with_interval  # noqa: E402
from probe.studies.reproduce import ladder, merged_report, plan, scenarios  # noqa: E402
from probe.studies.reproduce_report import interval_rank_figure, markdown, seed_range  # noqa: E402
from probe.studies.summaries import Merged  # noqa: E402

STUDY = "section3"
RULE = ladder(STUDY)  # the recipe rule (grids/section3.toml's [ladder]): which rung each scenario reports
PLANNED = scenarios(plan(STUDY, "/nonexistent", seeds=1))  # each scenario with its seed-0 runs, in the plan's order


def study_report(summaries: str | Path, expected: list[str], seeds: list[int]) -> tuple[dict, Merged]:
    """The study merged from ``summaries`` (the ``expected`` scenarios at ``seeds``), with where each stands on
    the recipe rule and its training time."""
    report, merged = merged_report(summaries, expected, seeds, study=STUDY, rule=RULE)
    report["recipes"] = recipe_status(merged, report)
    report["train_seconds"] = wall_times(merged)
    return report, merged


def recipe_status(merged: Merged, report: dict) -> dict[str, dict]:
    """Per scenario: the rungs trained, the median PE's IID at seed 0 on each, the rung reported, and
    what the recipe rule says of it."""
    out = {}
    for folder in report["tasks"]:
        rungs = merged.rungs.get(folder, {})
        medians, chosen, kept = rungs.get("median_iid_seed0", {}), rungs.get("chosen"), rungs.get("kept")
        if not medians:
            verdict = "seed 0 not trained"
        elif chosen is None:
            higher = RULE.climbs([medians[kept]], kept)
            verdict = f"under {RULE.median_iid:.0%} IID at {kept} steps: rung of {higher} steps due"
        elif medians[chosen] >= RULE.median_iid:
            verdict = f"meets the rule at {chosen} steps"
        else:
            verdict = f"under {RULE.median_iid:.0%} IID at the last rung: reported at {chosen} steps"
        out[folder] = {
            "recipes": merged.recipes.get(folder, []),
            "median_iid_seed0": {str(k): v for k, v in medians.items()},
            "steps": kept,
            "rule": verdict,
        }
    return out


def wall_times(merged: Merged) -> dict[str, dict[str, float]]:
    """Training seconds per scenario and seed, summed over its runs (one core each)."""
    out: dict[str, dict[str, float]] = {}
    for (folder, _, seed), seconds in merged.train_seconds.items():
        out.setdefault(folder, {}).setdefault(str(seed), 0.0)
        out[folder][str(seed)] += seconds or 0.0
    return out


def panels(merged: Merged, report: dict) -> dict[str, dict]:
    """Per scenario, per PE: exact match per length, mean over seeds and the seeds' range, and the examples
    per length (the figure labels tiny buckets with theirs)."""
    out = {}
    for folder in report["tasks"]:
        runs = [e for e in merged.evaluations if e.task_folder == folder]
        seen = [b.length for e in runs for b in e.buckets if b.seen]
        curves = []
        for pe in [pe for pe in FIGURE_ORDER if any(e.pe == pe for e in runs)]:
            by_length: dict[int, list[float]] = {}
            counts: dict[int, list[int]] = {}
            for e in runs:
                if e.pe == pe:
                    for b in e.buckets:
                        by_length.setdefault(b.length, []).append(b.accuracy)
                        counts.setdefault(b.length, []).append(b.n)
            lengths = sorted(by_length)
            curves.append(
                {
                    "pe": pe,
                    "label": PE_LABELS.get(pe, pe),
                    "lengths": lengths,
                    "mean": [statistics.fmean(by_length[n]) for n in lengths],
                    "low": [min(by_length[n]) for n in lengths],
                    "high": [max(by_length[n]) for n in lengths],
                    "counts": [min(counts[n]) for n in lengths],  # examples per bucket, the fewest over seeds
                }
            )
        name = folder.replace("+split=paper", "").replace("+train_length=8", " (L=8)").replace("+variant=", " ")
        out[name] = {"train_range": (min(seen), max(seen)) if seen else None, "curves": curves}
    return out


def write_figures(report: dict, merged: Merged, folder: Path) -> list[Path]:
    from probe.figures import accuracy_panels, write_figure

    written = []
    for who in ("ours", "paper"):
        if report["mrr_intervals"][who]:
            whose = "ours, tiny" if who == "ours" else "the paper's released runs, base (SCAN, PCFG, copy, reverse)"
            figure = interval_rank_figure(
                report["mrr_intervals"][who], f"Mean reciprocal rank by OOD exact match, {whose}"
            )
            written += write_figure(figure, folder / f"section3_mrr_{who}")
    figure = accuracy_panels(panels(merged, report), "Exact match by length per scenario (tiny; seen lengths shaded)")
    written += write_figure(figure, folder / "section3_showcase")
    return written


DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproducing.md"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _at_guess(ood: float | None, guess: float | None) -> str:
    """An OOD mean, in italics where it is no better than a constant guess."""
    return f"*{_pct(ood)}*" if ood is not None and guess is not None and no_better(ood, guess) else _pct(ood)


def _scenario_table(report: dict, pes: list[str]) -> list[str]:
    """OOD per scenario and PE, the paper's released runs in parentheses, the recipe rule's verdict, the floor a
    constant guess sets."""
    labels = " | ".join(PE_LABELS.get(pe, pe) for pe in pes)
    head = f"| scenario | steps | seeds | median IID, seed 0 (per rung) | {labels} | guess |"
    lines = [
        "OOD exact match (%) on unseen lengths, mean over the seeds measured, [lowest, highest] seed where there are "
        "several; the paper's released runs (`base`, 3 seeds) in parentheses where they exist; beside them what a "
        "constant guess scores (the commonest training answer, scored on the unseen-length examples: parity's "
        "and LEGO's answers take two values, summation's and polynomial evaluation's ten), a mean no better, to the "
        "tenth of a point shown, in italics. Generated by `python bench/section3_report.py --docs`.",
        "",
        head,
        "|" + "---|" * (5 + len(pes)),
    ]
    for folder, entry in report["tasks"].items():
        status = report["recipes"][folder]
        steps = status["steps"]
        guess = entry["guess"]
        cells = []
        for pe in pes:
            ours, theirs = entry["ours"].get(pe), (entry["paper"] or {}).get(pe)
            cell = _at_guess(ours["ood"], guess) + seed_range(ours, _pct) if ours else "–"
            cells.append(cell + (f" ({_pct(theirs['ood'])})" if theirs else ""))
        cells.append(_pct(guess))
        medians = status["median_iid_seed0"]
        verdict = " → ".join(f"{_pct(m)} at {k}" for k, m in medians.items()) or "–"
        if "due" in status["rule"]:
            verdict += " (next rung due)"
        seeds_run = ",".join(map(str, sorted({k for ours in entry["ours"].values() for k in ours["seeds"]})))
        lines.append(f"| {folder} | {steps} | {seeds_run} | {verdict} | " + " | ".join(cells) + " |")
    return lines


LIKE_ROWS = (("first", ""), ("shared", ", ties split"))


def docs_tables(report: dict, missing: list[tuple[str, int]], seeds: list[int]) -> str:
    """The docs' tables, from the report alone: OOD per scenario and PE (the paper's released runs in
    parentheses), the recipe rule's verdict, the ranks per category, the ordering lines, what is missing."""
    pes = [pe for pe in FIGURE_ORDER if any(pe in t["ours"] for t in report["tasks"].values())]
    lines = _scenario_table(report, pes)
    lines += [
        "",
        "Mean reciprocal rank by OOD exact match (higher is better; 1 = always first). Ties are broken as the "
        "authors' notebook breaks them (pandas' `method=\"first\"` in its rows' order: Rotary, ALiBi, T5's bias, "
        "APE, NoPE last); the last rows split them evenly instead:",
        "",
    ]
    lines += ["| category | whose | scenarios | seeds | " + " | ".join(PE_LABELS.get(pe, pe) for pe in pes) + " |"]
    lines += ["|" + "---|" * (4 + len(pes))]
    views = [("ours", report["mrr_intervals"]["ours"]), ("paper", report["mrr_intervals"]["paper"])]
    shared = report["mrr_ties_shared"]  # the overall ranks again, ties split: what the tie rule moves
    views += [(f"{who}, ties split", {"overall": shared[who]["overall"]}) for who in shared if "overall" in shared[who]]
    like = report["mrr_on_papers_scenarios"]  # ours on the scenarios the paper's overall rests on
    views += [
        (f"ours, the paper's scenarios{rule}", {"overall": like[ties]}) for ties, rule in LIKE_ROWS if ties in like
    ]
    for who, intervals in views:
        for name, entry in intervals.items():
            cells = [with_interval(entry["pes"][pe]) if pe in entry["pes"] else "–" for pe in pes]
            seeds_used = ",".join(map(str, entry["seeds"]))
            lines.append(f"| {name} | {who} | {entry['scenarios']} | {seeds_used} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The paper's ordering (Figure mrr-per-category: NoPE and T5 ahead of ALiBi, Rotary and APE), ours:",
        "",
    ]
    lines += [f"- {line}" for line in report["paper_ordering"]]
    expected = len(report["tasks"]) + len({f for f, _ in missing} - set(report["tasks"]))
    parts = []
    for seed in sorted({k for _, k in missing}):
        absent = [f for f, k in missing if k == seed]
        parts.append(f"seed {seed}: " + ("every scenario" if len(absent) == expected else ", ".join(absent)))
    if parts:
        lines += ["", "Not yet measured: " + "; ".join(parts) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_study_arguments(parser, STUDY)
    parser.add_argument("--figures", help="folder for the headline and showcase figures (e.g. docs/img)")
    parser.add_argument("--docs", action="store_true", help="write the tables into docs/reproducing.md")
    args = parser.parse_args()
    report, merged = study_report(args.summaries, list(PLANNED), args.seeds)
    if not merged.evaluations:
        sys.exit(f"no summaries of the {STUDY} study under {args.summaries}")
    missing = report["missing"]
    atomic_write_json(RESULTS / f"{args.name}.json", report)
    text = markdown(report)
    rule = ["", "## The recipe rule (IID exact match only)", ""]
    rule += ["| scenario | reported at | median PE IID, seed 0 | rule |"]
    rule += ["|---|---|---|---|"]
    for folder, status in report["recipes"].items():
        medians = ", ".join(f"{100 * m:.1f}% at {k}" for k, m in status["median_iid_seed0"].items()) or "-"
        rule.append(f"| {folder} | {status['steps']} | {medians} | {status['rule']} |")
    hours = sum(s for seeds in report["train_seconds"].values() for s in seeds.values()) / 3600
    tail = rule + ["", f"Training: {hours:.2f} core-hours in all.", ""]
    tail += ["## Not yet measured", ""] + [f"- {m}" for m in missing or ["nothing"]]
    atomic_write_text(RESULTS / f"{args.name}.md", text + "\n".join(tail) + "\n")
    print(text + "\n".join(tail))
    if args.docs:
        fill_block(DOCS, "section3", docs_tables(report, merged.missing, args.seeds))
        print(f"wrote the tables into {DOCS}")
    if args.figures:  # the PNGs alone: the pages embed them, and plotly.js (4.6 MB) stays out of the tree
        with tempfile.TemporaryDirectory() as scratch:
            for path in write_figures(report, merged, Path(scratch)):
                if path.suffix == ".png":
                    shutil.copy(path, Path(args.figures) / path.name)
                    print(f"wrote {Path(args.figures) / path.name}")
    print(f"wrote {RESULTS / args.name}.json and .md")


if __name__ == "__main__":
    main()
