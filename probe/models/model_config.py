"""Model configuration: one dataclass, and how a preset's size and overrides resolve into it.

Everything a checkpoint needs to rebuild a model lives in :class:`ModelConfig`, which maps to the
TransformerLens config its tools read (``transformer.lens_config``) plus the PE's own fields. The
sizes are ``probe.presets.PRESETS``: they follow the paper's released code (a T5 decoder stack
without cross-attention, Appendix D.2) where TransformerLens allows, deviations listed there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from probe.errors import ProbeError
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
        cls = pe_class(self.pe)
        if self.d_vocab < 1:
            raise ProbeError(f"d_vocab must be positive, got {self.d_vocab}")
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
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        data = _from_legacy_fields(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProbeError(f"unknown model config field(s): {', '.join(unknown)}")
        return cls(**data)


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
