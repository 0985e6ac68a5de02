"""How a measure reads its inputs, one type for all of them (compare, distances, positions, perplexity,
extrapolation): which inputs (the task options or corpus, how many per bucket, which lengths, which context
multiples, the seed), on what (device, dtype, batch size), under what (PE options and an intervention at
inference), and who hears the progress. A measure's own knobs (its metric, its resamples, a baseline) stay its
own parameters, so one settings value can be handed from one measure to the next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch

from probe.device import resolve_dtype
from probe.errors import ProbeError
from probe.models.interventions import Intervention
from probe.subjects.run_info import Lengths, Progress

if TYPE_CHECKING:
    from probe.subjects.inputs import Inputs
    from probe.subjects.readings import Reading
    from probe.subjects.subject import Loaded


@dataclass(frozen=True)
class ReadSettings:
    """What every measure reads its inputs with; None where a measure has its own default (named on it)."""

    options: Mapping[str, Any] = field(default_factory=dict)  # task options, or the corpus (and T) hf: models read
    n_per_bucket: int = 10  # inputs per length bucket or context size
    lengths: Lengths | None = None  # which buckets: all, seen, unseen
    multiples: Sequence[float] | None = None  # code models' context sizes, in units of their training context
    seed: int = 0  # which inputs are drawn, and the bootstrap's resamples
    batch_size: int | None = None
    device: torch.device | str = "cpu"
    dtype: torch.dtype | str | None = None  # the models' weights and forward passes (None: as saved)
    intervention: Intervention | None = None  # every model read under it (probe.models.interventions)
    pe_options: Mapping[str, Any] | None = None  # applied at inference to the models whose PE has them
    progress: Progress | None = None  # hears (what, done, total)

    def __post_init__(self) -> None:
        """The device and dtype as torch reads them; a bad dtype is one line before any model loads."""
        object.__setattr__(self, "device", torch.device(self.device))
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype))

    def inputs(self, reading: Reading, first: Loaded, fit: Sequence[Loaded], lengths: Lengths) -> Inputs:
        """``first``'s inputs of ``lengths``, drawn as these settings say, kept to those every model of ``fit``
        reads."""
        return reading.inputs(
            first, fit, n_per_bucket=self.n_per_bucket, seed=self.seed, lengths=lengths, multiples=self.multiples
        )

    def refuse(self, measure: str, *names: str) -> None:
        """ProbeError where one of ``names``, settings ``measure`` does not read, is set: never ignored silently."""
        for f in fields(self):
            default = f.default_factory() if callable(f.default_factory) else f.default
            if f.name in names and getattr(self, f.name) != default:
                raise ProbeError(f"{measure} does not read {f.name} (got {getattr(self, f.name)!r}); leave it unset")
