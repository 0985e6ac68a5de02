"""How much memory an analysis may hold at once, derived from the machine's free memory, and the one line
that stops a planned read which could not fit.

Attention maps grow with the square of the context: one layer of a 9-head model at 16,384 tokens is 9.7 GB
in float32. So no analysis holds every layer's maps of a long input: each reads them one layer (or one block
of layers) at a time, in batches of inputs whose working set stays within :func:`memory_budget`, and each
checks before any work that its smallest step (one input, one layer) fits the memory that is free.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterator, Sequence

from probe.errors import ProbeError

BUDGET_SHARE = 0.25  # of the free memory, for the maps and statistics an analysis holds at once
MAX_BUDGET = 2**30  # never more: beyond a GiB, larger batches buy no speed on a CPU
MIN_BUDGET = 2**26  # never less: one small batch always goes
WORKING_BYTES = 64  # per (head, query, key) cell while one input goes through one layer: the model's own
# float32 logits, mask, probabilities and their copies (a hooked forward of SmolLM2-135M through TransformerBridge
# at 1,024 tokens peaks 0.5 GB over its weights: 56 bytes a cell) and an analysis's float64 copy


def available_memory() -> int | None:
    """Bytes this machine can still give a process (Linux's MemAvailable), or None where it does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def memory_budget() -> int:
    """Bytes of maps and statistics an analysis may hold at once: a quarter of the free memory, between
    64 MiB and 1 GiB (1 GiB where the machine does not say)."""
    free = available_memory()
    if free is None:
        return MAX_BUDGET
    return max(MIN_BUDGET, min(MAX_BUDGET, int(free * BUDGET_SHARE)))


def layer_bytes(heads: int, width: int, per_cell: int = WORKING_BYTES) -> int:
    """Bytes one input's step through one layer holds: ``heads`` maps of ``width`` x ``width`` cells."""
    return heads * width * width * per_cell


def per_batch(one: int, batch_size: int, budget: int) -> int:
    """How many inputs of ``one`` bytes each go in a batch: at most ``batch_size``, within ``budget``, one at least."""
    return max(1, min(batch_size, budget // max(one, 1)))


def check_fits(heads: int, width: int, who: str) -> None:
    """One line, before any work, where the smallest step of an analysis (one ``width``-token input through
    one layer: ``heads`` maps over the models read together, :data:`WORKING_BYTES` a cell) needs more than
    the memory free here: the estimate, the longest input that fits, and the options that lower it."""
    need, free = layer_bytes(heads, width), available_memory()
    if free is None or need <= free:
        return
    raise ProbeError(
        f"one layer of one {width}-token input of {who} needs {size(need)} ({heads} maps of {width}x{width} "
        f"with the model's own working copies), more than the {size(free)} free here; read at most about "
        f"{largest_width(free, heads)} tokens: a smaller context (-o context=N for hf: models; windows are read "
        "at 1x and 2x it) or 1x only (--lengths seen)"
    )


def largest_width(free: int, heads: int, per_cell: int = WORKING_BYTES) -> int:
    """The longest input whose one-layer step (``heads`` maps) fits ``free`` bytes."""
    return math.isqrt(max(free, 0) // max(heads * per_cell, 1))


def size(n: int) -> str:
    """Bytes as a person reads them: 9.7 GiB, 512.0 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def batches_within(sizes: Sequence[int], per_cell: int, batch_size: int, budget: int) -> Iterator[tuple[int, int]]:
    """Consecutive [start, stop) slices of inputs of ``sizes`` tokens: at most ``batch_size`` each, and a
    padded batch's cells (batch x width², ``per_cell`` bytes each) within ``budget``; one input at least."""
    start = 0
    while start < len(sizes):
        stop, widest = start + 1, sizes[start]
        while stop < len(sizes) and stop - start < batch_size:
            wider = max(widest, sizes[stop])
            if (stop - start + 1) * wider * wider * per_cell > budget:
                break
            widest, stop = wider, stop + 1
        yield start, stop
        start = stop


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
KEEP_FREED = 2**30  # free memory at the heap's top beyond this goes back to the kernel


def keep_freed_memory(trim: int = KEEP_FREED) -> None:
    """Have glibc serve large blocks from the heap and keep what is freed (up to ``trim`` bytes at the heap's
    top) for the next one.

    By default glibc maps every block over its threshold (32 MiB at most) fresh from the kernel and unmaps it
    on free, so each layer's maps of a long input page-fault their memory in anew: on a 135M model at 1,024
    tokens most of an analysis's time went to the kernel. Kept, a freed layer's memory serves the next layer.
    An analysis that holds large statistics for long (positions) keeps less, as what the heap keeps around
    them adds to its peak (measured on `probe positions` of SmolLM2-135M at T = 512: 146 s and 3.3 GB peak
    by default, 96 s and 4.3 GB keeping 2 GiB, 105 s and 3.7 GB keeping 128 MiB). Elsewhere than glibc this
    does nothing."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_MAX, 0)
    mallopt(M_TRIM_THRESHOLD, trim)
