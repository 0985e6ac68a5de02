"""Freed memory kept for reuse in a process that trains on a CPU.

glibc's malloc serves an allocation over its mmap threshold (128 KiB, rising with what is freed to 32 MiB at
most) with fresh pages from the kernel and hands them back when it is freed, and returns the top of its heap
past a trim threshold too. A training step allocates and frees the same large activations every step, so
each step faults them in again page by page, the kernel zeroing every page: a ``tiny`` T5 step on polynomial
evaluation's full scratchpad (rows of up to ~1,500 tokens) took 210,000 page faults and 0.43 s in the kernel,
30% of the step. Served from the heap and never trimmed, those pages stay mapped and are reused: that step
1.31x faster, the other scenarios measured 1.03-1.15x, the same weights bit for bit (``bench/malloc.py``,
``bench/results/malloc_cpu.json``). The price is memory: the heap keeps its high-water mark, and PyTorch's
aligned allocations place a new buffer above a freed one until freed ones merge, so a process holds more than
its peak (that T5 run: 1,749 MiB resident at step 150, against a 1,302 MiB peak as glibc comes). Only a
process that trains asks for it: :func:`probe.training.parallel.train_parallel`'s workers, and
:func:`~probe.training.parallel.train_runs` training in its own process on a CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # the largest the int parameter takes: no heap top is ever this large and free


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to serve this process's allocations from its heap (no mmap) and never trim it: True
    where it took, False where the C library is not glibc (macOS, musl), whose allocators are left as they are.
    An allocation larger than a thread's own arena can grow to is still mapped (glibc falls back to mmap
    there), so nothing fails for want of it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc's alone: musl's mallopt does nothing and says so
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
