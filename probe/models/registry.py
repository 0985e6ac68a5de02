"""The positional encodings: every list of PE names, labels, colours and orders derives from here.

A PE is one class (``probe/models/<pe>.py``) that declares its ``kind``, ``label``, ``color``,
``relative`` and ``figure_rank``; registering it is one line in ``PE_CLASSES``.
"""

from __future__ import annotations

from probe.errors import ProbeError
from probe.models.alibi import ALiBi
from probe.models.ape import SinusoidalAPE
from probe.models.config import ModelConfig
from probe.models.nope import NoPE
from probe.models.positional import PositionalEncoding
from probe.models.rotary import Rotary
from probe.models.t5 import T5RelativeBias

PE_CLASSES: dict[str, type[PositionalEncoding]] = {
    cls.kind: cls for cls in (NoPE, SinusoidalAPE, T5RelativeBias, ALiBi, Rotary)
}
PE_KINDS: tuple[str, ...] = tuple(PE_CLASSES)  # registry order: the CLI's default order of runs
PE_LABELS: dict[str, str] = {kind: cls.label for kind, cls in PE_CLASSES.items()}
PE_COLORS: dict[str, str] = {kind: cls.color for kind, cls in PE_CLASSES.items()}
FIGURE_ORDER: tuple[str, ...] = tuple(sorted(PE_CLASSES, key=lambda kind: PE_CLASSES[kind].figure_rank))
RELATIVE: frozenset[str] = frozenset(kind for kind, cls in PE_CLASSES.items() if cls.relative)


def check_kind(pe: str) -> None:
    """One line naming the known PEs when ``pe`` is not one of them."""
    if pe not in PE_CLASSES:
        raise ProbeError(f"unknown positional encoding {pe!r}; choose one of {', '.join(PE_KINDS)}")


def make_positional_encoding(config: ModelConfig) -> PositionalEncoding:
    check_kind(config.pe)
    return PE_CLASSES[config.pe](config)
