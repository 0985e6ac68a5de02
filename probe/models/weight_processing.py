"""TransformerLens' weight processing on a probe model, in place: the same function, weights an analysis reads
directly.

``HookedTransformer.from_pretrained`` folds each norm's gain (and a LayerNorm's bias) into the weights that read
its output, centres what writes to the residual stream and the unembedding, and moves the value biases into
the output bias; logit attributions (``cache.decompose_resid``, ``tokens_to_residual_directions``) and direct
weight reading (``W_Q``, ``OV``) assume it. A probe model is built and trained unprocessed, as TransformerLens'
``fold_ln=False``; :func:`process_weights_` makes it what ``from_pretrained`` would have loaded (Elhage et al.
2021; TransformerLens' ``further_comments.md``). The forward pass is unchanged: logits equal to float rounding,
up to a constant per position where the unembedding is centred (softmax unchanged).

After folding, the norms keep their parameters at w = 1 (and b = 0), so every hook and checkpoint name stays;
``cfg.normalization_type`` reads ``RMSPre`` or ``LNPre``, as TransformerLens marks a folded model. A tied
unembedding (``base``: W_E^T scaled by d_model^-0.5) is untied, since the final norm's gain folds into W_U alone.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from probe.errors import ProbeError
from probe.models.components import Unembed

if TYPE_CHECKING:
    from probe.models.hooked import HookedModel  # a PETransformer: transformer.py imports this module


@torch.no_grad()
def process_weights_(
    model: HookedModel,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
    fold_value_biases: bool = True,
) -> HookedModel:
    """``model`` processed as TransformerLens' ``process_weights_`` does, with its defaults; returns it.

    Centring the writing weights needs a LayerNorm, which removes the residual's mean (TransformerLens skips it
    for RMSNorm too); it centres W_E, the attention and MLP outputs and their biases, and a learned positional
    table, not APE's computed sinusoids (the norm removes their mean all the same)."""
    layer_norm = model.config.normalization == "LN"
    if fold_ln:
        fold_layer_norm(model, center_weights=layer_norm)
    if center_writing_weights and layer_norm:
        _center_writing_weights(model)
    if center_unembed:
        _center_unembed(model)
    if fold_value_biases:
        _fold_value_biases(model)
    return model


@torch.no_grad()
def fold_layer_norm(model: HookedModel, center_weights: bool = True) -> HookedModel:
    """Each norm's gain w (and a LayerNorm's bias b) folded into the weights that read its output: W <- diag(w) W,
    b_read <- b_read + b W; with ``center_weights`` (a LayerNorm's output has zero mean) each reading weight less
    its mean over d_model. The norms are left at w = 1, b = 0; returns ``model``."""
    normalization = model.config.normalization
    if normalization is None:
        raise ProbeError("this model has no layer norm to fold")
    if model.cfg.normalization_type.endswith("Pre"):
        raise ProbeError("this model's layer norms are folded already")
    center = center_weights and normalization == "LN"
    for block in model.blocks:
        attn = block.attn
        _fold(block.ln1, [(attn.W_Q, attn.b_Q, 1), (attn.W_K, attn.b_K, 1), (attn.W_V, attn.b_V, 1)], center)
        _fold(block.ln2, [(block.mlp.W_in, block.mlp.b_in, 0)], center)
    _untie(model)
    _fold(model.ln_final, [(model.unembed.W_U, model.unembed.b_U, 0)], center)
    model.cfg.normalization_type = f"{normalization}Pre"
    return model


def _fold(norm: torch.nn.Module, readers: list[tuple[torch.Tensor, torch.Tensor, int]], center: bool) -> None:
    """Each (weight, bias, dim) reading the norm's output along ``dim`` (W_Q [head, d_model, d_head]: 1; W_in
    [d_model, d_mlp]: 0) with the norm's w and b folded in; then the norm is left at w = 1, b = 0."""
    for weight, bias, dim in readers:
        shape = [1] * weight.dim()
        shape[dim] = -1
        if hasattr(norm, "b"):  # b @ W over d_model, before W takes w: [..., d_out]
            bias.add_((norm.b.view(shape) * weight).sum(dim))
        weight.mul_(norm.w.view(shape))
        if center:
            weight.sub_(weight.mean(dim, keepdim=True))
    norm.w.fill_(1.0)
    if hasattr(norm, "b"):
        norm.b.zero_()


def _untie(model: HookedModel) -> None:
    """A tied unembedding made its own W_U (the same values), so folding the final norm leaves W_E as it is."""
    if not model.config.tie_embeddings:
        return
    tied = model.unembed
    untied = Unembed(model.config.d_model, model.config.d_vocab).to(device=tied.W_U.device, dtype=tied.W_U.dtype)
    untied.W_U.copy_(tied.W_U)
    untied.b_U.copy_(tied.b_U)
    untied.b_U.requires_grad_(model.config.bias)
    model.unembed = untied
    model.config = dataclasses.replace(model.config, tie_embeddings=False)
    model.setup()


def _center_writing_weights(model: HookedModel) -> None:
    """Every weight writing to the residual stream less its mean over d_model (a LayerNorm removes it)."""
    model.embed.W_E.sub_(model.embed.W_E.mean(-1, keepdim=True))
    table = getattr(model.pe, "W_pos", None)
    if isinstance(table, torch.nn.Parameter):
        table.sub_(table.mean(-1, keepdim=True))
    for block in model.blocks:
        for weight in (block.attn.W_O, block.attn.b_O, block.mlp.W_out, block.mlp.b_out):
            weight.sub_(weight.mean(-1, keepdim=True))


def _center_unembed(model: HookedModel) -> None:
    """W_U and b_U less their mean over the vocabulary: each position's logits move by one constant."""
    _untie(model)
    model.unembed.W_U.sub_(model.unembed.W_U.mean(-1, keepdim=True))
    model.unembed.b_U.sub_(model.unembed.b_U.mean())


def _fold_value_biases(model: HookedModel) -> None:
    """b_V moved into b_O: each head's attention pattern sums to 1, so its b_V @ W_O is added whatever it attends."""
    for block in model.blocks:
        attn = block.attn
        attn.b_O.add_(torch.einsum("hd,hdm->m", attn.b_V, attn.W_O))
        attn.b_V.zero_()
