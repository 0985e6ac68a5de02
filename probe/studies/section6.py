"""The paper's Section 6 study's report, from its summaries: scratchpad formats ranked per task and per PE,
each PE's OOD per format, a scratchpad's gain per PE, the PEs ranked with a scratchpad, each PE's IID and its
OOD beside a constant guess, the attended distances of addition with the full scratchpad, the authors' numbers
beside ours, and one line per claim of the paper's Section 6 ("Does Scratchpad Render The Choice of Positional
Encoding Irrelevant?").

`probe reproduce --scale section6` writes a summary per scenario and seed as it lands (grids/section6.toml);
:func:`report_of` reads their merge (:func:`merged_runs`), every part planned and not found named as missing.
:mod:`probe.studies.section6_view` renders the report as Markdown and figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from probe.analysis.chance import guesses, no_better
from probe.models.registry import FIGURE_ORDER, PE_LABELS
from probe.studies.attended import attended_claim, attended_shapes, seed_series
from probe.studies.formats import (
    COMMON_FORMATS,
    NONE,
    as_trained,
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
from probe.studies.plans import PE_SETS
from probe.studies.ranks import ranked_over_seeds
from probe.studies.reproduce import ladder, plan, scenarios
from probe.studies.summaries import Merged, PartCost, merge, part_costs

STUDY = "section6"
RULE = ladder(STUDY)
LABELS = {pe: PE_LABELS.get(pe, pe) for pe in FIGURE_ORDER}
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


def common_scenarios() -> list[str]:
    """The planned scratchpad scenarios of the formats every task trains (:data:`COMMON_FORMATS`: C and the full
    one, sorting's and LEGO's I+C+O+R): two per task, so a ranking over them weighs every task the same, where
    addition's (C, full and its six further formats) would make 8 of the 20 scratchpad scenarios."""
    trained = {task: {as_trained(f, fs) for f in COMMON_FORMATS} for task, fs in planned_formats().items()}
    return [
        scenario
        for scenario, runs in planned().items()
        if runs[0].config.task_options.get("scratchpad")
        in trained[task_key_of(runs[0].config.task, runs[0].config.task_options)]
    ]


def short_of_two_seeds(merged: Merged) -> list[str]:
    """The planned scratchpad scenarios with fewer than two seeds measured."""
    landed = {(e.task_folder, e.seed) for e in merged.evaluations}
    return [scenario for scenario in scratchpad_scenarios() if sum(f == scenario for f, _ in landed) < 2]


def costs_of(summaries: Path) -> list[PartCost]:
    """What every landed part of the study cost where it ran, every rung trained included."""
    return part_costs(summaries.glob("*.json"), STUDY)


def study_report(summaries: str | Path, seeds: Sequence[int] = (0, 1, 2)) -> dict:
    """The report of the study's summaries in ``summaries`` at ``seeds``: :func:`report_of` their merge, with
    what each landed part cost, Figure attended_distance drawn at the first seed."""
    summaries = Path(summaries)
    return report_of(merged_runs(summaries, list(seeds)), costs_of(summaries), figure_seed=min(seeds))


def report_of(merged: Merged, parts: Sequence[PartCost] = (), figure_seed: int = 0) -> dict:
    """The merged study as the report's JSON; ``parts``: what its landed parts cost (:func:`costs_of`);
    ``figure_seed``: the seed whose addition runs draw Figure attended_distance (the paper reads one per PE)."""
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
    common = common_scenarios()
    with_pad = ranked_pes(evaluations, scenarios=common)
    pooled = ranked_pes(evaluations)
    short = short_of_two_seeds(merged)
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
                with_pad, sum(s in common for s in short), len(common), scope="C and the full format on every task"
            ),
            "attended": attended_claim(shapes, waiting.get(ATTENDED), RULE.median_iid),
            "best_differs": claim_best_differs(per_pe),
        },
        "helps_per_format": helps_per_format(every_format, formats),
        "pe_still_matters_pooled": claim_pe_needed(pooled, len(short), len(scratchpad_scenarios())),
        "pe_still_matters_where_fit": claim_where_fit(merged, guess),
        "unfitted": unfitted(evaluations, RULE.median_iid),
        "guessing": guessing(evaluations, guess),
        "iid": mean_table(evaluations, "iid_accuracy"),
        "ood": mean_table(evaluations, "ood_accuracy"),
        "chance": guess,
        "attended": {pe: shapes[pe] for pe in FIGURE_ORDER if pe in shapes},
        "attended_steps": merged.rungs.get(ATTENDED, {}).get("kept"),
        "attended_scenario": ATTENDED,
        "attended_seed": figure_seed,
        "attended_series": seed_series(merged.attended, ATTENDED, figure_seed, LABELS),
        "pes_with_a_scratchpad": with_pad,
        "pes_with_a_scratchpad_pooled": pooled,
        "addition_beside_the_authors": addition_beside_the_authors(evaluations),
        "missing": [f"{scenario} seed {seed}" for scenario, seed in missing],
        "unsettled": waiting,
        "decoded_to_the_gold": decoded_to_the_gold(evaluations),
        "cost": cost_table(parts),
        "bar": RULE.median_iid,
        "planned": list(planned()),
    }


def ranked_pes(evaluations: list, scenarios: Sequence[str] | None = None) -> dict | None:
    """The PEs ranked with a scratchpad (in ``scenarios``, where given) for the second claim, at the seeds every
    scenario shares (:func:`~probe.studies.ranks.ranked_over_seeds`), with ties split, since most scenarios tie
    PEs at 0% on unseen lengths."""
    return ranked_over_seeds(pe_queries(evaluations, scenarios=scenarios), ties="shared")


def claim_where_fit(merged: Merged, guess: dict[str, float | None]) -> dict:
    """The second claim read again on the scratchpad scenarios where every one of the paper's five PEs has fit its
    training lengths (:func:`~probe.studies.formats.fitted`, chosen on IID alone): there a PE's place on unseen
    lengths is its length generalization, not whether it learnt the task. Its scenarios, their ranking, its line,
    and how many of its PE means on unseen lengths are no better than ``guess`` (:func:`chance`)."""
    where = fitted(merged.evaluations, RULE.median_iid, PE_SETS["paper"])
    if not where:
        return {"scenarios": [], "ranking": None, "line": "no scratchpad scenario has every PE fit yet"}
    ranking = ranked_pes(merged.evaluations, scenarios=where)
    waiting = sum(scenario in where for scenario in short_of_two_seeds(merged))
    line = claim_pe_needed(ranking, waiting, len(where), scope="each of them")
    ood = seed_means(merged.evaluations, "ood_accuracy")
    means = [no_better(ood[scenario]["pes"][pe], guess[scenario]) for scenario in where for pe in PE_SETS["paper"]]
    return {"scenarios": where, "ranking": ranking, "line": line, "guessing": [sum(means), len(means)]}


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
