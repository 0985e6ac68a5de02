"""AdamW with its weight-decay groups, as each protocol decays (Appendix D.2: AdamW, weight decay 0.05).

- ``probe``: every tensor of two or more dimensions is decayed, no 1-D tensor (gains, biases).
- ``authors``: as the Hugging Face Trainer of their pin (transformers 4.16.2,
  ``Trainer.create_optimizer``) groups them: every parameter is decayed except those whose name
  contains ``bias`` and those of ``nn.LayerNorm`` modules. Their T5 stack's norms are
  ``T5LayerNorm``, not ``nn.LayerNorm``, so its RMSNorm gains *are* decayed, and T5's
  ``relative_attention_bias`` table is not. probe's names map onto theirs: ``b_*`` are biases,
  ``pe.relative_attention_bias`` is T5's table, and a centred :class:`~probe.models.components.LayerNorm`
  stands for ``nn.LayerNorm``.
"""

from __future__ import annotations

import torch
from torch import nn

from probe.models.components import LayerNorm

DECAY_GROUPS = ("probe", "authors")


def decayed(model: nn.Module, groups: str) -> dict[str, bool]:
    """Every trainable parameter's name -> whether AdamW decays it under ``groups``."""
    if groups not in DECAY_GROUPS:
        raise ValueError(f"unknown weight-decay groups {groups!r}; choose one of {', '.join(DECAY_GROUPS)}")
    layer_norms = {name for name, module in model.named_modules() if isinstance(module, LayerNorm)}
    out = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if groups == "probe":
            out[name] = param.dim() >= 2
            continue
        owner, _, leaf = name.rpartition(".")
        out[name] = not ("bias" in name or leaf.startswith("b_") or owner in layer_norms)
    return out


def make_optimizer(
    model: nn.Module, *, lr: float, weight_decay: float, beta2: float, groups: str, device: torch.device
) -> torch.optim.AdamW:
    """AdamW (eps 1e-8, beta1 0.9: the Trainer's defaults) over ``model``'s trainable parameters,
    in their order within two groups; fused and capturable on a GPU (its state and learning rate
    stay on the device, so a step can be captured), foreach on a CPU."""
    params = dict(model.named_parameters())
    decay = decayed(model, groups)
    chosen = [
        {"params": [params[n] for n, d in decay.items() if d], "weight_decay": weight_decay},
        {"params": [params[n] for n, d in decay.items() if not d], "weight_decay": 0.0},
    ]
    options = {"fused": True, "capturable": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(chosen, lr=lr, betas=(0.9, beta2), eps=1e-8, **options)
