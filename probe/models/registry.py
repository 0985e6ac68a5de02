"""The positional encodings: every list of PE names, labels, colours and orders derives from here.

A PE is one class (``probe/models/<pe>.py``) that owns its maths: its ``kind``, whether it is
``relative``, its typed ``options`` and what it adds to the model. Registering it is one line in
``REGISTRY``, which says what is not maths: how it is drawn (label, colour, its rank in the paper's
figures) and which studies hold it (the paper's five, the three it pretrains, the benchmark's target).
A run of a PE with options lives in the folder ``<pe>+<option>=<value>...`` (``pe_folder_name``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from probe.errors import ProbeError
from probe.models.alibi import ALiBi
from probe.models.ape import SinusoidalAPE
from probe.models.cope import CoPE
from probe.models.fire import FIRE
from probe.models.kerple import KERPLE
from probe.models.learned import LearnedAPE
from probe.models.nope import NoPE
from probe.models.positional import ModelShape, PositionalEncoding, format_option
from probe.models.rotary import Rotary
from probe.models.t5 import T5RelativeBias
from probe.models.txl import TransformerXL
from probe.models.xpos import XPos


@dataclass(frozen=True)
class Registered:
    """A PE as figures and studies know it, beside its class."""

    cls: type[PositionalEncoding]
    label: str  # the name in tables and figures
    color: str  # its colour in every figure
    figure_rank: int  # the paper's figures order PEs from most to least NoPE-like
    in_paper: bool = False  # one of the paper's five: trained by default, in its figures
    # One of the three PEs the paper pretrains a 1.3B code model with (Appendix "Pretraining at 1.3B
    # Scale": NoPE, ALiBi, Rotary, Figure pretraining:ppl): `probe pretrain` trains these by default.
    pretrained_in_paper: bool = False
    overhead_target: bool = True  # a bias or rotation held to <= 1.10x NoPE's step (bench/pe_overhead.py)


REGISTRY: dict[str, Registered] = {
    entry.cls.kind: entry
    for entry in (
        Registered(NoPE, "NoPE", "#1f77b4", 0, in_paper=True, pretrained_in_paper=True),
        Registered(SinusoidalAPE, "APE", "#9467bd", 4, in_paper=True),
        Registered(T5RelativeBias, "T5's Relative Bias", "#2ca02c", 1, in_paper=True),
        Registered(ALiBi, "ALiBi", "#ff7f0e", 2, in_paper=True, pretrained_in_paper=True),
        Registered(Rotary, "Rotary", "#d62728", 3, in_paper=True, pretrained_in_paper=True),
        Registered(CoPE, "CoPE", "#393b79", 10),
        Registered(KERPLE, "KERPLE", "#8c564b", 6),
        # FIRE: an MLP over every (query, key) pair; bench/pe_overhead.py reports it as measured
        Registered(FIRE, "FIRE", "#e377c2", 7, overhead_target=False),
        Registered(XPos, "xPos", "#17becf", 8),
        Registered(LearnedAPE, "Learned APE", "#bcbd22", 9),
        Registered(TransformerXL, "Transformer-XL", "#5254a3", 11),
    )
}
PE_CLASSES: dict[str, type[PositionalEncoding]] = {kind: entry.cls for kind, entry in REGISTRY.items()}
PE_KINDS: tuple[str, ...] = tuple(REGISTRY)  # registry order: the CLI's order of runs
PAPER_PES: tuple[str, ...] = tuple(kind for kind, entry in REGISTRY.items() if entry.in_paper)  # trained by default
PE_LABELS: dict[str, str] = {kind: entry.label for kind, entry in REGISTRY.items()}
PE_COLORS: dict[str, str] = {kind: entry.color for kind, entry in REGISTRY.items()}
FIGURE_ORDER: tuple[str, ...] = tuple(sorted(REGISTRY, key=lambda kind: REGISTRY[kind].figure_rank))
RELATIVE: frozenset[str] = frozenset(kind for kind, cls in PE_CLASSES.items() if cls.relative)
PRETRAIN_PES: tuple[str, ...] = tuple(kind for kind, entry in REGISTRY.items() if entry.pretrained_in_paper)


def pe_class(pe: str, *, sets: Iterable[str] = ()) -> type[PositionalEncoding]:
    """The class of the PE named ``pe``: the one place a PE name is checked, so every command, config
    and grid says the same line, naming the known PEs (and the ``sets`` of them a grid also takes)."""
    if pe not in PE_CLASSES:
        named = ", ".join(sets)
        raise ProbeError(
            f"unknown positional encoding {pe!r}; choose one of {', '.join(PE_KINDS)}"
            + (f" (or a set: {named})" if named else "")
        )
    return PE_CLASSES[pe]


def parse_pe_options(pe: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` as the types ``pe``'s options declare (:meth:`PositionalEncoding.parse_options`): the
    one parse of options from the command line, a grid or a config file."""
    return pe_class(pe).parse_options(given)


def options_for(pe: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The ones of ``options`` that ``pe`` has: inference options (RoPE ``scaling``) given to several runs
    apply to the runs whose PE offers them and leave the others as they are."""
    return {name: value for name, value in (options or {}).items() if name in pe_class(pe).options}


def pe_folder_name(pe: str, options: dict[str, Any] | None = None) -> str:
    """``rotary`` or, with options given, ``rotary+base=500+fraction=0.25`` (sorted by name)."""
    return pe + "".join(f"+{name}={format_option(value)}" for name, value in sorted((options or {}).items()))


def split_pe_name(name: str) -> tuple[str, dict[str, Any]]:
    """``rotary+base=500`` -> (``rotary``, {``base``: 500.0}): a PE name as run folders write it."""
    pe, *pairs = name.split("+")
    given = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ProbeError(f"{name!r}: {pair!r} is not option=value")
        given[key] = value
    return pe, parse_pe_options(pe, given)


def make_positional_encoding(config: ModelShape) -> PositionalEncoding:
    """The PE module of a model of shape ``config`` (a :class:`ModelConfig`, which named a known PE)."""
    return pe_class(config.pe)(config)
