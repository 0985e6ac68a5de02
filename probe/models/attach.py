"""How an :class:`~probe.models.interventions.Intervention` reaches a model: :func:`attach` compiles it once
into one :class:`LayerEdit` per attention layer, which the layer holds, and scales a model's RoPE: a probe
model's by swapping in its PE built with the scaling's options, an ``hf:`` model's by rebuilding its rotary
modules in place (:mod:`probe.models.hf_rotary`).

A probe layer (:class:`probe.models.attention.PEAttention`) reads its edit on either route. An ``hf:`` model's
edits sit on its own attention modules, where :mod:`probe.models.hf_attention` reads them; the bridge's
step-by-step attention, which probe does not own, gets them through one executor hook per layer on its
scores (and, for a capped rotation, hooks keeping the unturned queries and keys and the cos and sin).

Positions are read from the scores' shape: the query rows are the last ``query`` of ``key`` positions, which
holds for a whole sequence, right padding and decoding with the KV cache (never left padding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from probe.errors import ProbeError
from probe.models.attention_edit import edited_scores, outside_window
from probe.models.interventions import TRAINED, Intervention

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModelWithWeights

NO_CHANGE = Intervention()
HF_EDIT = "probe_edit"  # the attribute an hf attention module holds its edit in
EXECUTOR = "probe_executor"  # ... and the executor applying it on the bridge's own attention
UNSCALED = "probe_unscaled"  # what a model held before its RoPE scaling: a probe model's PE, an hf: model's rotary


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


@dataclass(eq=False)
class LayerEdit:
    """One layer's edit (:class:`probe.models.attention_edit.Edit`): the interventions attached to it, composed
    (their factors multiply, their windows all hide), a per-head scale being fitted, and the cap with its turn."""

    layer: int
    interventions: tuple[Intervention, ...] = ()
    learned: Tensor | None = None  # [layer, head] log inverse temperatures being fitted (read at each call)
    cap: int | None = None  # set where this layer has a distance to cap
    turns: bool = False  # the cap acts through the layer's rotation (ReRoPE)
    _made: dict[str, tuple[tuple, Tensor | None]] = field(default_factory=dict, repr=False)  # part -> (shape, value)

    @property
    def windows(self) -> tuple[tuple[int, int], ...]:
        return tuple((i.window, i.sinks) for i in self.interventions if i.window is not None)

    @property
    def keeps_masked_out(self) -> bool:
        return self.learned is not None

    def composed(self, other: LayerEdit) -> LayerEdit:
        """Both edits at once; one cap at most."""
        if self.cap is not None and other.cap is not None:
            raise ProbeError("one cap at a time: the model already attends under one")
        if self.learned is not None and other.learned is not None:
            raise ProbeError("one per-head fit at a time")
        capped = self if self.cap is not None else other
        return LayerEdit(
            self.layer,
            self.interventions + other.interventions,
            self.learned if self.learned is not None else other.learned,
            capped.cap,
            capped.turns,
        )

    def factor(self, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The interventions' factor times the fitted per-head one (made afresh: it changes every step)."""
        factor = self._part("factor", query_len, key_len, dtype, device)
        if self.learned is None:
            return factor
        fitted = self.learned[self.layer].exp().to(dtype)[:, None, None]  # [head, 1, 1]
        return fitted if factor is None else factor * fitted

    def hidden(self, query_len: int, key_len: int, device: torch.device) -> Tensor | None:
        return self._part("hidden", query_len, key_len, torch.bool, device)

    def _part(self, part: str, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device):
        """The factor or the hidden keys for this shape, made once per shape (a decode step or a batch of one
        length reuses it); only the last shape's is kept."""
        key = (query_len, key_len, dtype, device)
        if self._made.get(part, (None,))[0] != key:
            positions = torch.arange(key_len - query_len, key_len, device=device)
            value = None
            if part == "factor":
                for intervention in self.interventions:
                    f = row_factor(intervention, self.layer, positions)
                    value = f if value is None or f is None else value * f
                value = None if value is None else value.to(dtype)
            else:
                for window, sinks in self.windows:
                    outside = outside_window(positions, key_len, window, sinks)
                    value = outside if value is None else value | outside
                if value is not None and not bool(value.any()):
                    value = None  # a window past the sequence: nothing to mask, the logits stay bit for bit
            self._made[part] = (key, value)
        return self._made[part][1]


def _edits(model, intervention: Intervention, learned: Tensor | None) -> list[LayerEdit | None]:
    """Each layer's edit for ``intervention`` (resolved: :meth:`Intervention.resolved`), None where it changes
    nothing there; ProbeError where the model has nothing to cap or the per-head temperatures do not fit."""
    if intervention.log_length == TRAINED or intervention.cap == TRAINED:
        raise ProbeError("resolve log-length and cap against the model's training length first")
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = intervention.head_temperatures
    if heads is not None and (len(heads) != n_layers or len(heads[0]) != n_heads):
        raise ProbeError(
            f"head-temperature gives {len(heads)} layers of {len(heads[0])} heads; the model has "
            f"{n_layers} of {n_heads}"
        )
    scored = intervention.temperature != 1.0 or intervention.log_length is not None or heads is not None
    changes = scored or intervention.window is not None or learned is not None
    pe = getattr(model, "pe", None)
    edits: list[LayerEdit | None] = []
    for layer in range(n_layers):
        edit = LayerEdit(layer, (intervention,), learned)
        if intervention.cap is not None:
            if pe is None:
                _check_hf_rotation(model.blocks[layer].attn, model.original_model.config)
                edit.cap, edit.turns = intervention.cap, True
            elif pe.adds_bias:
                edit.cap = intervention.cap
            elif pe.rotates:
                if model.blocks[layer].attn.rotates:
                    edit.cap, edit.turns = intervention.cap, True
            else:
                raise ProbeError(f"cap: {pe.kind} has no relative distance to cap (bias and rotating PEs do)")
        edits.append(edit if changes or edit.cap is not None else None)
    return edits


def attach(
    model: TransformerLensModelWithWeights, intervention: Intervention = NO_CHANGE, learned: Tensor | None = None
) -> TransformerLensModelWithWeights:
    """``model`` (probe's, or a TransformerLens bridge of an ``hf:`` model) attending under ``intervention``
    (resolved) from now on, composed with what it attends under already; ``learned`` [layer, head]: log scales
    of each head's logits being fitted (with gradients). The only way an intervention reaches a model.
    :func:`detach` (or ``reset_hooks(including_permanent=True)``, on either kind) takes it off.

    A RoPE scaling (``intervention.rope``, one at a time) swaps a probe model's PE for the same PE built with
    the scaling's options (:meth:`~probe.models.positional.PositionalEncoding.with_options`), on the model and
    every layer; an ``hf:`` model's rotary modules are built again by ``transformers`` under the scaling's
    ``rope_parameters``, in place (:func:`probe.models.hf_rotary.scale_rotary`)."""
    edits = _edits(model, intervention, learned)
    if intervention.rope:
        _scale(model, intervention)
    for layer, edit in enumerate(edits):
        if edit is not None:
            holder, before = _holder(model, layer), held_edit(model, layer)
            if before is None and _bridged(model):
                _Executor.install(model, layer)
            object.__setattr__(holder, _name(model), edit if before is None else before.composed(edit))
    return model


def detach(model: TransformerLensModelWithWeights) -> TransformerLensModelWithWeights:
    """``model`` attending as it was built: every edit taken off, a probe model's RoPE scaling too."""
    if UNSCALED in model.__dict__:
        _unscale(model)
    for layer in range(model.cfg.n_layers):
        holder = _holder(model, layer)
        if held_edit(model, layer) is not None:
            object.__setattr__(holder, _name(model), None)
            if _bridged(model):
                _Executor.remove(model, layer)
    return model


@contextmanager
def attached(
    model: TransformerLensModelWithWeights, intervention: Intervention = NO_CHANGE, learned: Tensor | None = None
) -> Iterator[TransformerLensModelWithWeights]:
    """``model`` attending under ``intervention`` (and ``learned``, as :func:`attach`) within the block; what
    it attended under before is restored after."""
    before = [held_edit(model, layer) for layer in range(model.cfg.n_layers)]
    unscaled = model.__dict__.get(UNSCALED)
    attach(model, intervention, learned)
    try:
        yield model
    finally:
        if model.__dict__.get(UNSCALED) is not unscaled:  # scaled within the block (attach refuses a second)
            _unscale(model)
        for layer, edit in enumerate(before):
            if edit is None and held_edit(model, layer) is not None and _bridged(model):
                _Executor.remove(model, layer)
            object.__setattr__(_holder(model, layer), _name(model), edit)


def with_rope(options: Mapping[str, Any] | None, intervention: Intervention) -> dict[str, Any]:
    """``options`` (a PE's, given at load) with ``intervention``'s RoPE scaling over them: what a probe model
    runs with once :func:`attach` has scaled it, which its reports record (``pe_options_at_inference``)."""
    return {**dict(options or {}), **intervention.rope}


def unscalable(pe: str, intervention: Intervention) -> str | None:
    """Why a probe model of PE ``pe`` cannot take ``intervention``'s RoPE scaling, or None: a check a subject
    makes before it loads the model."""
    from probe.models.registry import options_for

    if intervention.rope and not options_for(pe, dict(intervention.rope)):
        return f"{pe} has no RoPE to scale"
    return None


def _scale(model, intervention: Intervention) -> None:
    """``model`` under ``intervention``'s RoPE scaling: a probe model's PE swapped for itself built with the
    scaling over its options, an hf: model's rotary modules rebuilt; what it held kept for :func:`detach`."""
    if UNSCALED in model.__dict__:
        raise ProbeError("one RoPE scaling at a time: the model is scaled already")
    if _bridged(model):
        from probe.models.hf_rotary import scale_rotary

        object.__setattr__(model, UNSCALED, scale_rotary(model.original_model, intervention.rope))
        return
    pe = model.pe
    why = unscalable(pe.kind, intervention)
    if why:
        raise ProbeError(why)
    _swap_pe(model, pe.with_options(dict(intervention.rope)))
    object.__setattr__(model, UNSCALED, pe)


def _unscale(model) -> None:
    """``model`` back to the RoPE it held before :func:`_scale`."""
    held = model.__dict__.pop(UNSCALED)
    if _bridged(model):
        from probe.models.hf_rotary import restore_rotary

        restore_rotary(held)
    else:
        _swap_pe(model, held)


def _swap_pe(model, pe: torch.nn.Module) -> None:
    """``pe`` as the PE of ``model`` and of each of its attention layers (which share one)."""
    model.pe = pe
    for block in model.blocks:
        object.__setattr__(block.attn, "_pe", pe)


def held_edit(model: TransformerLensModelWithWeights, layer: int) -> LayerEdit | None:
    """The edit layer ``layer`` of ``model`` attends under, or None. On a bridge, an edit whose executor's hooks
    are gone (the bridge's ``reset_hooks(including_permanent=True)`` removes every hook) is taken off too, so the
    fused route (:mod:`probe.models.hf_attention`) and the bridge's own attention read the same model."""
    holder = _holder(model, layer)
    edit = getattr(holder, _name(model), None)
    if edit is None or not _bridged(model):
        return edit
    executor = holder.__dict__.get(EXECUTOR)
    if executor is not None and executor.installed():
        return edit
    holder.__dict__.pop(EXECUTOR, None)
    object.__setattr__(holder, HF_EDIT, None)
    return None


def _bridged(model) -> bool:
    return getattr(model, "pe", None) is None


def _holder(model, layer: int):
    attn = model.blocks[layer].attn
    return attn.original_component if _bridged(model) else attn


def _name(model) -> str:
    return HF_EDIT if _bridged(model) else "edit"


@dataclass(eq=False)
class _Executor:
    """The reference route of a bridge's attention layer, which probe does not own: a hook on its scores that
    applies the edit its hf module holds, and hooks keeping what a capped rotation reads from the same pass."""

    module: torch.nn.Module  # the hf attention module holding the edit
    kept: dict[str, Tensor] = field(default_factory=dict)
    handles: list = field(default_factory=list)  # (hook point, LensHandle)

    KEPT = ("hook_q", "hook_k", "hook_cos", "hook_sin")

    def __repr__(self) -> str:  # TransformerLens names a hook by its repr: keep it short
        return f"the edit of {type(self.module).__name__}"

    def __call__(self, scores: Tensor, hook: Any) -> Tensor:  # [batch, head, query, key]
        edit, kept = getattr(self.module, HF_EDIT), dict(self.kept)
        self.kept.clear()  # held for this pass only
        if not edit.turns:
            return edited_scores(scores, edit)
        turn = lambda x, at: _hf_turn(x, at, kept["hook_cos"], kept["hook_sin"])  # noqa: E731
        return edited_scores(scores, edit, kept["hook_q"], kept["hook_k"], turn, 1.0 / self.module.scaling)

    def keeper(self, name: str):
        def keep(x: Tensor, hook: Any) -> Tensor:
            self.kept[name] = x
            return x

        return keep

    @staticmethod
    def install(model: TransformerLensModelWithWeights, layer: int) -> None:
        attn = model.blocks[layer].attn
        executor = _Executor(attn.original_component)
        for name, point in executor_points(attn):
            hook = executor if name == "hook_attn_scores" else executor.keeper(name)
            executor.handles.append((point, point.add_hook(hook, dir="fwd", is_permanent=True)))
        object.__setattr__(attn.original_component, EXECUTOR, executor)

    def installed(self) -> bool:
        """Whether every hook it put on the bridge is still there."""
        return all(any(h is handle for h in point.fwd_hooks) for point, handle in self.handles)

    @staticmethod
    def remove(model: TransformerLensModelWithWeights, layer: int) -> None:
        executor = model.blocks[layer].attn.original_component.__dict__.pop(EXECUTOR)
        for point, handle in executor.handles:
            handle.hook.remove()
            point.fwd_hooks = [h for h in point.fwd_hooks if h is not handle]


def executor_points(attn: torch.nn.Module) -> list[tuple[str, Any]]:
    """(name, hook point) of a bridge attention layer that its edit's executor hooks: the scores, and what a
    capped rotation keeps."""
    return [("hook_attn_scores", attn.hook_attn_scores)] + [
        (name, getattr(attn, name)) for name in _Executor.KEPT if hasattr(attn, name)
    ]


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


def _hf_turn(x: Tensor, at: int, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` [..., head, d_head] turned to position ``at`` as a Llama-style attention turns it (``cos``, ``sin``
    [batch, pos, d_head] from ``hook_cos`` / ``hook_sin``: the rotate-half layout, any attention scaling inside)."""
    if cos.size(-1) != x.size(-1):
        raise ProbeError(f"cap: this hf: model rotates {cos.size(-1)} of {x.size(-1)} dimensions; not capped")
    return half_turned(x, cos[0, at, None, :], sin[0, at, None, :])


def half_turned(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` [..., d] turned by the rotate-half RoPE (Llama's layout) whose ``cos`` and ``sin`` broadcast
    against it: the one turn an hf: model's ReRoPE takes, on both routes."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: the rotate-half layout's quarter turn."""
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
