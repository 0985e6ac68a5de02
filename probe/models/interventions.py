"""Inference-time interventions on attention: what rescues length generalization without retraining.

Each is a change to a trained model's attention logits, made through its hook points, so it applies the
same way to probe's models and to any model TransformerLens loads (``hf:``), and no model code is forked:

- ``temperature=t``: every logit divided by t (t < 1 sharpens).
- ``log-length`` (``log-length=L``): the logits of a query that sees n keys multiplied by
  max(1, ln n / ln L), L the longest sequence trained on: unchanged within the training length, sharper
  past it, so a softmax over more keys can stay as peaked (Chiang & Cholak 2022, "Overcoming a
  theoretical limitation of self-attention", Sec. 5 scale by log n; YaRN's 0.1 ln s + 1 is the same idea
  for RoPE). A fixed rule: nothing is tuned.
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
  the RoPE scalings probe's Rotary already has as options (:mod:`probe.models.rotary`), applied when the
  model loads; an ``hf:`` model gets the same through ``transformers``' ``rope_parameters``.

They compose (``log-length+window=64+sinks=4``): the capped distances are scored first, then the
temperatures multiply the logits (one elementwise product of a [head, query] factor), then the window
masks. Every report an intervened model feeds records :attr:`Intervention.name`.

Positions are read from the scores' shape: the query rows are the last ``query`` of ``key`` positions, which
holds for a whole sequence, right padding and decoding with the KV cache (never left padding).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.errors import ProbeError

SCALING_KEYS = ("scaling", "factor", "original_length")  # the RoPE options an intervention may carry
KEYS = ("temperature", "log-length", "head-temperature", "window", "sinks", "cap", *SCALING_KEYS)
TRAINED = 0  # log-length / cap given without a value: the subject's own training length decides
HookList = list[tuple[str, Callable[[Tensor, Any], Tensor]]]


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

    def needs_whole_pass(self, model) -> bool:
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


# -- applying one -------------------------------------------------------------------------------------------
def query_positions(scores: Tensor) -> Tensor:
    """[query] absolute positions of the rows of ``scores`` [..., query, key]: the last ``query`` of ``key``."""
    query, key = scores.shape[-2:]
    return torch.arange(key - query, key, device=scores.device)


def log_length_factor(n: Tensor, trained: int) -> Tensor:
    """max(1, ln n / ln L) for a query that sees ``n`` keys (float64; n = position + 1)."""
    return (n.double().log() / math.log(trained)).clamp(min=1.0)


def row_factor(intervention: Intervention, layer: int, positions: Tensor) -> Tensor | None:
    """[head or 1, query, 1] float64 multiplier of layer ``layer``'s logits, or None where it is 1."""
    factor = torch.full((1, len(positions), 1), 1.0 / intervention.temperature, dtype=torch.float64)
    if intervention.log_length is not None:
        factor = factor * log_length_factor(positions.cpu() + 1, intervention.log_length)[None, :, None]
    if intervention.head_temperatures is not None:
        heads = torch.tensor(intervention.head_temperatures[layer], dtype=torch.float64)
        factor = factor / heads[:, None, None]
    if bool((factor == 1).all()):
        return None
    return factor.to(positions.device)


def outside_window(positions: Tensor, key_len: int, window: int, sinks: int) -> Tensor:
    """[query, key] True where a key is neither among the query's last ``window`` nor the first ``sinks``."""
    keys = torch.arange(key_len, device=positions.device)
    return (positions[:, None] - keys[None, :] >= window) & (keys[None, :] >= sinks)


def capped_bias(bias: Tensor, cap: int) -> Tensor:
    """``bias`` [head, query, key] with each row's value beyond distance ``cap`` replaced by its value at
    distance ``cap`` (rows are the last ``query`` of ``key`` positions)."""
    positions = query_positions(bias)
    keys = torch.arange(bias.size(-1), device=bias.device)
    index = torch.maximum(keys[None, :], positions[:, None] - cap)  # [query, key]
    return bias.gather(-1, index.expand_as(bias))


@dataclass(eq=False)
class _Layer:
    """One layer's hook on ``hook_attn_scores``: what the temperatures, window and capped rotations do to its
    logits. Called as a hook it changes the scores; a layer of probe's that finds it alone on the point reads
    its algebra instead (:meth:`fold`: a factor per head and query, a mask of keys) and applies it inside its
    fused kernels (:class:`probe.models.attention.PEAttention`), so the fast path stays."""

    intervention: Intervention
    layer: int
    turn: Callable[[Tensor, int], Tensor] | None = None  # x at one position -> turned (capped rotations)
    scale: float = 1.0  # the layer's logit divisor (sqrt(d_head) or 1)
    stash: dict[str, Tensor] = field(default_factory=dict)
    terms: dict[tuple, tuple[Tensor | None, Tensor | None]] = field(default_factory=dict)

    def keep(self, name: str) -> Callable[[Tensor, Any], Tensor]:
        def hook(x: Tensor, hook: Any) -> Tensor:
            self.stash[name] = x
            return x

        return hook

    def __repr__(self) -> str:  # TransformerLens names a hook by its repr: keep it short
        return f"intervention {self.intervention.name} on layer {self.layer}"

    def __call__(self, scores: Tensor, hook: Any) -> Tensor:  # [batch, head, query, key]
        if self.turn is not None:
            scores = self._capped_rotation(scores, query_positions(scores))
        factor, outside = self._terms(scores.shape[-2:], scores.dtype, scores.device)
        if factor is not None:
            scores = scores * factor
        if outside is not None:
            scores = scores.masked_fill(outside, float("-inf"))
        return scores

    @property
    def foldable(self) -> bool:
        """Whether :meth:`fold` is all it does (a capped rotation needs the unturned queries and keys)."""
        return self.turn is None

    def fold(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device):
        """(factor [head or 1, query, 1] or None, keys outside the window [query, key] or None) for a pass whose
        queries are the last ``query_len`` of ``key_len`` positions: the scores become scores x factor, masked."""
        return self._terms((query_len, key_len), dtype, device)

    def _terms(self, shape, dtype: torch.dtype, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
        """(factor, window mask) for this shape, made once per shape: a decode step or a batch of one length
        reuses them."""
        key = (*shape, dtype, device)
        if key not in self.terms:
            query_len, key_len = shape
            positions = torch.arange(key_len - query_len, key_len, device=device)
            factor = row_factor(self.intervention, self.layer, positions)
            window, sinks = self.intervention.window, self.intervention.sinks
            outside = None if window is None else outside_window(positions, key_len, window, sinks)
            if outside is not None and not bool(outside.any()):
                outside = None  # a window past the sequence: nothing to mask, the logits stay bit for bit
            self.terms.clear()
            self.terms[key] = (None if factor is None else factor.to(dtype), outside)
        return self.terms[key]

    def _capped_rotation(self, scores: Tensor, positions: Tensor) -> Tensor:
        q, k = self.stash.pop("q"), self.stash.pop("k")  # [batch, pos, head, d_head], before turning
        if k.size(1) != scores.size(-1):
            raise ProbeError("cap on a rotating PE reads each sequence in one pass, not token by token with a cache")
        cap = self.intervention.cap
        beyond = positions[:, None] - torch.arange(scores.size(-1), device=scores.device)[None, :] > cap
        if not bool(beyond.any()):
            return scores
        batch, query, heads, d_head = q.shape
        turned = self.turn(q.reshape(batch * query, 1, heads, d_head), cap).reshape(q.shape)
        still = self.turn(k.reshape(-1, 1, heads, d_head), 0).reshape(k.shape)
        if still.size(2) != heads:  # grouped keys (hf models): each serves heads / kv_heads queries
            still = still.repeat_interleave(heads // still.size(2), dim=2)
        far = turned.transpose(1, 2) @ still.permute(0, 2, 3, 1) / self.scale  # [batch, head, query, key]
        return torch.where(beyond, far.to(scores.dtype), scores)


def intervention_hooks(model, intervention: Intervention) -> HookList:
    """(hook name, function) pairs that make ``model`` (probe's, or a TransformerLens bridge) attend under
    ``intervention`` (resolved: :meth:`Intervention.resolved`). RoPE scalings are not hooks: they apply
    when the model loads. ProbeError where the model has nothing to cap."""
    if intervention.log_length == TRAINED or intervention.cap == TRAINED:
        raise ProbeError("resolve log-length and cap against the model's training length first")
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = intervention.head_temperatures
    if heads is not None and (len(heads) != n_layers or len(heads[0]) != n_heads):
        raise ProbeError(
            f"head-temperature gives {len(heads)} layers of {len(heads[0])} heads; the model has "
            f"{n_layers} of {n_heads}"
        )
    pe = getattr(model, "pe", None)
    hooks: HookList = []
    for layer in range(n_layers):
        state = _Layer(intervention, layer)
        prefix = f"blocks.{layer}.attn."
        if intervention.cap is not None:
            if pe is None:
                raise ProbeError("cap reads probe's own PE term; an hf: model's positions are inside transformers")
            if pe.adds_bias:
                hooks.append((prefix + "hook_pos_bias", lambda b, hook, cap=intervention.cap: capped_bias(b, cap)))
            elif pe.rotates:
                attn = model.blocks[layer].attn
                if attn.rotates:
                    state.turn = lambda x, at, layer=layer: pe.rotate(layer, x, at)
                    state.scale = attn.attn_scale
                    hooks += [(prefix + "hook_q", state.keep("q")), (prefix + "hook_k", state.keep("k"))]
            else:
                raise ProbeError(f"cap: {pe.kind} has no relative distance to cap (bias and rotating PEs do)")
        scored = intervention.temperature != 1.0 or intervention.log_length is not None or heads is not None
        if scored or intervention.window is not None or state.turn is not None:
            hooks.append((prefix + "hook_attn_scores", state))
    return hooks


@contextmanager
def intervened(model, intervention: Intervention) -> Iterator[Any]:
    """``model`` attending under ``intervention`` within the block (its hooks removed after)."""
    hooks = intervention_hooks(model, intervention)
    with model.hooks(fwd_hooks=hooks):
        yield model


def apply(model, intervention: Intervention) -> Any:
    """``model`` attending under ``intervention`` from now on (permanent hooks: they survive
    ``run_with_cache`` and ``run_with_hooks``; ``model.reset_hooks(including_permanent=True)`` removes them)."""
    for name, hook in intervention_hooks(model, intervention):
        model.add_hook(name, hook, is_permanent=True)
    return model


def hf_rope_parameters(rope: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """``transformers``' ``rope_parameters`` for a probe RoPE scaling of a model whose config is ``config``
    (its own ``rope_parameters`` or ``rope_theta``): linear, dynamic, yarn and llama3 by name; ntk (NTK-aware,
    bloc97 2023) as the base times s^(d/(d-2)), what the scaling is."""
    given = dict(config.get("rope_parameters") or {})
    theta = float(given.get("rope_theta", config.get("rope_theta", 10_000.0)))
    scaling, factor = rope["scaling"], float(rope.get("factor", 1.0))
    if scaling == "none":
        return {**given, "rope_theta": theta}
    if scaling == "ntk":
        dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
        return {**given, "rope_type": "default", "rope_theta": theta * factor ** (dim / (dim - 2))}
    out = {"rope_type": scaling, "rope_theta": theta, "factor": factor}
    if scaling in ("yarn", "llama3"):
        out["original_max_position_embeddings"] = int(rope["original_length"])
    if scaling == "llama3":
        out |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    return out
