"""Freed memory kept for reuse in a process that trains on a CPU.

glibc's malloc serves an allocation over its mmap threshold (128 KiB, rising with what is freed to 32 MiB at
most) with fresh pages from the kernel and hands them back when it is freed, and returns the top of its heap
past a trim threshold too. A training step allocates and frees the same large activations every step, so each
step faults them in again page by page, the kernel zeroing every page: a ``tiny`` T5 step on polynomial
evaluation's full scratchpad (rows of up to ~1,500 tokens) took 210,000 page faults and 0.43 s in the kernel,
30% of the step. Served from the heap and never trimmed, those pages stay mapped and are reused: that step 1.31x
faster, the other scenarios measured 1.03-1.15x, the same weights bit for bit (``bench/malloc.py``,
``bench/results/malloc_cpu.json``). The price is memory: the heap keeps its high-water mark, and PyTorch's
aligned allocations place a new buffer above a freed one until freed ones merge, so a process holds more than
its peak (that T5 run over 150 steps: 1,673 MiB at its peak against 1,293 as glibc comes, 1.39x faster;
``bench/results/malloc_150_steps_cpu.json``). Only training asks for it:
:func:`probe.training.parallel.train_parallel`'s workers for their whole life, and
:func:`~probe.training.parallel.train_runs` training in the caller's process on a CPU for as long as it trains
(:func:`freed_memory_kept`: a notebook or the explorer gets glibc's ways back after it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # the largest the int parameter takes: no heap top is ever this large and free
DEFAULT_TRIM_THRESHOLD = 128 * 1024  # glibc's defaults (malloc.c)
DEFAULT_MMAP_MAX = 65536


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc; None elsewhere (macOS; musl, whose mallopt does nothing). Looked up once:
    ``find_library`` runs ``ldconfig``, and a price asks for it per step shape it times."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to serve this process's allocations from its heap (no mmap) and never trim it: True
    where it took, False where the C library is not glibc, whose allocator is left as it is. An allocation
    larger than a thread's own arena can grow to is still mapped (glibc falls back to mmap there), so nothing
    fails for want of it."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))


@contextmanager
def freed_memory_kept(device_type: str = "cpu") -> Iterator[bool]:
    """:func:`keep_freed_memory` for the block (whether it took) where the work is on a CPU (``device_type``; a
    GPU's activations are its caching allocator's: nothing is asked then); after it glibc's default limits again,
    and the free top of the heap handed back to the kernel (``malloc_trim``)."""
    kept = device_type == "cpu" and keep_freed_memory()
    try:
        yield kept
    finally:
        if kept and (libc := _glibc()) is not None:
            libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
            libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
            libc.malloc_trim(0)
