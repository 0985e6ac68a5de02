"""How a study ranks its PEs across scenarios (Figures teaser and mrr-per-category): the mean reciprocal
rank per category and overall, its bootstrap interval over seeds, and whether the paper's ordering holds.

A query is one scenario at one seed ({(scenario, seed): {pe: OOD exact match}}); ties are broken as in the
authors' notebook (:data:`probe.analysis.evaluation.TIE_ORDER`: Rotary first, NoPE last), or split.
"""

from __future__ import annotations

from typing import Any

import torch

from probe.analysis.evaluation import TIE_ORDER, reciprocal_rank_scores
from probe.reference import SCRATCHPAD_GROUP

Queries = dict[Any, dict[str, float]]  # (scenario, seed) -> {pe: OOD exact match}
PAPER_LEADERS = ("nope", "t5")
PAPER_TRAILERS = ("alibi", "rotary", "ape")
"""Figure mrr-per-category's caption: "No PE and T5's Relative Bias outperform other encoding methods in
these categories" (ALiBi, Rotary, sinusoidal APE), in each of the three groups of tasks and overall."""


def by_category(queries_by_category: dict[str, Queries]) -> dict[str, Queries]:
    """The categories' queries and, under ``overall``, those of every category but the runs with a scratchpad:
    Figures teaser and mrr-per-category rank the PEs over Section 4's tasks, none with a scratchpad, and a
    scratchpad format pooled with them would weigh as one more task (Section 6's question is asked apart)."""
    overall = {
        key: q
        for name, queries in queries_by_category.items()
        if name != SCRATCHPAD_GROUP
        for key, q in queries.items()
    }
    return {**queries_by_category, "overall": overall}


def mean_reciprocal_ranks(queries_by_category: dict[str, Queries]) -> dict[str, dict[str, float]]:
    """Per category and overall: each PE's mean reciprocal rank over the queries holding every PE."""
    out = {}
    for name, queries in by_category(queries_by_category).items():
        if mrr := reciprocal_rank_scores(queries):
            out[name] = mrr
    return out


def rank_intervals(
    queries_by_category: dict[str, Queries], n_resamples: int = 1000, ties: str = "first"
) -> dict[str, dict[str, Any]]:
    """Per category and overall (:func:`by_category`): :func:`ranked_over_seeds` of its queries, the categories
    with fewer than two PEs or no seed that all their scenarios share left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, queries in by_category(queries_by_category).items():
        if ranked := ranked_over_seeds(queries, n_resamples, ties):
            out[name] = ranked
    return out


def ranked_over_seeds(queries: Queries, n_resamples: int = 1000, ties: str = "first") -> dict[str, Any] | None:
    """Each PE's mean reciprocal rank over ``queries`` with its 95% bootstrap interval over seeds
    (:func:`probe.metrics.mean_reciprocal_rank_over_seeds`): every scenario that holds every PE at some seed,
    at the seeds where all of them do. A study half-way through a seed is ranked on all its scenarios at the
    seeds before it, not narrowed to the few the new seed has reached. The seeds and the number of scenarios it
    rests on, or None with fewer than two PEs or no such seed. One seed gives an interval of no width.
    ``ties``: ``"first"`` breaks them as the authors' notebook does (:data:`TIE_ORDER`); ``"shared"`` splits
    them, so a scenario where PEs tie (every one at 0% on unseen lengths) ranks none of them above another."""
    from probe.metrics import mean_reciprocal_rank_over_seeds

    pes = sorted({pe for q in queries.values() for pe in q}, key=_tie_position)
    complete = {key: q for key, q in queries.items() if set(q) == set(pes)}
    scenarios = sorted({s for s, _ in complete})
    seeds = sorted({seed for _, seed in complete if all((s, seed) in complete for s in scenarios)})
    if len(pes) < 2 or not seeds:
        return None
    scores = torch.tensor(
        [[[complete[(s, seed)][pe] for pe in pes] for s in scenarios] for seed in seeds], dtype=torch.float64
    )  # [seed, scenario, pe]
    ci = mean_reciprocal_rank_over_seeds(scores, n_resamples=n_resamples, ties=ties)
    ranked = sorted(zip(pes, ci.mean.tolist(), ci.low.tolist(), ci.high.tolist()), key=lambda row: -row[1])
    return {
        "seeds": seeds,
        "scenarios": len(scenarios),
        "pes": {pe: {"mrr": mean, "low": low, "high": high} for pe, mean, low, high in ranked},
    }


def ranked_text(entry: dict[str, Any]) -> str:
    """``ALiBi 0.77 [0.73, 0.80], NoPE 0.45 [0.39, 0.50], ...``: a :func:`ranked_over_seeds` entry's PEs, best
    first, each with its interval over seeds where it has width."""
    from probe.models.registry import PE_LABELS

    return ", ".join(f"{PE_LABELS.get(pe, pe)} {with_interval(r)}" for pe, r in entry["pes"].items())


def with_interval(rank: dict[str, float]) -> str:
    """``0.77 [0.73, 0.80]``: a mean reciprocal rank with its interval over seeds, ``0.77`` where it has no width."""
    spread = f" [{rank['low']:.2f}, {rank['high']:.2f}]" if rank["high"] > rank["low"] else ""
    return f"{rank['mrr']:.2f}{spread}"


def rests_on(entry: dict[str, Any]) -> str:
    """``20 scenarios, seeds 0,1``: what a :func:`ranked_over_seeds` entry ranks over."""
    n = entry["scenarios"]
    return f"{n} scenario{'s' * (n != 1)}, seeds {','.join(map(str, entry['seeds']))}"


def without_repeats(per_category: dict[str, Any], pooled: str = "overall") -> dict[str, Any]:
    """``per_category`` (each category's entry, and the ``pooled`` one of them all: ``overall``, a sweep's ``all
    tasks``) without a pooled entry that repeats a category: where the queries but a scratchpad's are one
    category's, the pooled ranking is that one under a second name."""
    whole = per_category.get(pooled)
    repeats = any(entry == whole for name, entry in per_category.items() if name not in (pooled, SCRATCHPAD_GROUP))
    return {name: entry for name, entry in per_category.items() if not (repeats and name == pooled)}


def paper_ordering(intervals: dict[str, dict[str, Any]]) -> list[str]:
    """One line per category but the runs with a scratchpad (``overall`` where it pools more than one):
    whether NoPE and T5 rank above ALiBi, Rotary and APE, pair by pair, and which pairs the seeds' intervals
    separate."""
    from probe.models.registry import PE_LABELS

    lines = []
    for name, entry in without_repeats(intervals).items():
        if name == SCRATCHPAD_GROUP:  # the caption's claim is of the paper's groups of tasks, not of scratchpads
            continue
        pes = entry["pes"]
        pairs = [(a, b) for a in PAPER_LEADERS for b in PAPER_TRAILERS if a in pes and b in pes]
        if not pairs:
            continue
        held = [(a, b) for a, b in pairs if pes[a]["mrr"] > pes[b]["mrr"]]
        apart = [(a, b) for a, b in held if pes[a]["low"] > pes[b]["high"]]
        failed = [f"{PE_LABELS.get(b, b)} ≥ {PE_LABELS.get(a, a)}" for a, b in pairs if (a, b) not in held]
        seeds, scenarios = len(entry["seeds"]), entry["scenarios"]
        verdict = "holds" if len(held) == len(pairs) else f"holds for {len(held)} of {len(pairs)} pairs"
        lines.append(
            f"{name} ({scenarios} scenario{'s' * (scenarios != 1)}, {seeds} seed{'s' * (seeds != 1)}): "
            f"NoPE and T5 above ALiBi, Rotary and APE {verdict}"
            + (f" (not: {', '.join(failed)})" if failed else "")
            + (f"; {len(apart)} of {len(pairs)} pairs apart beyond the seeds' intervals" if seeds > 1 else "")
            + "."
        )
    return lines


def _tie_position(pe: str) -> tuple[int, str]:
    return (TIE_ORDER.index(pe) if pe in TIE_ORDER else -1, pe)
