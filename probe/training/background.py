"""Work that leaves the training thread: resumable states written by a thread of their own, and
batches cut ahead of the step that reads them (on a GPU, from pinned memory).

A step at the paper's scale takes milliseconds on a GPU; writing a 1.36 GB state takes seconds and
packing a batch in Python takes a good part of a millisecond. Neither needs the step to wait: the
state is a snapshot taken between steps and written atomically meanwhile (a kill during the write
leaves the previous state), and batches come from a deterministic stream whose (epoch, position)
travels with each batch, so a resumed run sees the batches an uninterrupted one would.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import torch

from probe.errors import ProbeError

# Held while a training step is captured as a CUDA graph (probe.training.steps), and by the batch thread
# around its CUDA work (pinning a batch): the capture then meets no other thread's CUDA call, whatever
# capture mode it runs in, and the thread no capture's emptied pinned-memory cache.
CAPTURING = threading.Lock()


class StateWriter:
    """One write at a time in a background thread; :meth:`wait` joins it and raises its error."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write()`` in the background once the previous write is done."""
        self.wait()

        def target() -> None:
            try:
                write()
            except BaseException as error:  # noqa: BLE001 - handed to the training thread by wait()
                self._error = error

        self._thread = threading.Thread(target=target, name="probe-state-writer", daemon=False)
        self._thread.start()

    def wait(self) -> None:
        """Block until the pending write is on disk; a failed write raises here, on the training thread."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


Batch = tuple[int, int, tuple[torch.Tensor, ...]]  # (epoch, position, tensors on the device)


def prefetched(
    stream: Iterator[tuple[int, int, torch.Tensor]],
    cut: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
    device: torch.device,
    depth: int = 4,
) -> Iterator[Batch]:
    """``stream``'s (epoch, position, index) as (epoch, position, ``cut(index)`` on ``device``).

    On a GPU a thread cuts ``depth`` batches ahead into pinned memory, and each is copied without
    blocking; on a CPU batches are cut in line (a second thread would take a core from the step)."""
    if device.type != "cuda":
        for epoch, position, index in stream:
            yield epoch, position, cut(index)
        return
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for epoch, position, index in stream:
                tensors = cut(index)
                with CAPTURING:
                    item = (epoch, position, tuple(t.pin_memory() for t in tensors))
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as error:  # noqa: BLE001 - raised on the training thread
            ready.put(error)

    thread = threading.Thread(target=produce, name="probe-batches", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, BaseException):
                raise ProbeError(f"preparing a batch failed: {item}") from item
            epoch, position, tensors = item
            yield epoch, position, tuple(t.to(device, non_blocking=True) for t in tensors)
    finally:
        stop.set()
        thread.join(timeout=5)
