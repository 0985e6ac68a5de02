"""Every read of torch's and transformers' private internals, one small function each: nothing else in probe
touches a name of theirs that starts with an underscore (tests/test_layout.py holds this).

A private name can change in any release without notice, so each function says what it reads and on which
versions it was checked: :data:`CHECKED` (the lowest of each is ``pyproject.toml``'s floor), and
tests/test_compat.py, which fails naming the function whose read the installed version lacks. Where a read
is gone in a new release, the fix is here, once, and the layers above never learn of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

# The versions each read below was checked on, lowest first: torch 2.11.0 and transformers 5.17.0 (the GPU
# device's image, bench/gpu/image.txt; tests/test_compat.py and the attention tests run there on the CPU),
# torch 2.13.0 and transformers 5.24.0 (CI and the whole suite, .ci/run).
CHECKED = {"torch": ("2.11.0", "2.13.0"), "transformers": ("5.17.0", "5.24.0")}

HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks")


def hook_count(module: nn.Module) -> int:
    """How many hooks ``module`` itself holds (a user's, ``run_with_cache``'s, an edit's executor on a bridge):
    torch's per-module hook dicts, :data:`HOOK_DICTS` (torch has no public count; checked on :data:`CHECKED`)."""
    return sum(len(getattr(module, name)) for name in HOOK_DICTS)


def global_hooks() -> bool:
    """Whether a module-global hook is registered (``torch.nn.modules.module.register_module_forward_hook`` and
    kin): it expects every module to run. Reads :data:`GLOBAL_HOOK_DICTS` of ``torch.nn.modules.module``."""
    module = torch.nn.modules.module
    return any(getattr(module, name) for name in GLOBAL_HOOK_DICTS)


def child(parent: nn.Module, name: str) -> nn.Module:
    """``parent``'s submodule ``name``, read from torch's ``_modules`` dict: what a property of the same name
    returns (``getattr`` and ``get_submodule`` would find the property itself)."""
    return parent._modules[name]


def replace_child(parent: nn.Module, name: str, child: nn.Module) -> None:
    """Put ``child`` at ``parent.<name>`` as it is, by writing torch's ``_modules`` dict: ``setattr`` would run
    the parent's own ``__setattr__`` (a TransformerLens bridge component wraps what it is given) and torch's
    global registration hooks, and a swap that is undone at once must do neither."""
    parent._modules[name] = child


def cpu_flash_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, mask: Tensor | None, scale: float
) -> tuple[Tensor, Tensor]:
    """(softmax(scale q k^T + ``mask``, ``causal``) v, its rows' log-sum-exp) by torch's CPU flash kernel,
    ``aten._scaled_dot_product_flash_attention_for_cpu``: q, k, v [batch, head, pos, d_head], ``mask``
    broadcastable to [batch, head, query, key] -> ([batch, head, query, d_head], [batch, head, query]).
    ``scaled_dot_product_attention`` reaches the same kernel but returns no log-sum-exp and takes no causal
    skipping with a mask; a row that sees no key gives 0 for both."""
    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)
    return out[0], out[1]


class FollowsApply(nn.Module):
    """A module told after every ``.to()``, ``.cuda()``, ``.double()`` ...: they all go through torch's
    ``nn.Module._apply``, which this overrides to call :meth:`after_apply` once the tensors have moved."""

    def _apply(self, fn: Callable, *args: Any, **kwargs: Any):
        module = super()._apply(fn, *args, **kwargs)
        self.after_apply()
        return module

    def after_apply(self) -> None:
        """What follows the module's tensors (a config's device and dtype, say); nothing by default."""


def attention_implementation(config: Any) -> str | None:
    """The attention function a ``transformers`` config names: its ``_attn_implementation`` (the public
    ``set_attn_implementation`` is the model's, and reloads; a swap that is undone at once must not)."""
    return config._attn_implementation


def set_attention_implementation(config: Any, name: str | None) -> None:
    """Make ``config``'s models attend through the function registered as ``name`` (``_attn_implementation``)."""
    config._attn_implementation = name


def supports_attention_functions(model: nn.Module) -> bool:
    """Whether a ``transformers`` model's attention modules call the function its config names
    (``AttentionInterface``): the class flag ``_supports_attention_backend``."""
    return bool(getattr(model, "_supports_attention_backend", False))


def hub_source(config: dict) -> str:
    """Where a saved ``config.json`` says its model came from (a Hub id or a path): ``_name_or_path``, which
    ``transformers`` 4 wrote into it (the Hub's files hold it; 5 keeps it in ``config.to_dict()`` but leaves it
    out of the file); "" where it says nothing."""
    return str(config.get("_name_or_path") or "")
