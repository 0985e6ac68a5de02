"""The Section 6 report (:mod:`probe.studies.section6`) as Markdown and figures: what `probe reproduce --scale
section6` prints and writes beside its report, the explorer shows, and docs/reproducing.md embeds."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from probe.analysis.chance import no_better
from probe.models.registry import FIGURE_ORDER, PE_LABELS
from probe.studies.attended import FAR, NEAR, UNIFORM
from probe.studies.formats import task_label
from probe.studies.plans import PE_SETS
from probe.studies.ranks import ranked_text, rests_on, with_interval

PES = list(PE_SETS["paper"])  # the paper's five, in its figures' order


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown(report: dict[str, Any]) -> str:
    """The report (:func:`probe.studies.section6.report_of`) as Markdown: the formats' ranks, the gains, the
    claims' lines, then the tables (addition beside the authors, IID, OOD beside a constant guess, the cost)."""
    lines = []
    if report["formats"]:
        lines += [
            "Mean reciprocal rank of each scratchpad format per task, over (PE, seed) queries (higher is better):"
        ]
        lines += [""]
    else:
        lines += ["No task has a scratchpad run measured yet: nothing to rank."]
    for task, entry in report["formats"].items():
        lines.append(f"- **{task_label(task)}** (seeds {','.join(map(str, entry['seeds']))}): {_ranked(entry)}")
    lines += _per_pe_lines(report["formats_per_pe"])
    for fmt, gains in ((f, g) for f, g in report["gain"].items() if g):
        lines += _gain_table(fmt, gains, PES)
    lines += ["", "The paper's claims, at this scale:", ""]
    lines += [f"- Scratchpad helps solely on addition: {report['claims']['only_addition']}."]
    lines += _per_format_line(report["helps_per_format"])
    ranking = report["pes_with_a_scratchpad"]
    ranked = (
        f" (C and the full format on every task, so each task weighs the same; {_ranking(ranking)})" if ranking else ""
    )
    lines += [f"- A PE that generalizes is still needed{ranked}: {report['claims']['pe_still_matters']}."]
    lines += _pooled_line(report["pes_with_a_scratchpad_pooled"], report["pe_still_matters_pooled"])
    lines += _unfitted_line(report["unfitted"], report["bar"])
    lines += _guessing_line(report["guessing"])
    lines += _where_fit_line(report["pe_still_matters_where_fit"], report["bar"])
    best = report["claims"]["best_differs"]
    lines += [f"- The best format differs by PE (the appendix's formats per model): {best}."]
    lines += [f"- Where the PEs look (Section 6.1, addition + full scratchpad): {report['claims']['attended']}."]
    attended = report["attended_scenario"]
    lines += _attended_table(report["attended"], attended, report["attended_steps"], attended in report["unsettled"])
    if report["unsettled"]:
        parts = ", ".join(
            f"{scenario} ({u['steps']:,} steps, {100 * u['median_iid_seed0']:.0f}%)"
            for scenario, u in report["unsettled"].items()
        )
        bar = f"{100 * report['bar']:.0f}%"
        lines += ["", "Provisional, read at a rung the recipe rule has not settled (seed 0's median PE's IID there,"]
        lines += [f"under {bar}; the next rung not trained yet): {parts}."]
    lines += _addition_table(report["addition_beside_the_authors"], PES)
    lines += _iid_table(report["iid"], PES, report["bar"])
    lines += _ood_table(report["ood"], report["chance"], PES)
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


def _gain_table(fmt: str, gains: dict[str, dict], pes: list[str]) -> list[str]:
    """Format ``fmt``'s OOD gain over no scratchpad per task: per PE and over PEs."""
    lines = ["", f"OOD gain of format {fmt} over no scratchpad, in points: per PE the mean over seeds (their"]
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
        lines.append(f"| {task_label(task)}, {g['format']} | {seeds} | " + " | ".join(cells) + f" | {over} |")
    return lines


def _ranked(entry: dict) -> str:
    """``full 0.45 [0.40, 0.50], C 0.26``: each format's mean reciprocal rank, its interval where it has width."""
    return ", ".join(f"{fmt} {with_interval(r)}" for fmt, r in entry["formats"].items())


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
        f"{fmt} on {', '.join(map(task_label, r['helps'])) or 'none'} (of {len(r['read'])})"
        for fmt, r in per_format.items()
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


def _unfitted_line(unfitted: dict[str, dict], bar: float) -> list[str]:
    """How often each PE, with a scratchpad, stays under the bar at its training lengths (the IID table below)."""
    if not unfitted:
        return []
    return [
        f"- Under {100 * bar:.0f}% IID with a scratchpad (the mean over seeds, each scenario at its rung): "
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


def _where_fit_line(claim: dict, bar: float) -> list[str]:
    """The second claim on the scenarios every PE fit, IID at ``bar`` or over, naming them."""
    at_bar = f"{100 * bar:.0f}%"
    names = f"; {len(claim['scenarios'])}: {', '.join(claim['scenarios'])}" if claim["scenarios"] else ""
    at, of = claim.get("guessing", (0, 0))
    guess = f"; on unseen lengths, {at} of its {of} PE means no better than a constant guess" if of else ""
    ranked = f"; {_ranking(claim['ranking'])}" if claim["ranking"] else ""
    return [
        f"- A PE that generalizes is still needed, read only on the scratchpad scenarios where all five PEs fit, "
        f"IID at {at_bar} or over (the mean over seeds{names}{guess}{ranked}): {claim['line']}."
    ]


def _pooled_line(ranking: dict | None, line: str) -> list[str]:
    """The second claim over every scratchpad scenario, addition's further formats among them, beside the
    balanced reading: a ranking that a task with more formats sways."""
    ranked = f" ({_ranking(ranking)})" if ranking else ""
    return [f"  - Over every scratchpad scenario, where addition's further formats weigh it most{ranked}: {line}."]


def _ranking(ranking: dict) -> str:
    """``ranked over 20 scenarios, seeds 0,1, ties split: ALiBi 0.77 [0.73, 0.80], ...``: what a claim's ranking of
    the PEs rests on, and its numbers."""
    return f"ranked over {rests_on(ranking)}, ties split: {ranked_text(ranking)}"


def _iid_table(iid: dict[str, dict], pes: list[str], bar: float) -> list[str]:
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


def _addition_table(rows: dict, pes: list[str]) -> list[str]:
    lines = ["", "Addition, ours beside the authors' runs (`base`), OOD exact match %, ours / theirs:", ""]
    lines += ["| format | " + " | ".join(PE_LABELS.get(pe, pe) for pe in pes) + " | theirs from |"]
    lines += ["|" + "---|" * (len(pes) + 2)]
    for fmt, row in rows.items():
        cells = [f"{_pct(row['ours'].get(pe))} / {_pct(row['theirs'].get(pe))}" for pe in pes]
        lines.append(f"| {fmt} | " + " | ".join(cells) + f" | {row['theirs_from'] or '–'} |")
    return lines


def _attended_table(shapes: dict, scenario: str, steps: int | None, unsettled: bool) -> list[str]:
    """Per PE, the arg-max d̄ of addition with the full scratchpad (mean over the seeds measured), and the runs'
    accuracy, read at ``steps`` (a rung the recipe rule has not settled where ``unsettled``)."""
    if not shapes:
        return []
    rung = "a rung the recipe rule has not settled" if unsettled else "the rung the recipe rule chose"
    caption = (
        f"Normalized attended distance d̄ of {scenario}'s output queries, its runs at {steps:,} steps ({rung}): "
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
    return "; ".join(f"seed {seed}: {_absent(by_seed[seed], report['planned'])}" for seed in sorted(by_seed, key=int))


def _absent(absent: list[str], planned: list[str]) -> str:
    landed = [scenario for scenario in planned if scenario not in absent]
    if not landed:
        return "every scenario"
    return "every scenario but " + ", ".join(landed) if len(landed) < len(absent) else ", ".join(absent)


def _gain(g: dict | None, spread: bool) -> str:
    """A PE's mean gain, with the seeds' range where there are two or more (one seed's range is no spread)."""
    if g is None:
        return "–"
    return f"{100 * g['mean']:+.1f}" + (f" ({100 * g['min']:+.1f}…{100 * g['max']:+.1f})" if spread else "")


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """{name: plotly figure}: the formats' ranks per task (once a task has two formats measured) and per PE, each
    PE's OOD exact match per format and task (the appendix's per-task figures), and Figure attended_distance at
    the report's ``attended_seed`` (the paper reads one model per PE; once its runs have kept their attended
    distances)."""
    from probe.figures import attended_distance_figure, format_accuracy_figure, format_rank_figure

    out = {}
    if report["formats"]:
        title = "Scratchpad formats ranked per task, over PEs and seeds (OOD exact match)"
        out["section6_formats"] = format_rank_figure(_labelled(report["formats"]), title)
    if report["formats_per_pe"]:
        per_pe = {PE_LABELS.get(pe, pe): entry for pe, entry in report["formats_per_pe"].items()}
        title = "Formats every task trains, ranked per PE, over tasks and seeds (OOD exact match)"
        out["section6_formats_per_pe"] = format_rank_figure(per_pe, title)
    if report["format_accuracy"]:
        title = "OOD exact match per format and PE, each task (mean over seeds, their range; dashed: a constant guess)"
        per_task, floors = _labelled(report["format_accuracy"]), _labelled(report["floors"])
        out["section6_format_accuracy"] = format_accuracy_figure(per_task, title, floors)
    if report["attended_series"]:
        seed = report["attended_seed"]
        title = f"Normalized attended distance, addition + full scratchpad (seed {seed}), all layers and heads"
        out["section6_attended"] = attended_distance_figure(report["attended_series"], title)
    return out


def _labelled(per_task: dict[str, Any]) -> dict[str, Any]:
    """``per_task`` keyed by :func:`~probe.studies.formats.task_label`, as its figure's panels and groups name it."""
    return {task_label(task): entry for task, entry in per_task.items()}
