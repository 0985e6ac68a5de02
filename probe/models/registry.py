"""The positional encodings: every list of PE names, labels, colours and orders derives from here.

A PE is one class (``probe/models/<pe>.py``) that declares its ``kind``, ``label``, ``color``,
``relative``, ``figure_rank`` and typed ``options``; registering it is one line in ``PE_CLASSES``.
A run of a PE with options lives in the folder ``<pe>+<option>=<value>...`` (``pe_folder_name``).
"""

from __future__ import annotations

from collections.abc import Iterable
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

PE_CLASSES: dict[str, type[PositionalEncoding]] = {
    cls.kind: cls
    for cls in (NoPE, SinusoidalAPE, T5RelativeBias, ALiBi, Rotary, CoPE, KERPLE, FIRE, XPos, LearnedAPE, TransformerXL)
}
PE_KINDS: tuple[str, ...] = tuple(PE_CLASSES)  # registry order: the CLI's order of runs
PAPER_PES: tuple[str, ...] = tuple(kind for kind, cls in PE_CLASSES.items() if cls.in_paper)  # trained by default
PE_LABELS: dict[str, str] = {kind: cls.label for kind, cls in PE_CLASSES.items()}
PE_COLORS: dict[str, str] = {kind: cls.color for kind, cls in PE_CLASSES.items()}
FIGURE_ORDER: tuple[str, ...] = tuple(sorted(PE_CLASSES, key=lambda kind: PE_CLASSES[kind].figure_rank))
RELATIVE: frozenset[str] = frozenset(kind for kind, cls in PE_CLASSES.items() if cls.relative)
PRETRAIN_PES: tuple[str, ...] = tuple(kind for kind, cls in PE_CLASSES.items() if cls.pretrained_in_paper)


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
