"""A study's attended distances read back from its summaries (Figure attended_distance), and the paper's
reading of them (Section 6.1, "Which part of the sequence is attended to?"): on addition with the full
scratchpad, "NoPE and T5's Relative PE ... exhibit a bimodal distribution, reflecting both short-range and
long-range attention. Conversely, ALiBi ... strongly favors short-range attention. Rotary ... produces a
distribution resembling APE, which is more uniformly distributed."

A run that asks (``attended = true`` in its grid) keeps, in its summary, the histograms of d̄ that
`probe distances` draws (arg-max key and attention-weighted) with Sarle's bimodality coefficient, so the
figure and this reading outlive its checkpoint.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from probe.analysis.results import attended_series
from probe.models.registry import PE_LABELS
from probe.studies.plans import PE_SETS

UNIFORM = 5 / 9  # Sarle's bimodality coefficient of a uniform distribution; above it reads as two modes
NEAR, FAR = 0.2, 0.8  # d̄ below NEAR is short-range (the current step), from FAR on long-range (the input)
Attended = Mapping[tuple[str, str, int], Mapping[str, Any]]  # (scenario, pe, seed) -> a summary's "attended"


def histogram_mass(histogram: Mapping[str, Any], low: float, high: float) -> float:
    """Share of a histogram's mass in its bins within [low, high]; both bounds must be bin edges, so the share
    is exact (the share of d̄ with low <= d̄ < high, all of the last bin where ``high`` is its upper edge)."""
    edges, mass = histogram["edges"], histogram["mass"]
    for bound in (low, high):
        if not any(abs(edge - bound) < 1e-9 for edge in edges):
            raise ValueError(f"{bound} is not an edge of the histogram's bins {edges}")
    inside = [m for a, b, m in zip(edges, edges[1:], mass) if a >= low - 1e-9 and b <= high + 1e-9]
    return sum(inside) / sum(mass)


def attended_shapes(attended: Attended, scenario: str) -> dict[str, dict[str, Any]]:
    """Per PE, over the seeds whose runs kept attended distances in ``scenario``: the arg-max d̄'s bimodality
    (mean, min, max), the attention-weighted one's mean, the arg-max mass near (d̄ < 0.2) and far (d̄ >= 0.8),
    and the mean d̄, each a mean over seeds."""
    by_pe: dict[str, list[Mapping[str, Any]]] = {}
    for (name, pe, _), entry in sorted(attended.items()):
        if name == scenario:
            by_pe.setdefault(pe, []).append(entry)
    out: dict[str, dict[str, Any]] = {}
    for pe, entries in by_pe.items():
        argmax = [e["weightings"]["argmax"] for e in entries]
        bimodality = [w["bimodality"] for w in argmax]
        out[pe] = {
            "seeds": [e["run"]["seed"] for e in entries],
            "bimodality": statistics.fmean(bimodality),
            "bimodality_min": min(bimodality),
            "bimodality_max": max(bimodality),
            "weighted_bimodality": statistics.fmean(e["weightings"]["attention"]["bimodality"] for e in entries),
            "near": statistics.fmean(histogram_mass(w["histogram"], 0.0, NEAR) for w in argmax),
            "far": statistics.fmean(histogram_mass(w["histogram"], FAR, 1.0) for w in argmax),
            "mean": statistics.fmean(w["mean"] for w in argmax),
        }
    return out


def attended_claim(
    shapes: Mapping[str, Mapping[str, Any]], rung: Mapping[str, Any] | None = None, bar: float | None = None
) -> str:
    """Section 6.1's reading, part by part: NoPE and T5 bimodal (arg-max bimodality above :data:`UNIFORM`),
    ALiBi the most short-range of the five (the largest mass near), Rotary and APE less bimodal than both.
    Marked provisional where it reads one seed, or a rung the recipe rule has not settled (``rung``: the steps
    read, ``steps``, and seed 0's median IID there, ``median_iid_seed0``): the paper reads one model per PE, but
    a reading at one seed, or before training has settled, may not be the study's last word. With ``bar``, the
    PEs whose shape carries an ``iid`` under it are named: the paper reads models that have learnt the task,
    and where to look is another question in one that has not."""
    if any(pe not in shapes for pe in PE_SETS["paper"]):
        return "cannot be told yet: it needs the five PEs' addition + full scratchpad runs"
    b = {pe: s["bimodality"] for pe, s in shapes.items()}
    parts = {
        "NoPE and T5 bimodal": min(b["nope"], b["t5"]) > UNIFORM,
        "ALiBi the most short-range": shapes["alibi"]["near"] == max(s["near"] for s in shapes.values()),
        "Rotary and APE less bimodal than NoPE and T5": max(b["rotary"], b["ape"]) < min(b["nope"], b["t5"]),
    }
    verdict = "holds" if all(parts.values()) else "holds in part" if any(parts.values()) else "does not hold"
    claim = f"{verdict}: " + "; ".join(f"{part}: {'yes' if ok else 'no'}" for part, ok in parts.items())
    seeds = sorted({seed for shape in shapes.values() for seed in shape["seeds"]})
    caveats = [f"from seed {seeds[0]} alone"] if len(seeds) == 1 else []
    if rung is not None:
        caveats.append(
            f"at {rung['steps']:,} steps, a rung the recipe rule has not settled, where seed 0's median IID is "
            f"{100 * rung['median_iid_seed0']:.0f}%"
        )
    claim += f" (provisional: {', '.join(caveats)})" if caveats else ""
    unfit = [PE_LABELS[pe] for pe in PE_SETS["paper"] if bar is not None and shapes[pe].get("iid", bar) < bar]
    if unfit:
        claim += f"; read on {_listed(unfit)} under {100 * bar:.0f}% IID, models that have not fit the task"
    return claim


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def seed_series(attended: Attended, scenario: str, seed: int, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Inputs of :func:`probe.figures.attended_distance_figure` for ``scenario`` at ``seed`` (the paper reads one
    model per PE), each PE named by ``labels`` and in their order."""
    entries = {pe: e for (name, pe, s), e in attended.items() if name == scenario and s == seed}
    return attended_series(
        [{**entries[pe], "run": {"label": label, "pe": pe}} for pe, label in labels.items() if pe in entries]
    )
