"""Which torch device a command runs on, and in which precision: ``--device`` and ``--dtype`` checked once,
with one line for a device this machine does not have or a precision probe does not read in. Torch is
imported on first use: the CLI's parser reads :data:`DTYPES` without paying for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.errors import ProbeError

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16")
"""The precisions ``--dtype`` accepts, by the name of their ``torch`` dtype."""


def resolve_device(device: str | None) -> torch.device:
    """``auto`` (or None) is the GPU where there is one, else the CPU; ``cpu``, ``cuda`` and ``cuda:N``
    are checked against this machine."""
    import torch

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


def cpu_computes_bf16() -> bool:
    """Whether this CPU has bf16 arithmetic of its own (AVX512-BF16 or AMX). Without it oneDNN emulates bf16
    in float32 and a bf16 training step is slower, not faster: 1.85x float32's time at ``small`` on an
    AVX-512 Xeon that lacks it, against 0.70x on the EPYC where ``CPU_BF16`` was measured."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's, private since 2.1
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def cpu_model() -> str:
    """This CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``): results trained bit for bit alike
    on one model can differ on another, whose matrix kernels round differently."""
    import platform

    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``float32`` (or None: as saved, float32), ``bfloat16``: the precision a model's weights are
    loaded in and its forward pass runs in; what analyses reduce is float32 or float64 whatever it is."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ProbeError(f"unknown dtype {dtype!r}; use float32 or bfloat16")
    return getattr(torch, dtype)
