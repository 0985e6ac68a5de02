"""Freed memory kept mapped in a training process (probe.training.memory): the page faults it saves, and the
weights it must leave bit for bit as they were. Each case runs in a fresh interpreter: the setting is process-wide
and glibc reads it for the allocations after it."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"),
    reason="the C library is not glibc",
)

FAULTS = """
import json, resource, sys
import torch
from probe.training.memory import freed_memory_kept, keep_freed_memory
if sys.argv[1] == "kept":
    keep_freed_memory()
if sys.argv[1] == "kept, then not":  # a block trained with memory kept, then glibc's ways again
    with freed_memory_kept():
        torch.empty(16 * 2**20).fill_(1.0)
def step():  # 64 MiB allocated, written and freed, as a step's activations are
    torch.empty(16 * 2**20).fill_(1.0)
for _ in range(48):  # the heap's first steps place each buffer above the last until the freed ones merge: after
    step()          # 2-9 steps on the machine it was written on, past 12 once on CI (the heap's start is random)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    step()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _faults(arm: str) -> int:
    done = subprocess.run([sys.executable, "-c", FAULTS, arm], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def test_a_large_buffer_freed_and_allocated_again_is_not_faulted_in_again_where_memory_is_kept():
    """64 MiB is over glibc's largest mmap threshold: as it comes, each allocation is 16,384 fresh pages, so eight
    steps fault at least 131,072 times; kept, the heap's pages serve them again."""
    pages = 16 * 2**20 * 4 // 4096
    assert _faults("glibc") >= 8 * pages
    assert _faults("kept") < pages // 16


def test_memory_kept_for_a_block_is_glibcs_again_after_it():
    """``train_runs`` trains in its caller's process under :func:`freed_memory_kept`: after the block, a freed
    buffer goes back to the kernel again, as glibc does (a notebook's memory is not held at its high-water mark)."""
    pages = 16 * 2**20 * 4 // 4096
    assert _faults("kept, then not") >= 8 * pages


TRAIN = """
import hashlib, json, sys
from pathlib import Path
import torch
from probe.training.memory import keep_freed_memory
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig
if sys.argv[1] == "kept":
    keep_freed_memory()
torch.set_num_threads(1)
config = TrainConfig(task="reverse", pe=sys.argv[2], steps=20, batch_size=32, eval_examples=16, log_every=5,
                     task_options={"train_length": 16})
train_run(config, Path(sys.argv[3]), torch.device("cpu"))
from safetensors.torch import load_file
weights = load_file(sys.argv[3] + "/model.safetensors")
print(json.dumps(hashlib.sha256(b"".join(weights[k].numpy().tobytes() for k in sorted(weights))).hexdigest()))
"""


@pytest.mark.parametrize("pe", ["t5", "rotary"])
def test_memory_kept_trains_the_same_weights_bit_for_bit(tmp_path, pe):
    """Where a buffer lies is not numerics: the same run at ``tiny`` (its activations over glibc's first mmap
    threshold), as it comes and with memory kept, to the same weights."""
    shas = []
    for arm in ("glibc", "kept"):
        command = [sys.executable, "-c", TRAIN, arm, pe, str(tmp_path / arm)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        shas.append(done.stdout.strip().splitlines()[-1])
    assert shas[0] == shas[1]
