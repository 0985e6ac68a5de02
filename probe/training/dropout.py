"""Where dropout acts while a model trains (Table tab:hyperparam: dropout 0.1 at ``base``).

TransformerLens' models carry no dropout, and a built or loaded model must stay deterministic, so
training adds it for its own duration only. Two sets of sites:

- ``probe``: the token embedding, and every attention and MLP output (``hook_embed``,
  ``hook_attn_out``, ``hook_mlp_out``);
- ``authors``: where their T5 stack puts it (``dropout_rate``: Hugging Face's ``T5Stack`` and its
  layers): the embeddings with the APE added (``blocks.0.hook_resid_pre``), the attention
  probabilities, every attention output, the feed-forward hidden layer after ReLU
  (``mlp.hook_post``), every feed-forward output, and the final normalised state
  (``ln_final.hook_normalized``: T5's RMS norm hooks it before its elementwise weight, with which dropout
  commutes; a LayerNorm, as TransformerLens', after its weight and bias).

Dropout on the attention probabilities acts after ``hook_pattern``: a hook reads the pattern the
values are mixed with before the units are dropped, as in T5, where dropout follows the softmax.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.nn.functional as F
from torch import nn

SITES = ("probe", "authors")


def hook_sites(model: nn.Module, sites: str) -> list[str]:
    """The hook points whose output is dropped out under ``sites`` (attention probabilities aside)."""
    layers = range(model.cfg.n_layers)
    if sites == "probe":
        return ["hook_embed"] + [f"blocks.{layer}.hook_{part}_out" for layer in layers for part in ("attn", "mlp")]
    if sites == "authors":
        names = ["blocks.0.hook_resid_pre"]
        points = ("hook_attn_out", "mlp.hook_post", "hook_mlp_out")
        names += [f"blocks.{layer}.{point}" for layer in layers for point in points]
        return names + [name for name in ("ln_final.hook_normalized",) if name in model.mod_dict]
    raise ValueError(f"unknown dropout sites {sites!r}; choose one of {', '.join(SITES)}")


@contextmanager
def dropout(model: nn.Module, p: float, sites: str = "probe") -> Iterator[None]:
    """Dropout ``p`` at ``sites`` while ``model.training``, for the ``with`` block's duration."""
    names = hook_sites(model, sites)
    if p <= 0:
        yield
        return

    def drop(module, inputs, output):
        return F.dropout(output, p, training=model.training)

    handles = [model.mod_dict[name].register_forward_hook(drop) for name in names]
    attention = [block.attn for block in model.blocks] if sites == "authors" else []
    for layer in attention:
        layer.attn_dropout = p
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for layer in attention:
            layer.attn_dropout = 0.0
