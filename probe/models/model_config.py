"""Model configuration: one dataclass, and how a preset's size and overrides resolve into it.

Everything a checkpoint needs to rebuild a model lives in :class:`ModelConfig`, which maps to the
TransformerLens config its tools read (``transformer.lens_config``) plus the PE's own fields. The
sizes are ``probe.presets.PRESETS``: they follow the paper's released code (a T5 decoder stack
without cross-attention, Appendix D.2) where TransformerLens allows, deviations listed there.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any

from probe.errors import ProbeError, first_line
from probe.models.components import ACTIVATIONS
from probe.models.registry import pe_class
from probe.presets import PRESETS, check_preset


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer with one positional encoding (``pe``).

    ``attn_scale=False`` leaves logits undivided by sqrt(d_head), as T5 does (it folds the scale
    into the initialisation, ``init="t5"``). ``bias=False`` freezes TransformerLens' bias vectors
    at zero, which is T5's bias-free linear layers. ``tie_embeddings`` ties W_U to W_E^T and scales
    the final residual by d_model^-0.5 first, as T5 does. ``dropout`` is used only by the training
    loop (through hooks), never by a built or loaded model.
    """

    pe: str
    d_vocab: int
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 4
    d_head: int = 32
    d_mlp: int = 512
    n_ctx: int = 1024
    act_fn: str = "relu"
    normalization: str | None = "RMS"
    eps: float = 1e-5  # the norms' epsilon (TransformerLens' default; T5's is 1e-6)
    attn_scale: bool = True
    bias: bool = False
    tie_embeddings: bool = True
    init: str = "t5"
    dropout: float = 0.0
    seed: int = 0
    # The PE's options (its class's ``options``), every one resolved: `probe train -p key=value`.
    pe_options: dict[str, Any] = field(default_factory=dict)
    # Randomized positions (Ruoss et al. 2023), with any PE: a training pass's positions are a sorted
    # random subset of 0 .. random_positions - 1, not 0 .. T - 1; 0 turns them off.
    random_positions: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.pe, str):
            raise ProbeError(f"pe must be a positional encoding's name, got {self.pe!r}")
        cls = pe_class(self.pe)
        _check_types(self)
        if self.normalization not in ("RMS", "LN", None):
            raise ProbeError(f"unknown normalization {self.normalization!r}; choose 'RMS', 'LN' or None")
        if self.init not in ("t5", "gpt2"):
            raise ProbeError(f"unknown init {self.init!r}; choose 't5' or 'gpt2'")
        if not 0 <= self.random_positions <= self.n_ctx:
            raise ProbeError(f"random_positions must be in 0 .. n_ctx={self.n_ctx}, got {self.random_positions}")
        object.__setattr__(self, "pe_options", cls.resolve_options(self.pe_options, self))

    @property
    def eager_because(self) -> str | None:
        """Why this model's training step cannot be captured as a CUDA graph, or None: it can. Decided
        here, from the PE and the options, never by a capture that fails (see probe.training.steps)."""
        if self.random_positions:
            return "random_positions draws each pass's positions on the host"
        return pe_class(self.pe).eager_because(self.pe_options)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str | os.PathLike | None = None) -> ModelConfig:
        """The config a checkpoint's ``model`` entry describes; a missing, unknown or mistyped field is a
        ProbeError naming it (and ``where``, the file it was read from, where given)."""
        said = f"{where}: " if where is not None else ""
        if not isinstance(data, dict):
            raise ProbeError(f"{said}the model config is {type(data).__name__} {data!r}, not an object of fields")
        try:
            data = _from_legacy_fields(data)
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise ProbeError(f"unknown model config field(s): {', '.join(unknown)}")
            missing = [f.name for f in dataclasses.fields(cls) if f.name in REQUIRED and f.name not in data]
            if missing:
                raise ProbeError(f"the model config has no {', '.join(missing)}")
            return cls(**data)
        except ProbeError as error:
            raise ProbeError(f"{said}{error}") from None
        except (TypeError, ValueError, AttributeError, KeyError) as error:  # a legacy field of the wrong type
            raise ProbeError(f"{said}the model config does not read ({first_line(error)})") from None


SIZES = ("d_vocab", "n_layers", "d_model", "n_heads", "d_head", "d_mlp", "n_ctx")  # whole numbers, at least 1
REQUIRED = ("pe", "d_vocab")  # the fields with no default


def _check_types(config: ModelConfig) -> None:
    """ProbeError naming the field and its value where a field is of the wrong type or out of range (an
    ``-m n_layers=abc``, a config.json's ``"n_ctx": -5``): one line, never a traceback from deep in a layer."""
    for name in SIZES:
        value = getattr(config, name)
        if not _whole(value) or value < 1:
            raise ProbeError(f"{name} must be a whole number, at least 1, got {value!r}")
    if not isinstance(config.act_fn, str) or config.act_fn not in ACTIVATIONS:
        raise ProbeError(f"unknown act_fn {config.act_fn!r}; choose one of {', '.join(ACTIVATIONS)}")
    for name in ("attn_scale", "bias", "tie_embeddings"):
        if not isinstance(getattr(config, name), bool):
            raise ProbeError(f"{name} must be true or false, got {getattr(config, name)!r}")
    if not _real(config.eps) or not 0 < config.eps < math.inf:
        raise ProbeError(f"eps must be a positive finite number, got {config.eps!r}")
    if not _real(config.dropout) or not 0 <= config.dropout < 1:
        raise ProbeError(f"dropout must be at least 0 and below 1, got {config.dropout!r}")
    if not _whole(config.seed):
        raise ProbeError(f"seed must be a whole number, got {config.seed!r}")
    if not isinstance(config.pe_options, dict):
        raise ProbeError(f"pe_options must be an object of option: value, got {config.pe_options!r}")
    if not _whole(config.random_positions):
        raise ProbeError(f"random_positions must be a whole number (0: off), got {config.random_positions!r}")


def _whole(value: Any) -> bool:
    """An integer (a Python or NumPy one), not a bool, a float or a string of digits."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    """A number (an integer or a float), not a bool or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# Checkpoints written before PEs owned their options kept them as fields of ModelConfig.
_LEGACY_FIELDS = {
    "t5_num_buckets": ("t5", "num_buckets"),
    "t5_max_distance": ("t5", "max_distance"),
    "t5_shared": ("t5", "shared"),
    "rotary_base": ("rotary", "base"),
    "ape_base": ("ape", "base"),
}


def _from_legacy_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict from before ``pe_options``: its PE's fields moved there, other PEs' dropped
    (and ``extra``, a field that nothing ever filled, dropped)."""
    data = {k: v for k, v in data.items() if k != "extra"}
    legacy = set(_LEGACY_FIELDS) | {"rotary_dim"}
    if not legacy & set(data):
        return data
    options = dict(data.get("pe_options", {}))
    for name, (pe, option) in _LEGACY_FIELDS.items():
        if name in data and pe == data.get("pe"):
            options[option] = data[name]
    if data.get("pe") == "rotary" and data.get("rotary_dim") is not None:
        options["fraction"] = data["rotary_dim"] / data.get("d_head", 32)
    return {**{k: v for k, v in data.items() if k not in legacy}, "pe_options": options}


def resolve_config(
    pe: str,
    *,
    vocab_size: int,
    preset: str = "tiny",
    seed: int = 0,
    pe_options: dict[str, Any] | None = None,
    **overrides: Any,
) -> ModelConfig:
    """The preset's fields, then the overrides:
    ``resolve_config("rotary", vocab_size=40, n_layers=1, pe_options={"base": 500})``."""
    check_preset(preset)
    fields = {f.name for f in dataclasses.fields(ModelConfig)} - {"pe", "d_vocab", "seed", "pe_options"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        moved = [name for name in unknown if name in _LEGACY_FIELDS or name == "rotary_dim"]
        hint = f" ({moved[0]} is an option of its PE now: see `probe pes`)" if moved else ""
        raise ProbeError(f"unknown model option(s): {', '.join(unknown)}{hint}")
    options = {**pe_class(pe).preset_options.get(preset, {}), **(pe_options or {})}
    return ModelConfig(pe=pe, d_vocab=vocab_size, seed=seed, pe_options=options, **{**PRESETS[preset], **overrides})
