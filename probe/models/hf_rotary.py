"""An ``hf:`` model's RoPE scaling, applied in place: each rotary module ``transformers`` built from the
model's config is built again from that config with the scaling's ``rope_parameters``, and what the new one
holds (its frequencies, attention scaling, dynamic-length state, config) moves into the module the model
already calls. The bridge's wrappers and hooks around it stay as they are; the state it held before is kept
to put back.

Building from the architecture's own class and config keeps the scaling ``transformers``' own (its
``ROPE_INIT_FUNCTIONS``): probe computes no frequency here, it only says which ``rope_parameters`` a probe
scaling spells (:func:`hf_rope_parameters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.models.rotary import rotation_complaint, stretch_complaint


@dataclass(frozen=True)
class RotaryState:
    """What one rotary module holds: its plain attributes and its own buffers."""

    module: torch.nn.Module
    attributes: dict[str, Any]
    buffers: dict[str, Tensor]

    @classmethod
    def of(cls, module: torch.nn.Module) -> RotaryState:
        attributes = {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "training"}
        return cls(module, attributes, dict(module.named_buffers(recurse=False)))

    def put_into(self, module: torch.nn.Module, like: RotaryState) -> None:
        """This state into ``module``, each buffer on the device and in the dtype of ``like``'s."""
        for name, value in self.attributes.items():
            setattr(module, name, value)
        for name, value in self.buffers.items():
            old = like.buffers.get(name)
            setattr(module, name, value if old is None else value.to(device=old.device, dtype=old.dtype))


def rotary_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The rotary modules of a ``transformers`` model: its own modules (not a bridge's wrappers of them, which
    pass ``inv_freq`` through) holding ``inv_freq`` built from a config."""
    return [
        m
        for m in model.modules()
        if type(m).__module__.startswith("transformers.")
        and "inv_freq" in dict(m.named_buffers(recurse=False))
        and hasattr(m, "config")
    ]


def scale_rotary(model: torch.nn.Module, rope: Mapping[str, Any]) -> list[RotaryState]:
    """Every rotary module of ``model`` (a ``transformers`` model) scaled by ``rope`` (as probe's Rotary
    spells it); returns the states to put back (:func:`restore_rotary`). ProbeError where it has none, or
    where its architecture's rotary module cannot be built from a config alone."""
    modules = rotary_modules(model)
    if not modules:
        raise ProbeError("rope: this hf: model has no rotary module to scale")
    before = [RotaryState.of(m) for m in modules]
    scaled = []
    for module, state in zip(modules, before):
        config, settings = module.config, module.config.to_dict()
        settings["rope_parameters"] = hf_rope_parameters(rope, settings)
        if rope["scaling"] == "dynamic" and rope.get("original_length"):
            # transformers' dynamic NTK grows the base past max_position_embeddings, its L; the model's own
            # config keeps its value (this config is the rebuilt rotary module's alone)
            settings["max_position_embeddings"] = int(rope["original_length"])
        try:
            fresh = type(module)(config=type(config).from_dict(settings))
        except (TypeError, ValueError, KeyError) as error:
            raise ProbeError(f"rope: {type(module).__name__} cannot be rebuilt under {dict(rope)} ({error})") from None
        scaled.append((module, RotaryState.of(fresh), state))
    for module, fresh, state in scaled:  # all built before any is changed: a failure leaves the model as it was
        fresh.put_into(module, like=state)
    return before


def restore_rotary(states: list[RotaryState]) -> None:
    """Each rotary module back to the state it held (:func:`scale_rotary`'s return)."""
    for state in states:
        state.put_into(state.module, like=state)


def hf_rope_parameters(rope: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """``transformers``' ``rope_parameters`` for a probe RoPE scaling of a model whose config is ``config``
    (its own ``rope_parameters`` or ``rope_theta``): linear, dynamic, yarn and llama3 by name; ntk (NTK-aware,
    bloc97 2023) as the base times s^(d/(d-2)), d the dimensions it rotates, what the scaling is. A model whose
    config scales RoPE already is refused (one line), as a scaling in its place would drop its own."""
    given = dict(config.get("rope_parameters") or {})
    if any(isinstance(value, Mapping) for value in given.values()):
        raise ProbeError(f"rope: this hf: model has a RoPE per layer type ({', '.join(given)}); not scaled")
    theta = float(given.get("rope_theta", config.get("rope_theta", 10_000.0)))
    scaling, factor = rope["scaling"], float(rope.get("factor", 1.0))
    if scaling == "none":
        return {**given, "rope_theta": theta}
    native = given.get("rope_type") or "default"
    if native != "default":
        # a second scaling built in its place would drop the model's own (Llama 3's llama3, Phi-3's longrope):
        # even factor=1 would change what it computes
        raise ProbeError(
            f"rope: this hf: model's config scales RoPE already (rope_type={native}, factor "
            f"{given.get('factor', '?')}); probe does not compose a second scaling with it"
        )
    dim = rotated_dimensions(config)
    for complaint in (stretch_complaint(scaling, factor), rotation_complaint(scaling, dim)):
        if complaint:
            raise ProbeError(f"rope: scaling={scaling} {complaint}")
    if scaling == "ntk":
        return {**given, "rope_type": "default", "rope_theta": theta * factor ** (dim / (dim - 2))}
    kept = {k: v for k, v in given.items() if k == "partial_rotary_factor"}  # what it rotates stays as it is
    out = {**kept, "rope_type": scaling, "rope_theta": theta, "factor": factor}
    if scaling in ("yarn", "llama3"):
        out["original_max_position_embeddings"] = int(rope["original_length"])
    if scaling == "llama3":
        out |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    return out


def rotated_dimensions(config: Mapping[str, Any]) -> int:
    """How many dimensions of a head the model rotates: all of them, or its partial rotary factor's share
    (GPT-NeoX and Pythia rotate a quarter)."""
    head = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    given = dict(config.get("rope_parameters") or {})
    share = given.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct", 1.0)))
    return int(head * float(share))
