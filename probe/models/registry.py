"""PE names -> the module that implements each (DeepMind's chomsky-hierarchy style: chosen by name)."""

from __future__ import annotations

from probe.errors import ProbeError
from probe.models.alibi import ALiBi
from probe.models.ape import SinusoidalAPE
from probe.models.config import PE_KINDS, ModelConfig
from probe.models.nope import NoPE
from probe.models.positional import PositionalEncoding
from probe.models.rotary import Rotary
from probe.models.t5 import T5RelativeBias

PE_CLASSES: dict[str, type[PositionalEncoding]] = {
    cls.kind: cls for cls in (NoPE, SinusoidalAPE, T5RelativeBias, ALiBi, Rotary)
}
assert tuple(PE_CLASSES) == PE_KINDS


def make_positional_encoding(config: ModelConfig) -> PositionalEncoding:
    try:
        return PE_CLASSES[config.pe](config)
    except KeyError:
        raise ProbeError(f"unknown positional encoding {config.pe!r}; choose one of {', '.join(PE_KINDS)}") from None
