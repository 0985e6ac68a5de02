"""What `probe extrapolate` evaluates and how it sums an outcome up: its settings, the interventions each
model takes (fixed rules, and tuned ones searched on the validation slice), and percentile-bootstrap
intervals over examples or files. The scorers (:mod:`probe.extrapolation.tasks` for task runs,
:mod:`probe.extrapolation.language_models` for language models) share it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from probe.errors import ProbeError
from probe.extrapolation.tuning import (
    Score,
    Tuned,
    fit_head_temperatures,
    grid_search,
    temperature_grid,
    window_grid,
)
from probe.metrics import bootstrap_ci
from probe.models.interventions import TRAINED, Intervention
from probe.models.rotary import stretch_complaint
from probe.presets import EXTRAPOLATION_FIXED as FIXED
from probe.presets import EXTRAPOLATION_TUNED as TUNED
from probe.subjects.settings import ReadSettings
from probe.subjects.subject import Subject

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

FAMILIES = FIXED + TUNED
VALID_SHARE = 0.2
MULTIPLES = (0.5, 1.0, 1.5, 2.0, 2.5)
N_RESAMPLES = 1000


@dataclass(frozen=True)
class Settings(ReadSettings):
    """What `probe extrapolate` reads (a :class:`~probe.subjects.settings.ReadSettings`: the options naming an
    ``hf:`` model's corpus and context, the context ``multiples`` read, the seed, device and batch size, who hears
    each step) and what it tries on how much, a field per flag: the intervention families, the interventions
    given, the examples tuned and scored on."""

    multiples: Sequence[float] = MULTIPLES
    batch_size: int = 128
    families: Sequence[str] = FAMILIES
    given: Sequence[Intervention] = ()  # fixed interventions as the user spelled them
    n_valid: int = 50  # validation examples per unseen length at most (files: in all)
    n_iid: int = 200
    max_files: int | None = 40

    def __post_init__(self) -> None:
        """What extrapolation does not read is refused (it reads every model untouched, then under each
        intervention it tries), as are values it cannot read by (a multiple of 0 or less, no file), then the
        device and dtype as :class:`ReadSettings` takes them."""
        self.refuse("probe extrapolate", "n_per_bucket", "lengths", "dtype", "intervention", "pe_options")
        bad = [m for m in self.multiples if not (math.isfinite(m) and m > 0)]
        if bad:
            raise ProbeError(f"multiples must be above 0 (contexts in units of T), got {bad[0]:g}")
        if self.max_files is not None and self.max_files < 1:
            raise ProbeError(f"max_files must be at least 1 (None: every file), got {self.max_files}")
        super().__post_init__()


def fixed_rules(
    distance: bool, rotary: bool, settings: Settings
) -> tuple[list[tuple[str, Intervention]], dict[str, str]]:
    """(family, intervention as spelled, before any length is known: ``log-length``, ``cap``, ``scaling=yarn``)
    of the fixed rules a model takes, and why it takes none of the others: ``distance`` whether it has a relative
    distance to cap, ``rotary`` whether it takes a RoPE scaling (the subject's answers:
    :meth:`probe.subjects.subject.Subject.has_distance`, :meth:`~probe.subjects.subject.Subject.rotates`)."""
    chosen, skipped = [], {}
    if "log-length" in settings.families:
        chosen.append(("log-length", Intervention(log_length=TRAINED)))
    if "cap" in settings.families:
        if distance:
            chosen.append(("cap", Intervention(cap=TRAINED)))
        else:
            skipped["cap"] = "no relative distance to cap"
    if "rope" in settings.families:
        if rotary:
            chosen.append(("rope", Intervention(rope={"scaling": "yarn"})))
        else:
            skipped["rope"] = "no rotary positions"
    for given in settings.given:
        why = _not_applicable(given, distance, rotary)
        if why:
            skipped[given.name] = why
        else:
            chosen.append(("given", given))
    return chosen, skipped


def fixed_candidates(
    distance: bool, rotary: bool, trained: int, longest: int, settings: Settings
) -> tuple[list[tuple[str, Intervention]], dict[str, str]]:
    """:func:`fixed_rules` with their values: log-length and cap from L = ``trained``, the rope rule YaRN
    stretched by the longest sequence read over L (none where that is within L: it would stretch nothing)."""
    rules, skipped = fixed_rules(distance, rotary, settings)
    chosen = []
    for family, rule in rules:
        if family == "rope":
            factor = round(longest / trained, 2)
            if factor <= 1:
                skipped["rope"] = f"nothing to stretch: the longest sequence read ({longest} tokens) is within L"
                continue
            rule = Intervention(rope={"scaling": "yarn", "factor": factor})
        chosen.append((family, rule.resolved(trained)))
    return chosen, skipped


def _not_applicable(intervention: Intervention, distance: bool, rotary: bool) -> str | None:
    """Why a model cannot take ``intervention`` as given, or None (a RoPE scaling that stretches nothing: no
    model takes it)."""
    if intervention.rope and not rotary:
        return "no rotary positions to scale"
    if intervention.rope:
        stretch = stretch_complaint(intervention.rope["scaling"], intervention.rope.get("factor", 1.0))
        if stretch:
            return stretch
    if intervention.cap is not None and not distance:
        return "no relative distance to cap"
    return None


def tuned_candidates(
    model: TransformerLensModel,
    settings: Settings,
    trained: int,
    score: Callable[[Intervention], Score],
    losses: Callable[[int], Iterable[Tensor]],
    step: Callable[[str], None],
) -> tuple[list[Tuned], dict[str, str]]:
    """The tuned families' picks on validation, and why a family has none (``score`` or ``losses`` refused it, as
    a language model's do when no validation file reaches past T; or no candidate had a score)."""
    found, skipped = [], {}
    searches = {
        "temperature": lambda: grid_search("temperature", temperature_grid(), score),
        "window": lambda: grid_search("window", window_grid(trained), score),
        "head-temperature": lambda: _fitted(model, score, losses),
    }
    for family, search in searches.items():
        if family in settings.families:
            step(TUNED_STEPS[family])
            try:
                found.append(search())
            except ProbeError as error:
                skipped[family] = str(error)
    return found, skipped


def _fitted(
    model: TransformerLensModel, score: Callable[[Intervention], Score], losses: Callable[[int], Iterable[Tensor]]
) -> Tuned:
    """A temperature per head fitted on the validation loss, the snapshot validation scores best."""
    snapshots = fit_head_temperatures(model, losses)
    grid = [Intervention(head_temperatures=h, head_source=f"fitted@{step}") for step, h in snapshots]
    return grid_search("head-temperature", grid, score)


def interval(values: Tensor, seed: int) -> dict[str, float]:
    ci = bootstrap_ci(values, N_RESAMPLES, 0.95, seed)
    return {"mean": float(ci.mean), "low": float(ci.low), "high": float(ci.high), "n": int(values.numel())}


def buckets(values: Tensor, keys: Tensor, seed: int) -> list[dict[str, Any]]:
    """Per distinct key (a length, a context multiple): the mean of ``values`` there and its interval."""
    return [
        {"at": int(k) if float(k).is_integer() else float(k), **interval(values[keys == k], seed)}
        for k in keys.unique().tolist()
    ]


TUNED_STEPS = {  # family -> its step, as the progress line names it (tuning.tuned_candidates)
    "temperature": "tuning a temperature",
    "window": "tuning a window",
    "head-temperature": "fitting a temperature per head",
}


@dataclass(frozen=True)
class RunPlan:
    """What `probe extrapolate` does to one model, in order, before it starts: its steps (untouched, each
    fixed rule, each tuned family) and the families it takes none of, with why."""

    label: str
    steps: list[str]
    skipped: dict[str, str]


def run_plan(subject: Subject, settings: Settings) -> RunPlan:
    """``subject``'s steps under ``settings``, from its PE alone (nothing loaded), the fixed rules as spelled
    (their values come from L and the lengths read, known once it is). An hf: model's RoPE is known only once it
    is loaded: its plan counts the rope rule, which it may then skip."""
    fixed, skipped = fixed_rules(subject.has_distance(), subject.rotates(), settings)
    names = [intervention.name if family == "given" else family for family, intervention in fixed]
    tuned = [step for family, step in TUNED_STEPS.items() if family in settings.families]
    return RunPlan(subject.info.label, ["untouched", *names, *tuned], skipped)
