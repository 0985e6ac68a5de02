"""A run's numerics by name (``--precision``): what its forward pass autocasts to, and whether its float32
matrix products may round to TF32. One table, read by training (``probe.training.loop.Trainer``) and by
scoring (``probe.tasks.decoding.scoring_precision``), so that a run is scored in the numerics it trained
in. Torch is imported on first use: the CLI's parser reads :data:`NAMES` without paying for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Precision:
    """One of :data:`NAMES`. ``autocast``: the forward pass's autocast dtype by its ``torch`` name (None: the
    float32 weights' own). ``tf32``: float32 matrix products in TF32 (10-bit mantissa, float32 range and
    accumulation) in the forward and backward passes alike, on a GPU: nearer float32 than bf16 autocast, at
    1.25x its step at ``base`` on an H200 where plain float32 takes 2.8x (``bench/gpu/step_profile.py``)."""

    name: str
    autocast: str | None = None
    tf32: bool = False

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        import torch

        return getattr(torch, self.autocast) if self.autocast else None

    def forward(self, device_type: str, cache_enabled: bool = True) -> AbstractContextManager:
        """The forward pass's autocast, or nothing to enter (``cache_enabled``: autocast's weight cache, which a
        captured step must not keep between replays)."""
        import torch

        dtype = self.autocast_dtype
        return torch.autocast(device_type, dtype=dtype, cache_enabled=cache_enabled) if dtype else nullcontext()

    def products(self) -> AbstractContextManager:
        """TF32 float32 products while entered (:func:`tf32_products`), or nothing to enter."""
        return tf32_products() if self.tf32 else nullcontext()

    @contextmanager
    def scoring(self, device_type: str) -> Iterator[None]:
        """Both, for passes with no backward (scoring)."""
        with self.products(), self.forward(device_type):
            yield


FLOAT32 = Precision("float32")
BF16 = Precision("bf16", autocast="bfloat16")
TF32 = Precision("tf32", tf32=True)
BY_NAME = {p.name: p for p in (FLOAT32, BF16, TF32)}
NAMES = tuple(BY_NAME)
"""The numerics a run can train in, by name (``auto`` chooses among them: ``TrainConfig.numerics``)."""


@contextmanager
def tf32_products() -> Iterator[None]:
    """cuBLAS's float32 matrix products in TF32 while entered, the setting as it was after. The setting is the
    process's, not the thread's: the backward pass (autograd's device thread) reads it too, a captured step
    keeps the kernels chosen while it was captured, and two threads entering it at once could leave it on
    (probe steps the runs of one process in one thread: ``probe.training.stacked``). It goes through torch's
    older switch, ``allow_tf32``, which code of either generation can read after: torch >= 2.9 reports the
    newer one's ``fp32_precision`` as ``ieee`` where it said ``none``, the same float32 arithmetic (writing
    ``none`` back through the newer switch would make a later read of ``allow_tf32`` an error). cuDNN's own
    TF32 switch governs convolutions only, which probe's models have none of."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
