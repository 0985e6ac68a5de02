"""The unified scratchpad format (Section 5, Figure fig:unified_scratchpad_format).

Each step of a scratchpad has five components, each of which a format switches on or off:
step input ``I``, step computation ``C``, step output ``O``, intermediate variable updates ``V``
and remaining input ``R``; 2^5 = 32 formats. A target with a scratchpad reads
``<scratch> STEP ; STEP ; ... </scratch> The answer is ...``: every step ends with ``;`` so the
number of steps stays visible even in the ``empty`` format (all five components off).

Format names: ``full`` (all five), ``empty`` (none), or the components joined by ``+`` in the
order I, C, O, V, R (``I+C+O``); ``none`` means no scratchpad at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMPONENTS = ("I", "C", "O", "V", "R")
COMPONENT_NAMES = {
    "I": "step input",
    "C": "step computation",
    "O": "step output",
    "V": "intermediate variable updates",
    "R": "remaining input",
}
OPEN, CLOSE, END_OF_STEP = "<scratch>", "</scratch>", ";"
ACCEPTS = "none, full, empty, or components joined by '+' (e.g. I+C+O)"


@dataclass(frozen=True)
class Step:
    """One scratchpad step; each field is that component's full text (e.g. ``For digits 6 and 7,``)."""

    input: str
    computation: str
    output: str
    update: str
    remaining: str


def format_name(components: Iterable[str]) -> str:
    """Canonical name of the format that switches on ``components``."""
    on = set(components)
    if on == set(COMPONENTS):
        return "full"
    return "+".join(c for c in COMPONENTS if c in on) or "empty"


FORMATS: tuple[str, ...] = tuple(
    format_name(c for c, enabled in zip(COMPONENTS, bits) if enabled)
    for bits in itertools.product((True, False), repeat=len(COMPONENTS))
)


def parse_format(value: object) -> str | None:
    """A format's canonical name from what a user typed (case-insensitive); None for ``none``."""
    if value is None:
        return None
    text = str(value).strip().upper()
    if text == "NONE":
        return None
    if text in ("FULL", "EMPTY"):
        return text.lower()
    parts = text.split("+")
    if len(set(parts)) != len(parts) or not set(parts) <= set(COMPONENTS):
        raise ValueError(f"unknown scratchpad format {value!r}")
    return format_name(parts)


def components(fmt: str) -> frozenset[str]:
    """The components a canonical format name switches on."""
    if fmt == "full":
        return frozenset(COMPONENTS)
    return frozenset() if fmt == "empty" else frozenset(fmt.split("+"))


def render(steps: Sequence[Step], answer: str, fmt: str | None) -> str:
    """The target: ``answer`` alone without a scratchpad, else the scratchpad's steps then ``answer``."""
    if fmt is None:
        return answer
    on = [key in components(fmt) for key in COMPONENTS]
    parts = [OPEN]
    for step in steps:
        texts = (step.input, step.computation, step.output, step.update, step.remaining)
        parts.extend(text for enabled, text in zip(on, texts) if enabled)
        parts.append(END_OF_STEP)
    parts += [CLOSE, answer]
    return " ".join(parts)


def final_answer(target: str) -> str:
    """The part of a target after its scratchpad (the whole target when it has none): what the
    paper scores on scratchpad tasks ("evaluated on the correctness of its predicted result")."""
    return target.rpartition(CLOSE + " ")[2]


TEMPLATE = f"{OPEN} {CLOSE} {END_OF_STEP}"
"""The scratchpad's own words, for task vocabularies."""
