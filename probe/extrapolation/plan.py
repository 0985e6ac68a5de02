"""What `probe extrapolate` evaluates and how it sums an outcome up: its settings, the interventions each
model takes (fixed rules, and tuned ones searched on the validation slice), and percentile-bootstrap
intervals over examples or files. The scorers (:mod:`probe.extrapolation.tasks` for task runs,
:mod:`probe.extrapolation.language_models` for language models) share it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from probe.extrapolation.tuning import (
    Score,
    Tuned,
    fit_head_temperatures,
    grid_search,
    temperature_grid,
    window_grid,
)
from probe.metrics import bootstrap_ci
from probe.models.interventions import Intervention
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
        intervention it tries), then the device and dtype as :class:`ReadSettings` takes them."""
        self.refuse("probe extrapolate", "n_per_bucket", "lengths", "dtype", "intervention", "pe_options")
        super().__post_init__()


def fixed_candidates(
    distance: bool, rotary: bool, trained: int, longest: int, settings: Settings
) -> tuple[list[tuple[str, Intervention]], dict[str, str]]:
    """(family, intervention) of the fixed rules a model takes, and why it takes none of the others: ``distance``
    whether it has a relative distance to cap, ``rotary`` whether it takes a RoPE scaling (the subject's
    answers: :meth:`probe.subjects.subject.Subject.has_distance`, :meth:`~probe.subjects.subject.Subject.rotates`)."""
    chosen, skipped = [], {}
    if "log-length" in settings.families:
        chosen.append(("log-length", Intervention(log_length=trained)))
    if "cap" in settings.families:
        if distance:
            chosen.append(("cap", Intervention(cap=trained - 1)))
        else:
            skipped["cap"] = "no relative distance to cap"
    if "rope" in settings.families:
        if rotary:
            factor = max(1.0, round(longest / trained, 2))
            rope = {"scaling": "yarn", "factor": factor, "original_length": trained}
            chosen.append(("rope", Intervention(rope=rope)))
        else:
            skipped["rope"] = "no rotary positions"
    for given in settings.given:
        why = _not_applicable(given, distance, rotary)
        if why:
            skipped[given.name] = why
        else:
            chosen.append(("given", given.resolved(trained)))
    return chosen, skipped


def _not_applicable(intervention: Intervention, distance: bool, rotary: bool) -> str | None:
    """Why a model cannot take ``intervention`` as given, or None."""
    if intervention.rope and not rotary:
        return "no rotary positions to scale"
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
) -> list[Tuned]:
    found = []
    if "temperature" in settings.families:
        step("tuning a temperature")
        found.append(grid_search("temperature", temperature_grid(), score))
    if "window" in settings.families:
        step("tuning a window")
        found.append(grid_search("window", window_grid(trained), score))
    if "head-temperature" in settings.families:
        step("fitting a temperature per head")
        snapshots = fit_head_temperatures(model, losses)
        grid = [Intervention(head_temperatures=h, head_source=f"fitted@{step}") for step, h in snapshots]
        found.append(grid_search("head-temperature", grid, score))
    return found


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
    """``subject``'s steps under ``settings``, from its PE alone (nothing loaded). An hf: model's RoPE is
    known only once it is loaded: its plan counts the rope rule, which it may then skip."""
    fixed, skipped = fixed_candidates(subject.has_distance(), subject.rotates(), 2, 4, settings)  # which, not values
    names = [intervention.name if family == "given" else family for family, intervention in fixed]
    tuned = [step for family, step in TUNED_STEPS.items() if family in settings.families]
    return RunPlan(subject.info.label, ["untouched", *names, *tuned], skipped)
