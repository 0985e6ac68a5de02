"""probe: how positional encoding shapes attention and length generalization (Kazemnejad et al., 2023).

Public entry points are re-exported lazily, so ``import probe`` (and ``probe --help``) stays fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

PE_KINDS: tuple[str, ...] = ("nope", "ape", "t5", "alibi", "rotary")

_LAZY = {
    "build_model": "probe.models",
    "save_checkpoint": "probe.models",
    "load_checkpoint": "probe.models",
    "ModelConfig": "probe.models",
    "PRESETS": "probe.models",
    "ProbeError": "probe.errors",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'probe' has no attribute {name!r}")
