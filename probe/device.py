"""Which torch device a command runs on: ``--device`` checked once, with one line for a device this
machine does not have."""

from __future__ import annotations

import torch

from probe.errors import ProbeError


def resolve_device(device: str | None) -> torch.device:
    """``auto`` (or None) is the GPU where there is one, else the CPU; ``cpu``, ``cuda`` and ``cuda:N``
    are checked against this machine."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ProbeError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ProbeError(f"device {device!r} requested but no CUDA GPU is available here")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ProbeError(f"device {device!r} does not exist (this machine has {torch.cuda.device_count()} GPU(s))")
    if resolved.type not in ("cpu", "cuda"):
        raise ProbeError(f"unsupported device {device!r}; use cpu or cuda")
    return resolved
