"""The Section 6 study's report: scratchpad formats ranked per task, a scratchpad's gain per PE, the claims.

    python bench/section6_report.py                  # bench/results/section6/*.json, seeds 0 1 2
    python bench/section6_report.py --seeds 0 --docs --figures docs/img

`probe reproduce --scale section6 --task all --summaries bench/results/section6` writes a summary per
scenario and seed as it lands (grids/section6.toml: each task with its scratchpad formats and without one,
every example in the authors' wording). This script merges them under the study's recipe rule, naming every
part expected and not found, and writes ``bench/results/section6_report.{json,md}`` (``--name``: another
stem): per task each format's mean reciprocal rank over (PE, seed) with its interval over seeds (Figure
scratchpad_formats_per_ds); per PE the formats every task trains, ranked over (task, seed) (the appendix's
Figure scratchpad_formats_per_model), and each PE's OOD per format and task (its per-task figures); the full
format's and C's gain over no scratchpad per PE; the PEs ranked with a scratchpad (over every scratchpad
scenario, and again over those every PE fit); each PE's IID per scenario and how many scratchpad scenarios it
has not fit; its OOD beside what a constant guess scores and how many it does no better than that guess on;
the attended distances of addition with the full scratchpad (Figure attended_distance, from the histograms
its runs keep in their summaries); and one line per claim of the paper's Section 6.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, add_study_arguments, fill_block  # noqa: E402

from probe.analysis.chance import guesses, no_better  # noqa: E402
from probe.atomic import atomic_write_json, atomic_write_text  # noqa: E402
from probe.figures import (  # noqa: E402
    attended_distance_figure,
    format_accuracy_figure,
    format_rank_figure,
    write_figure,
)
from probe.models.registry import FIGURE_ORDER, PE_LABELS  # noqa: E402
from probe.studies.attended import FAR, NEAR, UNIFORM, attended_claim, attended_shapes, seed_series  # noqa: E402
from probe.studies.formats import (  # noqa: E402
    NONE,
    claim_best_differs,
    claim_only_addition,
    claim_pe_needed,
    fitted,
    format_accuracy,
    format_of,
    format_queries,
    format_ranks,
    format_ranks_per_pe,
    guessing,
    helps_per_format,
    pe_queries,
    scratchpad_gain,
    seed_means,
    task_key_of,
    unfitted,
)
from probe.studies.plans import PE_SETS  # noqa: E402
from probe.studies.ranks import rank_intervals  # noqa: E402
from probe.studies.reproduce import ladder, plan, scenarios  # noqa: E402
from probe.studies.summaries import Merged, PartCost, merge, part_costs  # noqa: E402

STUDY = "section6"
RULE = ladder(STUDY)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproducing.md"
NOTEBOOK = "plot_aggregate_final.ipynb"  # the authors' released notebook (McGill-NLP/length-generalization)
PAPER_ADDITION_NONE = {  # its no-scratchpad table (get_mrr_df's input): seeds 146317, 234054, 256788
    "nope": (0.0694, 0.0726, 0.1115),
    "t5": (0.0744, 0.0579, 0.0839),
    "alibi": (0.0786, 0.0738, 0.0800),
    "rotary": (0.0009, 0.0002, 0.0002),
    "ape": (0.0062, 0.0022, 0.0049),
}
"""OOD exact match of the authors' addition runs without a scratchpad (`base`, L = 8), per seed, as the released
notebook's stored output prints them (the same measure as their released Section 3 runs': its copy columns
equal ``probe.reference``'s)."""
PAPER_ADDITION_FORMATS = {  # its table of every format, seed 146317: the full format's column is cut from the output
    "C+O": {"nope": 0.1781, "t5": 0.1786, "alibi": 0.1061, "rotary": 0.0579, "ape": 0.0447},
    "C+O+V+R": {"nope": 0.1294, "t5": 0.1582, "alibi": 0.1028, "rotary": 0.0592, "ape": 0.0714},
    "I+O+V+R": {"nope": 0.1623, "t5": 0.1656, "alibi": 0.0952, "rotary": 0.0642, "ape": 0.0688},
    "I+C+V+R": {"nope": 0.1553, "t5": 0.1570, "alibi": 0.1254, "rotary": 0.0645, "ape": 0.0739},
    "I+C+O+R": {"nope": 0.1479, "t5": 0.1939, "alibi": 0.1058, "rotary": 0.0854, "ape": 0.0763},
    "I+C+O+V": {"nope": 0.1679, "t5": 0.1432, "alibi": 0.1257, "rotary": 0.0412, "ape": 0.0308},
}
"""OOD exact match of the authors' addition runs per scratchpad format at one seed. Their minimal format is
computation and output (C+O, "Minimal (Only Compute+Output)"), where their released scenario script and this
study's grid have computation only (C)."""
QUOTED_ADDITION_FULL = {"nope": 0.166, "t5": 0.162, "alibi": 0.117, "rotary": 0.066, "ape": 0.075}
"""Addition with the full scratchpad, OOD, as the issue that planned this study quoted the authors' notebooks:
in neither the paper's text nor the released notebooks' stored outputs, so shown marked as a quotation."""


ATTENDED = "addition+scratchpad=full"  # the scenario of Figure attended_distance (Section 6.1)


@cache
def planned() -> dict[str, list]:
    """The study's scenarios as planned, each with its seed-0 runs."""
    return scenarios(plan(STUDY, "/nonexistent", seeds=1))


def merged_runs(summaries: Path, seeds: list[int]) -> Merged:
    """The study's runs at each scenario's chosen rung, their attended distances, and the parts not found."""
    return merge(sorted(summaries.glob("*.json")), scenarios=list(planned()), seeds=seeds, study=STUDY, rule=RULE)


def planned_formats() -> dict[str, list[str]]:
    """Every task the study measures, as the formats' measures key them (sorting's two variants apart), with
    the scratchpad formats it trains."""
    out: dict[str, list[str]] = {}
    for runs in planned().values():
        options = runs[0].config.task_options
        formats = out.setdefault(task_key_of(runs[0].config.task, options), [])
        if options.get("scratchpad"):
            formats.append(options["scratchpad"])
    return dict(sorted(out.items()))


def chance(evaluations: list) -> dict[str, float | None]:
    """Per scenario measured, what a constant guess scores on the unseen-length examples its runs were scored on
    (:func:`~probe.analysis.chance.guesses`), in the plan's order."""
    floors = guesses(evaluations)
    return {scenario: floors[scenario] for scenario in planned() if scenario in floors}


def floors(guess: dict[str, float | None]) -> dict[str, float | None]:
    """Per task (as the formats' measures key it), what a constant guess scores on its unseen-length examples:
    its baseline's :func:`chance` (every format of a task is scored on the same examples, so the same guess)."""
    return {
        task_key_of(runs[0].config.task, runs[0].config.task_options): guess[scenario]
        for scenario, runs in planned().items()
        if scenario in guess and not runs[0].config.task_options.get("scratchpad")
    }


def scratchpad_scenarios() -> list[str]:
    """The planned scenarios with a scratchpad."""
    return [scenario for scenario, runs in planned().items() if runs[0].config.task_options.get("scratchpad")]


def short_of_two_seeds(merged: Merged) -> list[str]:
    """The planned scratchpad scenarios with fewer than two seeds measured."""
    landed = {(e.task_folder, e.seed) for e in merged.evaluations}
    return [scenario for scenario in scratchpad_scenarios() if sum(f == scenario for f, _ in landed) < 2]


def costs_of(summaries: Path) -> list[PartCost]:
    """What every landed part of the study cost where it ran, every rung trained included."""
    return part_costs(summaries.glob("*.json"), STUDY)


def report_of(merged: Merged, parts: Sequence[PartCost] = ()) -> dict:
    """The merged study as the report's JSON; ``parts``: what its landed parts cost (:func:`costs_of`)."""
    evaluations, missing = merged.evaluations, merged.missing
    shapes = attended_shapes(merged.attended, ATTENDED)
    for pe, shape in shapes.items():
        runs = [e for e in evaluations if e.task_folder == ATTENDED and e.pe == pe]
        shape["iid"] = statistics.fmean(e.iid_accuracy for e in runs)
        shape["ood"] = statistics.fmean(e.ood_accuracy for e in runs)
    queries = format_queries(evaluations)
    gains = {fmt: scratchpad_gain(queries, fmt) for fmt in ("full", "C")}
    formats = planned_formats()
    every_format = {fmt: scratchpad_gain(queries, fmt) for fmt in sorted({f for fs in formats.values() for f in fs})}
    with_pad = rank_intervals({"with a scratchpad": pe_queries(evaluations)}, ties="shared")  # most tie at 0%
    waiting = unsettled(merged)
    guess = chance(evaluations)
    per_pe = format_ranks_per_pe(queries)
    per_pe = {pe: per_pe[pe] for pe in FIGURE_ORDER if pe in per_pe}
    return {
        "formats": format_ranks(queries),
        "formats_per_pe": per_pe,
        "format_accuracy": format_accuracy(queries),
        "floors": floors(guess),
        "gain": gains,
        "claims": {
            "only_addition": claim_only_addition(every_format, formats),
            "pe_still_matters": claim_pe_needed(
                with_pad.get("overall"), len(short_of_two_seeds(merged)), len(scratchpad_scenarios())
            ),
            "attended": attended_claim(shapes, waiting.get(ATTENDED), RULE.median_iid),
            "best_differs": claim_best_differs(per_pe),
        },
        "helps_per_format": helps_per_format(every_format, formats),
        "pe_still_matters_where_fit": claim_where_fit(merged, guess),
        "unfitted": unfitted(evaluations, RULE.median_iid),
        "guessing": guessing(evaluations, guess),
        "iid": mean_table(evaluations, "iid_accuracy"),
        "ood": mean_table(evaluations, "ood_accuracy"),
        "chance": guess,
        "attended": {pe: shapes[pe] for pe in FIGURE_ORDER if pe in shapes},
        "attended_steps": merged.rungs.get(ATTENDED, {}).get("kept"),
        "pes_with_a_scratchpad": with_pad,
        "addition_beside_the_authors": addition_beside_the_authors(evaluations),
        "missing": [f"{scenario} seed {seed}" for scenario, seed in missing],
        "unsettled": waiting,
        "decoded_to_the_gold": decoded_to_the_gold(evaluations),
        "cost": cost_table(parts),
    }


def claim_where_fit(merged: Merged, guess: dict[str, float | None]) -> dict:
    """The second claim read again on the scratchpad scenarios where every one of the paper's five PEs has fit its
    training lengths (:func:`~probe.studies.formats.fitted`, chosen on IID alone): there a PE's place on unseen
    lengths is its length generalization, not whether it learnt the task. Its scenarios, their ranking, its line,
    and how many of its PE means on unseen lengths are no better than ``guess`` (:func:`chance`)."""
    where = fitted(merged.evaluations, RULE.median_iid, PE_SETS["paper"])
    if not where:
        return {"scenarios": [], "ranking": None, "line": "no scratchpad scenario has every PE fit yet"}
    ranking = rank_intervals({"where every PE fit": pe_queries(merged.evaluations, scenarios=where)}, ties="shared")
    waiting = sum(scenario in where for scenario in short_of_two_seeds(merged))
    line = claim_pe_needed(ranking.get("overall"), waiting, len(where), scope="each of them")
    ood = seed_means(merged.evaluations, "ood_accuracy")
    means = [no_better(ood[scenario]["pes"][pe], guess[scenario]) for scenario in where for pe in PE_SETS["paper"]]
    return {"scenarios": where, "ranking": ranking.get("overall"), "line": line, "guessing": [sum(means), len(means)]}


def mean_table(evaluations: list, measure: str) -> dict[str, dict]:
    """:func:`~probe.studies.formats.seed_means` of ``measure`` in every scenario measured, in the plan's order."""
    table = seed_means(evaluations, measure)
    return {scenario: table[scenario] for scenario in planned() if scenario in table}


def cost_table(parts: Sequence[PartCost]) -> dict[str, dict]:
    """Per scenario (the plan's order), what its landed parts cost: core-minutes of training (checkpoint
    selection included) and of evaluation, over every seed and rung landed, with how many runs' evaluations
    were timed (none before evaluations recorded their time)."""
    order = {scenario: i for i, scenario in enumerate(planned())}
    out: dict[str, dict] = {}
    for part in sorted(parts, key=lambda p: (order.get(p.scenario, len(order)), p.scenario, p.seed, p.steps)):
        row = out.setdefault(part.scenario, {"parts": [], "train": 0.0, "evaluation": 0.0, "timed": 0, "runs": 0})
        row["parts"].append([part.seed, part.steps])
        row["train"] += part.train_seconds / 60
        row["evaluation"] += part.evaluation_seconds / 60
        row["timed"] += part.timed
        row["runs"] += part.runs
    return out


def decoded_to_the_gold(evaluations: list) -> list[str]:
    """The scratchpad parts (``scenario seed k``) evaluated before a prediction's decoding ran on past its gold's
    length: their evaluations do not record how far they decoded."""
    return sorted(
        {
            f"{e.task_folder} seed {e.seed}"
            for e in evaluations
            if format_of(e) != NONE and "decode_positions" not in e.asked
        }
    )


def unsettled(merged: Merged) -> dict[str, dict]:
    """Scenarios read at a rung the recipe rule has not chosen (seed 0's median PE under the bar there, the
    next rung not trained yet): per scenario, the steps read and that median. Their numbers are provisional."""
    return {
        scenario: {"steps": r["kept"], "median_iid_seed0": r["median_iid_seed0"][r["kept"]]}
        for scenario, r in merged.rungs.items()
        if r["chosen"] is None
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown(report: dict) -> str:
    lines = []
    if report["formats"]:
        lines += [
            "Mean reciprocal rank of each scratchpad format per task, over (PE, seed) queries (higher is better):"
        ]
        lines += [""]
    else:
        lines += ["No task has a scratchpad run measured yet: nothing to rank."]
    for task, entry in report["formats"].items():
        lines.append(f"- **{task}** (seeds {','.join(map(str, entry['seeds']))}): {_ranked(entry)}")
    lines += _per_pe_lines(report["formats_per_pe"])
    pes = [pe for pe in FIGURE_ORDER if pe in PAPER_ADDITION_NONE]
    for fmt, gains in ((f, g) for f, g in report["gain"].items() if g):
        lines += ["", f"OOD gain of format {fmt} over no scratchpad, in points: per PE the mean over seeds (their"]
        lines += ["range), over PEs the mean with its 95% bootstrap interval over seeds (over two or three seeds, the"]
        lines += ["lowest and highest seed's), each spread shown from two seeds on; each scenario at its rung:"]
        lines += [""]
        lines += ["| task | seeds | " + " | ".join(PE_LABELS.get(pe, pe) for pe in pes) + " | over PEs |"]
        lines += ["|" + "---|" * (len(pes) + 3)]
        for task, g in gains.items():
            spread = len(g["seeds"]) > 1
            cells = [_gain(g["pes"].get(pe), spread) for pe in pes]
            over = f"{100 * g['mean']:+.1f}" + (f" [{100 * g['low']:+.1f}, {100 * g['high']:+.1f}]" if spread else "")
            seeds = ",".join(map(str, g["seeds"]))
            lines.append(f"| {task} ({g['format']}) | {seeds} | " + " | ".join(cells) + f" | {over} |")
    lines += ["", "The paper's claims, at this scale:", ""]
    lines += [f"- Scratchpad helps solely on addition: {report['claims']['only_addition']}."]
    lines += _per_format_line(report["helps_per_format"])
    lines += [f"- A PE that generalizes is still needed: {report['claims']['pe_still_matters']}."]
    lines += _unfitted_line(report["unfitted"])
    lines += _guessing_line(report["guessing"])
    lines += _where_fit_line(report["pe_still_matters_where_fit"])
    best = report["claims"]["best_differs"]
    lines += [f"- The best format differs by PE (the appendix's formats per model): {best}."]
    lines += [f"- Where the PEs look (Section 6.1, addition + full scratchpad): {report['claims']['attended']}."]
    lines += _attended_table(report["attended"], report["attended_steps"], ATTENDED in report["unsettled"])
    if report["unsettled"]:
        parts = ", ".join(
            f"{scenario} ({u['steps']:,} steps, {100 * u['median_iid_seed0']:.0f}%)"
            for scenario, u in report["unsettled"].items()
        )
        bar = f"{100 * RULE.median_iid:.0f}%"
        lines += ["", "Provisional, read at a rung the recipe rule has not settled (seed 0's median PE's IID there,"]
        lines += [f"under {bar}; the next rung not trained yet): {parts}."]
    lines += _addition_table(report["addition_beside_the_authors"], pes)
    lines += _iid_table(report["iid"], pes)
    lines += _ood_table(report["ood"], report["chance"], pes)
    if report["decoded_to_the_gold"]:
        lines += [
            "",
            "Scored before decoding ran on to the authors' 1,500 positions (a prediction unended at its gold's",
        ]
        lines += [f"length read as it stood; to be evaluated again): {', '.join(report['decoded_to_the_gold'])}."]
    if report["missing"]:
        lines += ["", "Not yet measured: " + _missing(report) + "."]
    lines += _cost_lines(report["cost"])
    return "\n".join(lines) + "\n"


def _ranked(entry: dict) -> str:
    """``full 0.45 [0.40, 0.50], C 0.26``: each format's mean reciprocal rank, its interval where it has width."""
    return ", ".join(
        f"{fmt} {r['mrr']:.2f}" + (f" [{r['low']:.2f}, {r['high']:.2f}]" if r["high"] > r["low"] else "")
        for fmt, r in entry["formats"].items()
    )


def _per_pe_lines(per_pe: dict[str, dict]) -> list[str]:
    """The formats every task trains, ranked per PE over (task, seed) queries (Figure scratchpad_formats_per_model)."""
    if not per_pe:
        return []
    lines = ["", "Mean reciprocal rank of the formats every task trains, per PE, over (task, seed) queries (the"]
    lines += ["appendix's Figure scratchpad_formats_per_model; full is I+C+O+R on sorting and LEGO):", ""]
    for pe, entry in per_pe.items():
        where = f"seeds {','.join(map(str, entry['seeds']))}; {len(entry['tasks'])} tasks"
        lines.append(f"- **{PE_LABELS.get(pe, pe)}** ({where}): {_ranked(entry)}")
    return lines


def _per_format_line(per_format: dict[str, dict]) -> list[str]:
    """The first claim read a format at a time, for the formats every task of which has two seeds."""
    if not per_format:
        return []
    read = "; ".join(
        f"{fmt} on {', '.join(r['helps']) or 'none'} (of {len(r['read'])})" for fmt, r in per_format.items()
    )
    return [
        "- Read a format at a time, where every task that trains it has two seeds (helping: every PE's gain above "
        f"0, the gain over PEs clear of 0): {read}."
    ]


def _pe_counts(short: dict[str, dict]) -> str:
    """Per PE in the figure's order, how many scenarios it falls short on, of those it was measured on."""
    return ", ".join(
        f"{PE_LABELS.get(pe, pe)} {len(short[pe]['under'])} of {short[pe]['of']}" for pe in FIGURE_ORDER if pe in short
    )


def _unfitted_line(unfitted: dict[str, dict]) -> list[str]:
    """How often each PE, with a scratchpad, stays under the bar at its training lengths (the IID table below)."""
    if not unfitted:
        return []
    return [
        f"- Under {100 * RULE.median_iid:.0f}% IID with a scratchpad (the mean over seeds, each scenario at its rung): "
        f"{_pe_counts(unfitted)} scenarios. Where a PE has not fit its training lengths, its place on unseen "
        "lengths above is not its length generalization alone."
    ]


def _guessing_line(guessing: dict[str, dict]) -> list[str]:
    """How often each PE, with a scratchpad, does no better on unseen lengths than a constant guess (the OOD table
    below)."""
    if not guessing:
        return []
    return [
        "- No better on unseen lengths than a constant guess (the commonest training answer, the OOD table "
        f"below), with a scratchpad: {_pe_counts(guessing)} scenarios. Where two PEs both stand there, they differ "
        "by chance, not by how they generalize."
    ]


def _where_fit_line(claim: dict) -> list[str]:
    """The second claim on the scenarios every PE fit, naming them."""
    bar = f"{100 * RULE.median_iid:.0f}%"
    names = f"; {len(claim['scenarios'])}: {', '.join(claim['scenarios'])}" if claim["scenarios"] else ""
    at, of = claim.get("guessing", (0, 0))
    guess = f"; on unseen lengths, {at} of its {of} PE means no better than a constant guess" if of else ""
    return [
        f"- A PE that generalizes is still needed, read only on the scratchpad scenarios where all five PEs fit, "
        f"IID at {bar} or over (the mean over seeds{names}{guess}): {claim['line']}."
    ]


def _iid_table(iid: dict[str, dict], pes: list[str]) -> list[str]:
    bar = RULE.median_iid
    lines = ["", f"IID exact match %, the mean over seeds, each scenario at its rung (under {100 * bar:.0f}% in"]
    lines += ["italics): how well each model fit the lengths it trained on.", ""]
    return lines + _mean_rows(iid, pes, lambda _, iid: iid < bar)


def _ood_table(ood: dict[str, dict], chance: dict[str, float | None], pes: list[str]) -> list[str]:
    lines = ["", "OOD exact match %, the mean over seeds, each scenario at its rung, beside what a constant guess"]
    lines += ["scores there (the commonest training answer, scored on the unseen-length examples; no better, to"]
    lines += ["the tenth of a point shown, in italics): parity's and LEGO's answers take two values, summation's and"]
    lines += ["polynomial evaluation's ten.", ""]
    return lines + _mean_rows(ood, pes, lambda scenario, ood: no_better(ood, chance[scenario]), guess=chance)


def _mean_rows(
    table: dict[str, dict],
    pes: list[str],
    flagged: Callable[[str, float], bool],
    guess: dict[str, float | None] | None = None,
) -> list[str]:
    """A table of means over seeds, a cell in italics where ``flagged`` (of its scenario and value), the floor a
    constant guess sets in a last column where ``guess`` is given."""
    lines = [
        "| scenario | seeds | " + " | ".join(PE_LABELS.get(pe, pe) for pe in pes) + (" | guess |" if guess else " |")
    ]
    lines += ["|" + "---|" * (len(pes) + 2 + bool(guess))]
    for scenario, row in table.items():
        cells = [
            "–"
            if (x := row["pes"].get(pe)) is None
            else f"*{100 * x:.1f}*"
            if flagged(scenario, x)
            else f"{100 * x:.1f}"
            for pe in pes
        ]
        cells += [_pct(guess[scenario])] if guess else []
        lines.append(f"| {scenario} | {','.join(map(str, row['seeds']))} | " + " | ".join(cells) + " |")
    return lines


def _cost_lines(cost: dict[str, dict]) -> list[str]:
    if not cost:
        return []
    lines = ["", "What the landed parts cost where they ran, in core-minutes (a run's wall time on its one core, so"]
    lines += ["other work on the machine at the time is in it; every rung trained counts; an evaluation is timed"]
    lines += ["since 2026-12-03, the runs timed in brackets):", ""]
    lines += ["| scenario | seed: steps | training | evaluation |", "|---|---|---|---|"]
    for scenario, row in cost.items():
        parts = ", ".join(f"{seed}: {steps:,}" for seed, steps in row["parts"])
        lines.append(f"| {scenario} | {parts} | {row['train']:.1f} | {_evaluation_cell(row)} |")
    train = sum(row["train"] for row in cost.values())
    total = {key: sum(row[key] for row in cost.values()) for key in ("evaluation", "timed", "runs")}
    lines.append(f"| all | | {train:.1f} ({train / 60:.1f} h) | {_evaluation_cell(total)} |")
    return lines


def _evaluation_cell(row: dict) -> str:
    return f"{row['evaluation']:.1f} ({row['timed']} of {row['runs']})" if row["timed"] else "–"


def addition_beside_the_authors(evaluations: list) -> dict[str, dict]:
    """Per addition format (none, ours, theirs): per PE our OOD exact match (mean over the seeds measured) and
    the authors' (no scratchpad: the mean of their three seeds; a format: their one seed in the notebook's
    stored output; the full format: the quotation), with where theirs comes from."""
    ours: dict[str, dict[str, list[float]]] = {}
    for e in evaluations:
        if task_key_of(e.task, e.task_options) == "addition" and e.ood_accuracy is not None:
            ours.setdefault(format_of(e), {}).setdefault(e.pe, []).append(e.ood_accuracy)
    theirs = {NONE: {pe: sum(v) / len(v) for pe, v in PAPER_ADDITION_NONE.items()}, "full": QUOTED_ADDITION_FULL}
    theirs |= PAPER_ADDITION_FORMATS
    source = {NONE: f"{NOTEBOOK}, 3 seeds", "full": "quoted, not found in the released outputs"}
    formats = [NONE, "full", *sorted(set(ours) - {NONE, "full"} | set(PAPER_ADDITION_FORMATS))]
    return {
        fmt: {
            "ours": {pe: sum(v) / len(v) for pe, v in ours.get(fmt, {}).items()},
            "theirs": theirs.get(fmt, {}),
            "theirs_from": source.get(fmt, f"{NOTEBOOK}, seed 146317" if fmt in theirs else ""),
        }
        for fmt in formats
    }


def _addition_table(rows: dict, pes: list[str]) -> list[str]:
    lines = ["", "Addition, ours beside the authors' runs (`base`), OOD exact match %, ours / theirs:", ""]
    lines += ["| format | " + " | ".join(PE_LABELS.get(pe, pe) for pe in pes) + " | theirs from |"]
    lines += ["|" + "---|" * (len(pes) + 2)]
    for fmt, row in rows.items():
        cells = [f"{_pct(row['ours'].get(pe))} / {_pct(row['theirs'].get(pe))}" for pe in pes]
        lines.append(f"| {fmt} | " + " | ".join(cells) + f" | {row['theirs_from'] or '–'} |")
    return lines


def _attended_table(shapes: dict, steps: int | None, unsettled: bool) -> list[str]:
    """Per PE, the arg-max d̄ of addition with the full scratchpad (mean over the seeds measured), and the runs'
    accuracy, read at ``steps`` (a rung the recipe rule has not settled where ``unsettled``)."""
    if not shapes:
        return []
    rung = "a rung the recipe rule has not settled" if unsettled else "the rung the recipe rule chose"
    caption = (
        f"Normalized attended distance d̄ of {ATTENDED}'s output queries, its runs at {steps:,} steps ({rung}): "
        f"unseen lengths, every layer and head; bimodality above 5/9 = {UNIFORM:.3f} reads as two modes; "
        f"near d̄ < {NEAR}, far d̄ ≥ {FAR}."
    )
    lines = ["", *textwrap.wrap(caption, 110), ""]
    lines += ["| PE | seeds | IID | OOD | bimodality (range) | weighted | near | far | mean d̄ |", "|" + "---|" * 9]
    for pe, s in shapes.items():
        spread = f" ({s['bimodality_min']:.3f}…{s['bimodality_max']:.3f})" if len(s["seeds"]) > 1 else ""
        lines.append(
            f"| {PE_LABELS.get(pe, pe)} | {','.join(map(str, s['seeds']))} | {_pct(s['iid'])}% | {_pct(s['ood'])}% | "
            f"{s['bimodality']:.3f}{spread} | "
            f"{s['weighted_bimodality']:.3f} | {_pct(s['near'])}% | {_pct(s['far'])}% | {s['mean']:.3f} |"
        )
    return lines


def _missing(report: dict) -> str:
    """``seed 1: every scenario but parity+scratchpad=C; seed 2: every scenario``: the parts not found, per seed,
    named by whichever is the shorter list, the absent or the landed."""
    by_seed: dict[str, list[str]] = {}
    for part in report["missing"]:
        scenario, seed = part.rsplit(" seed ", 1)
        by_seed.setdefault(seed, []).append(scenario)
    return "; ".join(f"seed {seed}: {_absent(by_seed[seed])}" for seed in sorted(by_seed, key=int))


def _absent(absent: list[str]) -> str:
    landed = [scenario for scenario in planned() if scenario not in absent]
    if not landed:
        return "every scenario"
    return "every scenario but " + ", ".join(landed) if len(landed) < len(absent) else ", ".join(absent)


def _gain(g: dict | None, spread: bool) -> str:
    """A PE's mean gain, with the seeds' range where there are two or more (one seed's range is no spread)."""
    if g is None:
        return "–"
    return f"{100 * g['mean']:+.1f}" + (f" ({100 * g['min']:+.1f}…{100 * g['max']:+.1f})" if spread else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_study_arguments(parser, STUDY)
    parser.add_argument("--docs", action="store_true", help="write the tables into docs/reproducing.md")
    parser.add_argument(
        "--figures",
        help="folder for the figures as PNG (e.g. docs/img): the formats' ranks per task and per PE, each PE's OOD "
        "per format and task, and Figure attended_distance once addition's full-format runs have kept theirs",
    )
    args = parser.parse_args()
    merged = merged_runs(Path(args.summaries), args.seeds)
    report = report_of(merged, costs_of(Path(args.summaries)))
    text = markdown(report)
    atomic_write_json(RESULTS / f"{args.name}.json", report)
    atomic_write_text(RESULTS / f"{args.name}.md", text)
    print(text)
    if args.docs:
        fill_block(DOCS, STUDY, text)
        print(f"wrote the tables into {DOCS}")
    if args.figures:
        for name, figure in figures(report, merged, min(args.seeds)).items():
            write_png(figure, Path(args.figures), name)


def figures(report: dict, merged: Merged, seed: int) -> dict:
    """The formats' ranks per task (once a task has two formats measured) and per PE, each PE's OOD exact match
    per format and task (the appendix's per-task figures), and Figure attended_distance at ``seed`` (the paper
    reads one model per PE; once its runs have kept their attended distances)."""
    out = {}
    if report["formats"]:
        title = "Scratchpad formats ranked per task, over PEs and seeds (OOD exact match)"
        out["section6_formats"] = format_rank_figure(report["formats"], title)
    if report["formats_per_pe"]:
        per_pe = {PE_LABELS.get(pe, pe): entry for pe, entry in report["formats_per_pe"].items()}
        title = "Formats every task trains, ranked per PE, over tasks and seeds (OOD exact match)"
        out["section6_formats_per_pe"] = format_rank_figure(per_pe, title)
    if report["format_accuracy"]:
        title = "OOD exact match per format and PE, each task (mean over seeds, their range; dashed: a constant guess)"
        out["section6_format_accuracy"] = format_accuracy_figure(report["format_accuracy"], title, report["floors"])
    labels = {pe: PE_LABELS.get(pe, pe) for pe in FIGURE_ORDER}
    if series := seed_series(merged.attended, ATTENDED, seed, labels):
        title = f"Normalized attended distance, addition + full scratchpad (seed {seed}), all layers and heads"
        out["section6_attended"] = attended_distance_figure(series, title)
    return out


def write_png(figure, folder: Path, name: str) -> None:
    """The figure's PNG alone into ``folder``: the page embeds it."""
    with tempfile.TemporaryDirectory() as scratch:
        for path in write_figure(figure, Path(scratch) / name):
            if path.suffix == ".png":
                shutil.copy(path, folder / path.name)
                print(f"wrote {folder / path.name}")


if __name__ == "__main__":
    main()
