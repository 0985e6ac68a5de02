"""The logits of an ``hf:`` model through ``transformers``' own attention modules: the fused route of a bridge.

TransformerLens' bridge recomputes every attention layer step by step so that its hooks fire, so a layer's
scores, [batch, head, query, key] in float32, exist in full: 9.7 GB for one SmolLM2-135M layer at 16,384
tokens, three times over with the mask and the softmax. A forward that wants only logits (perplexity,
``probe extrapolate``), with no hook on the bridge but the executors of its edits (:mod:`probe.models.attach`),
runs the model's own attention modules instead, with an attention function registered through
``transformers``' ``AttentionInterface``: scaled-dot-product attention with the edit each module holds applied,
its factor multiplied into the queries and its windows made a mask, in blocks of queries where there is a mask.
The same product the reference route takes on the scores, taken before the kernel, as
:mod:`probe.models.fused_attention` does for probe's layers; memory linear in the sequence, causal work skipped.
A capped rotation (ReRoPE) runs as two causal attentions merged by their log-sum-exp
(:mod:`probe.models.capped_attention`), its far queries and keys turned back by a pure rotation of the model's
own frequencies and turned by :func:`probe.models.attention_edit.far_pair`. The factors may carry gradients (a
per-head temperature being fitted).

Anything else (another hook anywhere on the bridge, an architecture whose attention has a sliding window,
soft-capping or sink logits that this function would not apply) takes the bridge's own path.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from probe.compat import (
    attention_implementation,
    global_hooks,
    hook_count,
    replace_child,
    set_attention_implementation,
    supports_attention_functions,
)
from probe.errors import ProbeError
from probe.models.attach import HF_EDIT, LayerEdit, executor_points, half_turned, held_edit
from probe.models.attention_edit import far_pair, outside_window
from probe.models.capped_attention import capped_causal_attention

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

NAME = "probe_folded"  # the attention function's name in transformers' AttentionInterface
QUERY_BLOCK = 1024  # queries per block where keys are masked: a block's mask and scores stay small
UNSUPPORTED = ("sliding_window", "attn_logit_softcapping", "sinks")  # attention terms the function leaves out

# the module holding the model's RoPE frequencies, inv_freq [d_head / 2], where a capped rotation needs them (read
# at each call: dynamic RoPE replaces it)
_ROTARY: ContextVar[nn.Module | None] = ContextVar("probe_hf_rotary", default=None)


def _attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask, scaling: float, **_):
    """``transformers``' attention-function contract: query [batch, head, q, d], key and value [batch, kv_head,
    k, d] (the queries are the last q of k positions) -> ([batch, q, head, d], no weights). Causal, under the
    edit ``module`` holds (:mod:`probe.models.attach`)."""
    if attention_mask is not None:  # transformers makes no mask for a function it does not know
        raise RuntimeError(f"{NAME} builds its own causal mask and was handed one")
    query_len, key_len = query.shape[-2], key.shape[-2]
    edit: LayerEdit | None = getattr(module, HF_EDIT, None)
    windows = []  # (window, sinks) that hide some key here
    if edit is not None:
        factor = edit.factor(query_len, key_len, query.dtype, query.device)  # [head or 1, q, 1]
        query = query if factor is None else query * factor[None]
        windows = [(window, sinks) for window, sinks in edit.windows if window < key_len]
        if edit.turns and key_len - 1 > edit.cap:
            out = _capped(query, key, value, edit.cap, scaling, windows, _ROTARY.get().inv_freq)
            return out.transpose(1, 2).contiguous(), None
    grouped = key.size(1) != query.size(1)
    if not windows and query_len == key_len:
        out = F.scaled_dot_product_attention(
            query, key, value, is_causal=query_len > 1, scale=scaling, enable_gqa=grouped
        )
        return out.transpose(1, 2).contiguous(), None
    positions = torch.arange(key_len - query_len, key_len, device=query.device)
    keys = torch.arange(key_len, device=query.device)
    blocks = []
    for start in range(0, query_len, QUERY_BLOCK):
        rows = positions[start : start + QUERY_BLOCK]  # [block] the block's query positions
        seen = int(rows[-1]) + 1  # its last query sees keys 0 .. seen - 1
        allow = keys[None, :seen] <= rows[:, None]  # [block, seen]
        for window, sinks in windows:
            allow = allow & ~outside_window(rows, seen, window, sinks)
        blocks.append(
            F.scaled_dot_product_attention(
                query[:, :, start : start + QUERY_BLOCK], key[:, :, :seen], value[:, :, :seen], attn_mask=allow,
                scale=scaling, enable_gqa=grouped,
            )
        )  # fmt: skip
    return torch.cat(blocks, dim=2).transpose(1, 2).contiguous(), None


def _capped(query: Tensor, key: Tensor, value: Tensor, cap: int, scaling: float, windows, inv_freq) -> Tensor:
    """[batch, head, pos, d] causal attention of one pass from position 0 under a capped rotation
    (:mod:`probe.models.capped_attention`). The queries and keys come turned by the model's RoPE (times its
    attention scaling, if any); the far ones are turned back by a pure rotation, then to ``cap`` and to 0 by
    :func:`probe.models.attention_edit.far_pair`, which is what ReRoPE scores with."""
    length = query.size(2)
    if key.size(2) != length:
        raise ProbeError("cap on a rotating PE reads each sequence in one pass, not token by token with a cache")
    if key.size(1) != query.size(1):  # grouped keys: each serves heads / kv_heads queries
        groups = query.size(1) // key.size(1)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    c = cap + 1
    positions = torch.arange(length, device=query.device)
    far_q = _rotated(query[:, :, c:], -positions[c:], inv_freq)  # unturned: [batch, head, far, d]
    far_k = _rotated(key[:, :, : length - c], -positions[: length - c], inv_freq)
    far_q, far_k = far_pair(far_q.transpose(1, 2), far_k.transpose(1, 2), cap, lambda x, at: _rotated(x, at, inv_freq))
    hidden = None
    for window, sinks in windows:
        outside = outside_window(positions, length, window, sinks)[None, None]  # [1, 1, query, key]
        hidden = outside if hidden is None else hidden | outside
    far_q, far_k = far_q.transpose(1, 2), far_k.transpose(1, 2)  # [batch, head, far, d]
    return capped_causal_attention(query, key, far_q, far_k, value, cap, scaling, hidden, QUERY_BLOCK)


def _rotated(x: Tensor, by: Tensor | int, inv_freq: Tensor) -> Tensor:
    """``x`` [..., d] turned by the rotate-half RoPE of frequencies ``inv_freq`` [d / 2] through ``by`` positions
    (a number, or [pos] for x's second-to-last dimension), angles in float64."""
    angles = torch.as_tensor(by, device=x.device).double()[..., None] * inv_freq.double()  # [pos or 1, d / 2]
    angles = torch.cat([angles, angles], dim=-1)  # [pos or 1, d]
    return half_turned(x, angles.cos(), angles.sin())


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, _attention)


@dataclass
class _Plan:
    """How to run a bridge's model with its own attention modules: where each sits, and its RoPE frequencies."""

    hf: nn.Module
    swaps: list[tuple[nn.Module, str, nn.Module, nn.Module]]  # (parent, child name, bridge component, hf module)
    rotary: nn.Module | None  # the module holding the RoPE frequencies, where a capped rotation needs them

    @contextmanager
    def applied(self) -> Iterator[nn.Module]:
        """The hf model with its attention modules back in place and attending through :func:`_attention`."""
        _register()
        configs = {id(c): c for c in [self.hf.config, *(getattr(m, "config", None) for *_, m in self.swaps)] if c}
        before = {key: attention_implementation(config) for key, config in configs.items()}
        token = _ROTARY.set(self.rotary)
        try:
            for parent, name, _, module in self.swaps:
                replace_child(parent, name, module)
            for config in configs.values():
                set_attention_implementation(config, NAME)
            yield self.hf
        finally:
            for key, config in configs.items():
                set_attention_implementation(config, before[key])
            for parent, name, component, _ in self.swaps:
                replace_child(parent, name, component)
            _ROTARY.reset(token)


def _plan(model) -> _Plan | None:
    """How ``model`` runs on its own attention modules, or None: not a bridge, or a hook on it (other than the
    executors of its edits, :mod:`probe.models.attach`) observes what only the bridge's path computes, or its
    attention has terms :func:`_attention` does not apply."""
    hf = getattr(model, "original_model", None)
    blocks = getattr(model, "blocks", None)
    if hf is None or blocks is None or model.training or not supports_attention_functions(hf):
        return None
    if global_hooks():
        return None
    swaps, executors, turns = [], [], False
    for layer, block in enumerate(blocks):
        attn = getattr(block, "attn", None)
        module = getattr(attn, "original_component", None)
        parent = getattr(block, "original_component", None)
        name = next((n for n, child in (parent.named_children() if parent else ()) if child is attn), None)
        if module is None or name is None or any(getattr(module, a, None) is not None for a in UNSUPPORTED):
            return None
        edit = held_edit(model, layer)
        if edit is not None:
            executors += [id(point) for _, point in executor_points(attn)]
            turns = turns or edit.turns
        swaps.append((parent, name, attn, module))
    if any(hook_count(point) > executors.count(id(point)) for point in model.hook_dict.values()):
        return None
    rotary = None
    if turns:
        rotary = next((m for m in hf.modules() if isinstance(getattr(m, "inv_freq", None), Tensor)), None)
        if rotary is None:
            return None
    return _Plan(hf, swaps, rotary)


def runs_folded(model: TransformerLensModel) -> bool:
    """Whether :func:`logits_of` reads ``model`` as it is hooked now on its own attention modules (no
    [head, query, key] scores held), not through the bridge's step-by-step attention or as a probe model."""
    return _plan(model) is not None


def logits_of(model: TransformerLensModel, tokens: Tensor, keep: int | None = None) -> Tensor:
    """[batch, keep or pos, vocab] logits of ``model`` (a probe model or a TransformerLens bridge) on
    ``tokens`` [batch, pos], the last ``keep`` positions' (None: all). A bridge with no hook but its edits'
    executors runs on its model's own attention modules (module docstring); anything else as ``model(tokens)``.
    Gradients flow where the caller enables them (a per-head temperature being fitted)."""
    plan = _plan(model)
    if plan is None:
        logits = model(tokens)
        return logits if keep is None else logits[:, -keep:]
    with plan.applied() as hf:
        if "logits_to_keep" in inspect.signature(hf.forward).parameters:
            return hf(input_ids=tokens, use_cache=False, logits_to_keep=keep or 0).logits
        logits = hf(input_ids=tokens, use_cache=False).logits
        return logits if keep is None else logits[:, -keep:]
