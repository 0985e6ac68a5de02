"""Inference-time interventions on attention: what rescues length generalization without retraining.

Each is a change to a trained model's attention logits, held by each attention layer as a declared edit
(:mod:`probe.models.attention_edit`), so it applies the same way to probe's models and to any model
TransformerLens loads (``hf:``), and no model code is forked:

- ``temperature=t``: every logit divided by t (t < 1 sharpens).
- ``log-length`` (``log-length=L``): the logits of a query that sees n keys multiplied by
  max(1, ln n / ln L), L the longest sequence trained on: unchanged within the training length, sharper
  past it, so a softmax over more keys can stay as peaked. This is the "logn" scale per query of Su 2021
  ("entropy invariance": log_L n) as Qwen applies it (``use_logn_attn``), not Chiang & Cholak 2022's, who
  multiply every logit by log n itself ("Overcoming a theoretical limitation of self-attention", Sec. 5);
  YaRN's 0.1 ln s + 1 is the same idea for RoPE. A fixed rule: nothing is tuned.
- ``head-temperature=FILE``: head h of layer l divided by its own t_lh (Wang et al. 2024, "Length
  Generalization of Causal Transformers without Position Encoding", Sec. 4: NoPE's attention spreads out
  past the training length, and a temperature per head undoes much of it). FILE is JSON, ``{"temperatures":
  [[t per head] per layer]}``, as `probe extrapolate` writes the ones it fits.
- ``window=w`` with ``sinks=k``: each query sees its last w keys (itself included) and the first k keys
  (LM-Infinite, Han et al. 2023; StreamingLLM, Xiao et al. 2023): exactly zero attention elsewhere.
- ``cap`` (``cap=D``): every relative distance beyond D read as D, D the longest distance trained on
  (L - 1) unless given: the bias PEs (T5, ALiBi, KERPLE, FIRE) through ``hook_pos_bias``, each row's bias
  beyond D replaced by its value at D; the rotating ones (Rotary, xPos) ReRoPE-style (Su 2023): a key
  farther than D is scored against the query turned by D and the key not turned, since
  <R_t q, R_i k> = <R_(t-i) q, k>.
- ``scaling=yarn`` (``linear``, ``ntk``, ``dynamic``, ``llama3``) with ``factor`` and ``original_length``:
  the RoPE scalings probe's Rotary already has as options (:mod:`probe.models.rotary`), attached to a loaded
  model as its PE built with them; an ``hf:`` model's rotary modules are rebuilt in place under the same
  ``transformers`` ``rope_parameters`` (:mod:`probe.models.hf_rotary`).

They compose (``log-length+window=64+sinks=4``); :func:`probe.models.attach.attach` compiles them into
each attention layer's edit. Every report an
intervened model feeds records :attr:`Intervention.name`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

SCALING_KEYS = ("scaling", "factor", "original_length")  # the RoPE options an intervention may carry
KEYS = ("temperature", "log-length", "head-temperature", "window", "sinks", "cap", *SCALING_KEYS)
TRAINED = 0  # log-length / cap given without a value: the subject's own training length decides


@dataclass(frozen=True)
class Intervention:
    """A composed set of changes to attention at inference (the module docstring); the default changes nothing."""

    temperature: float = 1.0
    log_length: int | None = None  # L; TRAINED until resolved
    head_temperatures: tuple[tuple[float, ...], ...] | None = None  # [layer][head]
    head_source: str | None = None  # where the per-head temperatures came from (a file, "fitted on ...")
    window: int | None = None
    sinks: int = 0
    cap: int | None = None  # D; TRAINED until resolved
    rope: Mapping[str, Any] = field(default_factory=dict)  # scaling, factor, original_length

    @property
    def is_identity(self) -> bool:
        return self == Intervention()

    @property
    def name(self) -> str:
        """``log-length=50+window=32+sinks=4``: what reports and file names record (``none`` for no change)."""
        parts = []
        if self.temperature != 1.0:
            parts.append(f"temperature={_number(self.temperature)}")
        if self.log_length is not None:
            parts.append("log-length" + (f"={self.log_length}" if self.log_length != TRAINED else ""))
        if self.head_temperatures is not None:
            parts.append(f"head-temperature={self.head_source or 'given'}")
        if self.window is not None:
            parts.append(f"window={self.window}" + (f"+sinks={self.sinks}" if self.sinks else ""))
        if self.cap is not None:
            parts.append("cap" + (f"={self.cap}" if self.cap != TRAINED else ""))
        parts += [f"{k}={_number(v)}" for k, v in sorted(self.rope.items())]
        return "+".join(parts) or "none"

    def to_json(self) -> dict[str, Any]:
        """Its name and every setting that differs from no change."""
        data: dict[str, Any] = {"name": self.name}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "rope":
                value = dict(value)
            elif f.name == "head_temperatures" and value is not None:
                value = [list(row) for row in value]
            if value != (f.default if f.name != "rope" else {}):
                data[f.name] = value
        return data

    def resolved(self, trained_length: int | None) -> Intervention:
        """Bare ``log-length`` and ``cap`` given their values from the length the model was trained on
        (its longest training sequence, in tokens); ProbeError where one is needed and there is none."""
        needs = [k for k, v in (("log-length", self.log_length), ("cap", self.cap)) if v == TRAINED]
        if needs and not trained_length:
            raise ProbeError(
                f"{' and '.join(needs)} need the length the model was trained on: give it (log-length=L, cap=D)"
            )
        changes: dict[str, Any] = {}
        if self.log_length == TRAINED:
            changes["log_length"] = trained_length
        if self.cap == TRAINED:
            changes["cap"] = trained_length - 1
        if self.rope.get("scaling") in ("dynamic", "yarn", "llama3") and "original_length" not in self.rope:
            if not trained_length:
                raise ProbeError(f"scaling={self.rope['scaling']} needs original_length, the length trained on")
            changes["rope"] = {**self.rope, "original_length": trained_length}
        return replace(self, **changes)

    def needs_whole_pass(self, model: TransformerLensModel) -> bool:
        """Whether ``model`` must read each sequence in one pass under it (a capped rotation reads every key's
        unturned vector, which a KV cache does not keep), not token by token."""
        pe = getattr(model, "pe", None)
        return self.cap is not None and pe is not None and pe.rotates


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_intervention(spec: str | None) -> Intervention:
    """``temperature=0.8+window=32+sinks=4``, ``log-length``, ``cap=40``, ``scaling=yarn+factor=4`` or
    ``none``: the one parse of an intervention from the command line or a report; a bad term is one line."""
    if spec is None or spec.strip() in ("", "none"):
        return Intervention()
    values: dict[str, Any] = {}
    for term in spec.split("+"):
        key, has_value, raw = term.strip().partition("=")
        if key not in KEYS:
            raise ProbeError(f"unknown intervention {key!r} in {spec!r}; accepted: {', '.join(KEYS)} (joined by +)")
        if key in values:
            raise ProbeError(f"{key} is given twice in {spec!r}")
        values[key] = _parse_value(key, raw if has_value else None, spec)
    rope = {k: values.pop(k) for k in SCALING_KEYS if k in values}
    if rope and "scaling" not in rope:
        raise ProbeError(f"factor and original_length go with a RoPE scaling (scaling=yarn+factor=4), in {spec!r}")
    if "sinks" in values and "window" not in values:
        raise ProbeError(f"sinks go with a window (window=32+sinks=4), in {spec!r}")
    heads, source = values.pop("head-temperature", (None, None))
    return Intervention(
        temperature=values.get("temperature", 1.0),
        log_length=values.get("log-length"),
        head_temperatures=heads,
        head_source=source,
        window=values.get("window"),
        sinks=values.get("sinks", 0),
        cap=values.get("cap"),
        rope=rope,
    )


def _parse_value(key: str, raw: str | None, spec: str) -> Any:
    if key in ("log-length", "cap") and raw is None:
        return TRAINED
    if raw is None or raw == "":
        raise ProbeError(f"{key} needs a value ({key}=...), in {spec!r}")
    if key == "scaling":
        from probe.models.rotary import SCALINGS

        if raw not in SCALINGS:
            raise ProbeError(f"scaling={raw} is not a RoPE scaling; choose one of {', '.join(SCALINGS)}")
        return raw
    if key == "head-temperature":
        return read_head_temperatures(raw), Path(raw).name
    try:
        value = float(raw) if key in ("temperature", "factor") else int(raw)
    except ValueError:
        kind = "a number" if key in ("temperature", "factor") else "a whole number"
        raise ProbeError(f"{key} must be {kind}, got {raw!r}") from None
    least = {"temperature": 0, "factor": 1, "log-length": 2, "window": 1, "sinks": 0, "cap": 1, "original_length": 1}
    if value < least[key] or (key == "temperature" and value == 0) or not math.isfinite(value):
        bound = "more than 0" if key == "temperature" else f"at least {least[key]}"
        raise ProbeError(f"{key} must be {bound}, got {raw}")
    return value


def read_head_temperatures(path: str | Path) -> tuple[tuple[float, ...], ...]:
    """[layer][head] temperatures from a JSON file (``{"temperatures": [[...], ...]}``); one line if it is not."""
    try:
        rows = json.loads(Path(path).read_text())["temperatures"]
        table = tuple(tuple(float(t) for t in row) for row in rows)
    except FileNotFoundError:
        raise ProbeError(f"head-temperature: there is no file {path}") from None
    except (ValueError, KeyError, TypeError):
        raise ProbeError(f'head-temperature: {path} is not {{"temperatures": [[t per head] per layer]}}') from None
    if not table or any(len(row) != len(table[0]) or min(row) <= 0 for row in table):
        raise ProbeError(f"head-temperature: {path} needs one positive temperature per head, every layer alike")
    return table
