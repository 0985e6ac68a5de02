"""Which runs a study trains, said once: the named sets of PEs a grid may give (``pe = "paper"``) and
the paper's seed baseline NoPE' (NoPE at one more seed), which `probe train`, `probe sweep` and
`probe reproduce` all add. The PE sets derive from the registry (the paper's five, its three pretrained).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from probe.models.registry import FIGURE_ORDER, PAPER_PES, PRETRAIN_PES

PE_SETS: dict[str, tuple[str, ...]] = {
    "paper": tuple(pe for pe in FIGURE_ORDER if pe in PAPER_PES),  # the paper's five, in its figures' order
    "pretrain": PRETRAIN_PES,  # the paper's three pretrained code models
}
BASELINE_PE = "nope"  # NoPE' is NoPE at another seed (Figure similarity_per_layer)


def expand_pes(names: Sequence[str]) -> list[str]:
    """PE names with each set name (``paper``, ``pretrain``) replaced by its PEs, duplicates dropped."""
    return list(dict.fromkeys(pe for name in names for pe in PE_SETS.get(name, (name,))))


def seed_baseline_blocks(seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Grid blocks of a study with the paper's seed baseline: every PE at ``seeds``, then NoPE' (NoPE at
    the seed after the last), against which D(NoPE, ·) per layer is read."""
    seeds = list(dict.fromkeys(seeds))
    return [{"seed": seeds}, {"pe": [BASELINE_PE], "seed": [max(seeds) + 1]}]
