"""How an :class:`~probe.models.interventions.Intervention` acts: hooks on the attention hook points, the
same for probe's models and a TransformerLens bridge (``hf:`` models), and the ``rope_parameters`` an ``hf:``
model gets for a RoPE scaling.

Positions are read from the scores' shape: the query rows are the last ``query`` of ``key`` positions, which
holds for a whole sequence, right padding and decoding with the KV cache (never left padding). The
capped distances are scored first, then the temperatures multiply the logits (one factor per head and
query), then the window masks; a probe layer that finds these hooks alone on ``hook_attn_scores`` folds them
into its fused kernel (:class:`probe.models.attention.PEAttention`), a capped rotation included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.models.interventions import TRAINED, Intervention

HookList = list[tuple[str, Callable[[Tensor, Any], Tensor]]]


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
class _Keep:
    """A hook that keeps what passes a point (the unturned queries and keys, a layer's cos and sin) for the
    capped rotation of ``owner``; a kernel that turns them itself leaves it unread."""

    owner: _Layer
    name: str

    def __call__(self, x: Tensor, hook: Any) -> Tensor:
        self.owner.stash[self.name] = x
        return x

    def __repr__(self) -> str:
        return f"keep {self.name} for {self.owner!r}"


@dataclass(eq=False)
class _Layer:
    """One layer's hook on ``hook_attn_scores``: what the temperatures, window and capped rotations do to its
    logits. Called as a hook it changes the scores; a layer of probe's that finds it alone on the point reads
    its algebra instead (:meth:`fold`: a factor per head and query, a mask of keys) and applies it inside its
    fused kernels (:class:`probe.models.attention.PEAttention`), so the fast path stays."""

    intervention: Intervention
    layer: int
    turn: Callable[[Tensor, int], Tensor] | None = None  # x at one position -> turned (capped rotations)
    learned: Tensor | None = None  # [layer, head] log inverse temperatures being fitted (read at each call)
    scale: float = 1.0  # the layer's logit divisor (sqrt(d_head) or 1)
    stash: dict[str, Tensor] = field(default_factory=dict)
    terms: dict[str, tuple[tuple, Tensor | None]] = field(default_factory=dict)  # part -> (shape, value)

    def keep(self, name: str) -> _Keep:
        return _Keep(self, name)

    def __repr__(self) -> str:  # TransformerLens names a hook by its repr: keep it short
        return f"intervention {self.intervention.name} on layer {self.layer}"

    def __call__(self, scores: Tensor, hook: Any) -> Tensor:  # [batch, head, query, key]
        if self.turn is not None:
            scores = self._capped_rotation(scores, query_positions(scores))
        factor, outside = self._terms(scores.shape[-2:], scores.dtype, scores.device)
        if factor is not None and self.learned is not None:
            # masked logits (-inf) are kept out of the product: their gradient would be -inf x 0 = NaN
            masked = ~torch.isfinite(scores)
            scores = (scores.masked_fill(masked, 0) * factor).masked_fill(masked, float("-inf"))
        elif factor is not None:
            scores = scores * factor
        if outside is not None:
            scores = scores.masked_fill(outside, float("-inf"))
        return scores

    def fold(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device):
        """(factor [head or 1, query, 1] or None, keys outside the window [query, key] or None) for a pass whose
        queries are the last ``query_len`` of ``key_len`` positions: the scores become scores x factor, masked."""
        return self._terms((query_len, key_len), dtype, device)

    def factor(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The factor of :meth:`fold` alone, for a kernel that masks the window block by block
        (:attr:`window`) rather than holding a [query, key] mask."""
        return self._factor((query_len, key_len), dtype, device)

    @property
    def window(self) -> tuple[int, int] | None:
        """(window, sinks): each query sees its last ``window`` keys and the first ``sinks``; None: all."""
        return None if self.intervention.window is None else (self.intervention.window, self.intervention.sinks)

    def _terms(self, shape, dtype: torch.dtype, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
        return self._factor(shape, dtype, device), self._part("outside", shape, dtype, device)

    def _factor(self, shape, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The intervention's factor, times the fitted per-head one (made afresh: it changes every step)."""
        factor = self._part("factor", shape, dtype, device)
        if self.learned is None:
            return factor
        fitted = self.learned[self.layer].exp().to(dtype)[:, None, None]  # [head, 1, 1]
        return fitted if factor is None else factor * fitted

    def _part(self, part: str, shape, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The factor or the window mask for this shape, made once per shape (a decode step or a batch of one
        length reuses it); only the last shape's is kept."""
        key = (*shape, dtype, device)
        if self.terms.get(part, (None,))[0] != key:
            query_len, key_len = shape
            positions = torch.arange(key_len - query_len, key_len, device=device)
            if part == "factor":
                value = row_factor(self.intervention, self.layer, positions)
                value = None if value is None else value.to(dtype)
            else:
                value = None if self.window is None else outside_window(positions, key_len, *self.window)
                if value is not None and not bool(value.any()):
                    value = None  # a window past the sequence: nothing to mask, the logits stay bit for bit
            self.terms[part] = (key, value)
        return self.terms[part][1]

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
        still = self.turn(k.reshape(-1, 1, k.size(2), d_head), 0).reshape(k.shape)
        if still.size(2) != heads:  # grouped keys (hf models): each serves heads / kv_heads queries
            still = still.repeat_interleave(heads // still.size(2), dim=2)
        far = turned.transpose(1, 2) @ still.permute(0, 2, 3, 1) / self.scale  # [batch, head, query, key]
        return torch.where(beyond, far.to(scores.dtype), scores)


def _hooked_by(point) -> list | None:
    """The functions hooked on ``point`` through TransformerLens when they are all that hooks it (no other
    forward, pre-forward or backward hook); None where nothing or something else does."""
    handles = point.fwd_hooks
    if (
        not handles
        or len(point._forward_hooks) != len(handles)
        or point._forward_pre_hooks
        or point._backward_hooks
        or getattr(point, "_backward_pre_hooks", None)
    ):
        return None
    return [h.user_hook for h in handles]


def folds_on(point) -> list[_Layer] | None:
    """The intervention hooks on the hook point ``point`` when they are all that hooks it, so that a kernel can
    stand in for them (:meth:`_Layer.fold`; a capped rotation's ``turn``); None otherwise."""
    hooks = _hooked_by(point)
    return hooks if hooks is not None and all(isinstance(h, _Layer) for h in hooks) else None


def keeps_only(point) -> bool:
    """Whether all that hooks ``point`` keeps values for a capped rotation (:class:`_Keep`), nothing else."""
    hooks = _hooked_by(point)
    return hooks is not None and all(isinstance(h, _Keep) for h in hooks)


HF_ROTATION_OFF = ("q_norm", "k_norm", "key_multiplier")  # hf attention terms between hook_q / hook_k and RoPE
HF_PAIRING = ("rotary_interleaved_cos_sin", "rotary_adjacent_pairs")  # RoPE layouts other than rotate-half


def _check_hf_rotation(attn, config) -> None:
    """ProbeError unless a bridge's attention layer rotates its hooked queries and keys (``hook_q``, ``hook_k``)
    whole by the rotate-half RoPE of ``hook_cos`` / ``hook_sin``, which a capped rotation re-applies."""
    module = getattr(attn, "original_component", None)
    if module is None or not hasattr(attn, "hook_cos") or not hasattr(module, "scaling"):
        raise ProbeError("cap: this hf: model has no rotary positions in its attention to cap")
    rope = getattr(config, "rope_parameters", None) or {}
    share = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    share = share if share is not None else getattr(config, "rotary_pct", 1.0)
    if share != 1.0:
        raise ProbeError(f"cap: this hf: model rotates {share:g} of each head's dimensions; not capped")
    if any(getattr(module, name, None) is not None for name in HF_ROTATION_OFF) or any(
        getattr(getattr(attn, "config", None), name, False) for name in HF_PAIRING
    ):
        raise ProbeError("cap: this hf: model normalises or lays out its queries and keys around RoPE; not capped")


def _hf_turn(x: Tensor, cos: Tensor, sin: Tensor, at: int) -> Tensor:
    """``x`` [..., head, d_head] turned to position ``at`` as a Llama-style attention turns it (``cos``, ``sin``
    [batch, pos, d_head] from ``hook_cos`` / ``hook_sin``: the rotate-half layout, any attention scaling inside)."""
    if cos.size(-1) != x.size(-1):
        raise ProbeError(f"cap: this hf: model rotates {cos.size(-1)} of {x.size(-1)} dimensions; not capped")
    return x * cos[0, at, None, :].to(x.dtype) + rotate_half(x) * sin[0, at, None, :].to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: the rotate-half layout's quarter turn."""
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


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
                attn = model.blocks[layer].attn
                _check_hf_rotation(attn, model.original_model.config)
                state.turn = lambda x, at, state=state: _hf_turn(x, state.stash["cos"], state.stash["sin"], at)
                state.scale = 1.0 / attn.original_component.scaling
                hooks += [(prefix + f"hook_{name}", state.keep(name)) for name in ("q", "k", "cos", "sin")]
            elif pe.adds_bias:
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


def fitted_head_scales(model, log_scales: Tensor) -> HookList:
    """Hooks that multiply each head's logits by ``exp(log_scales[layer, head])`` (a tensor being fitted, with
    gradients), as a temperature per head does, folded into the fused kernels like any intervention's."""
    return [
        (f"blocks.{layer}.attn.hook_attn_scores", _Layer(Intervention(), layer, learned=log_scales))
        for layer in range(model.cfg.n_layers)
    ]


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
