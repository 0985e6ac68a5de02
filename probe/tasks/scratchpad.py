"""The unified scratchpad format (Section 6, Figure fig:unified_scratchpad_format).

Each step of a scratchpad has five components, each of which a format switches on or off:
step input ``I``, step computation ``C``, step output ``O``, intermediate variable updates ``V``
and remaining input ``R``; 2^5 = 32 formats.

Two templates write a scratchpad. ``authors`` is what the authors' released code ran
(``configs/data/minimal_template.jsonnet`` over ``DataInstanceProcessorWithUnifiedScratchpad``):
``Thinking step by step: in 7, 8 comp 7 + 8 + carry = 15 + 0 = 15 out 5 [ carry: 1 ] re 5 + 6 # in ...
. Thus, The answer is ...``: each component after its marker, the variable updates in brackets, ``#``
between steps, and the task's own stripped computations. ``figure`` is the paper's Figure
fig:unified_scratchpad_format in words: ``<scratch> STEP ; STEP ; ... </scratch> The answer is ...``,
every step ending with ``;`` so the number of steps stays visible even in the ``empty`` format.

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
TEMPLATES = ("authors", "figure")
AUTHORS_OPEN, AUTHORS_CLOSE, AUTHORS_SEPARATOR = "Thinking step by step:", ". Thus,", "#"
"""The authors' scratchpad bos and eos (every task processor's default) and ``minimal_template``'s step
separator, as single-spaced words."""
AUTHORS_MARKERS = {"I": "in", "C": "comp", "O": "out", "R": "re"}
"""``minimal_template``'s component markers; V is written between ``[`` and ``]``."""
OPENING = "opening"
"""What :func:`first_wrong_component` names where a prediction departs before its first step."""


@dataclass(frozen=True)
class Step:
    """One scratchpad step; each field is that component's full text (e.g. ``For digits 6 and 7,``).
    ``update`` is None where the task has no variable to update (the authors' sorting and LEGO)."""

    input: str
    computation: str
    output: str
    update: str | None
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


def render(steps: Sequence[Step], answer: str, fmt: str | None, template: str = "figure") -> str:
    """The target: ``answer`` alone without a scratchpad, else the scratchpad's steps then ``answer``."""
    if fmt is None:
        return answer
    if template == "authors":
        return render_authors(steps, answer, fmt)
    on = [key in components(fmt) for key in COMPONENTS]
    parts = [OPEN]
    for step in steps:
        texts = (step.input, step.computation, step.output, step.update, step.remaining)
        parts.extend(text for enabled, text in zip(on, texts) if enabled)
        parts.append(END_OF_STEP)
    parts += [CLOSE, answer]
    return " ".join(parts)


def render_authors(steps: Sequence[Step], answer: str, fmt: str) -> str:
    """The authors' ``create_scratchpad_str`` + target: bos, the steps' switched-on components after
    their markers, ``#`` between steps, eos, the answer; single-spaced (their text has double spaces,
    which a word-level tokenizer drops as their T5 tokenizer does)."""
    on = components(fmt)
    written = []
    for step in steps:
        texts = dict(zip(COMPONENTS, (step.input, step.computation, step.output, step.update, step.remaining)))
        parts = [
            f"[ {text} ]" if key == "V" else f"{AUTHORS_MARKERS[key]} {text}"
            for key, text in texts.items()
            if key in on and text is not None
        ]
        written.append(" ".join(parts))
    body = f" {AUTHORS_SEPARATOR} ".join(written)
    return " ".join(f"{AUTHORS_OPEN} {body} {AUTHORS_CLOSE} {answer}".split())


def end_marker(template: str = "figure") -> str:
    """What ends a scratchpad in ``template``'s words: the authors' ``. Thus,``, probe's ``</scratch>``."""
    return AUTHORS_CLOSE if template == "authors" else CLOSE


def written_steps(text: str, template: str) -> list[str]:
    """The steps of the scratchpad ``text`` writes, each as single-spaced words: what lies between its opening
    and its first end marker (the whole ``text`` where it never ends), cut at ``template``'s step separator
    (the authors' ``#`` between steps, probe's ``;`` after each). A step with nothing in it counts."""
    _check_template(template)
    separator = AUTHORS_SEPARATOR if template == "authors" else END_OF_STEP
    words = text.split(end_marker(template))[0].split()
    if _opens(words, template):
        words = words[len(_opening(template)) :]
    steps, step = [], []
    for word in words:
        if word == separator:
            steps.append(" ".join(step))
            step = []
        else:
            step.append(word)
    return steps + [" ".join(step)] if step else steps


def _check_template(template: str) -> None:
    """ValueError for a template that is not one of :data:`TEMPLATES`: the two write steps apart, and a task's
    default depends on its scratchpad, so none is assumed."""
    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {', '.join(TEMPLATES)}, not {template!r}")


def _opening(template: str) -> list[str]:
    """The words a scratchpad opens with in ``template``'s words."""
    return (AUTHORS_OPEN if template == "authors" else OPEN).split()


def _opens(words: list[str], template: str) -> bool:
    """Whether ``words`` open as ``template``'s scratchpad does."""
    return words[: len(_opening(template))] == _opening(template)


def first_wrong_step(prediction: str, gold: str, template: str) -> int | None:
    """Where ``prediction``'s scratchpad first departs from ``gold``'s, word for word, as a 1-based step index:
    the first step written otherwise, the first one left out (its steps stop early) or the first one too many
    (they go on past the gold's last); 0 where it does not open as ``template``'s scratchpad does (the authors'
    ``Thinking step by step:``), before any step; None where it writes every step of the gold's and no other. On
    an unseen length, an index past the most steps a training length's gold has reads a model that ran its steps
    right as far as training took them."""
    _check_template(template)
    if not _opens(prediction.split(), template):
        return 0
    said, gold_steps = written_steps(prediction, template), written_steps(gold, template)
    for index, (step, wanted) in enumerate(zip(said, gold_steps), start=1):
        if step != wanted:
            return index
    return None if len(said) == len(gold_steps) else min(len(said), len(gold_steps)) + 1


def first_wrong_component(prediction: str, gold: str, fmt: str) -> str | None:
    """The component (``I``, ``C``, ``O``, ``V`` or ``R``) where ``prediction``'s scratchpad first departs from
    the gold's, in the authors' words (each of ``fmt``'s components after its marker, in ``COMPONENTS`` order):
    that of the gold's word where they part, or of the prediction's where the gold's step ends first (a step too
    many reads as its first component); ``OPENING`` where it does not open as a scratchpad does; None where no
    step departs. A step's R holds what is left of the input, on the first step all of it but one item, so on an
    unseen length R is past training from step 1."""
    index = first_wrong_step(prediction, gold, "authors")
    if not index:
        return None if index is None else OPENING
    said, wanted = ((written_steps(text, "authors")[index - 1 :] or [""])[0].split() for text in (prediction, gold))
    part = next((j for j, (a, b) in enumerate(zip(said, wanted)) if a != b), min(len(said), len(wanted)))
    words = wanted if part < len(wanted) else said
    return _component_at(words[: part + 1], fmt)


def _component_at(words: list[str], fmt: str) -> str | None:
    """The component the last of a step's ``words`` lies in: markers read in order, each only after the one
    before it (R's remaining list opens with ``[`` too, which is V's marker only before R); None before any."""
    markers = [("[" if key == "V" else AUTHORS_MARKERS[key], key) for key in COMPONENTS if key in components(fmt)]
    component, at = None, 0
    for word in words:
        match = next((i for i in range(at, len(markers)) if markers[i][0] == word), None)
        if match is not None:
            component, at = markers[match][1], match + 1
    return component


def final_answer(text: str, template: str = "figure") -> str:
    """What follows the FIRST scratchpad end marker up to a second one, or the whole ``text`` when it
    has none: the part a prediction is scored on (the authors' ``extract_answer_from_prediction``:
    ``prediction.split(scratchpad_eos)[1]``; the paper: "evaluated on the correctness of its predicted
    result"). A gold target's is its answer."""
    parts = text.split(end_marker(template))
    return (parts[1] if len(parts) > 1 else text).strip()


def template_words(template: str) -> str:
    """The words a template writes itself, for task vocabularies."""
    if template == "authors":
        return " ".join([AUTHORS_OPEN, AUTHORS_CLOSE, AUTHORS_SEPARATOR, *AUTHORS_MARKERS.values(), "[ ]"])
    return TEMPLATE


TEMPLATE = f"{OPEN} {CLOSE} {END_OF_STEP}"
"""The scratchpad's own words, for task vocabularies."""
