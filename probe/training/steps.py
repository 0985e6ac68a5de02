"""How a run's steps execute: eagerly, compiled (``torch.compile``), and on a GPU captured as one CUDA
graph per run. None of these changes what a step computes beyond float rounding; each is proved
equal to the eager step by a test on the CPU where it can run there (captured graphs need a GPU).

At the paper's scale a step is about 1,500 tokens through 12 x 768 (bench/gpu/, the GPU kit): on an H100
it is bound by its ~2,000 kernel launches, not by arithmetic. A captured step replays them as one
launch. Capture needs what the rest of the loop provides: one batch shape for the whole run
(:class:`probe.tasks.batches.Geometry`), no host sync inside a step (losses are read every ``log_every``
steps), and the learning rate on the device (:class:`CapturedStep` indexes a table of the schedule
with a step counter it keeps there).

A capture must not fail: on torch (up to 2.11 at least) a capture that breaks inside ``torch.cuda.graph``
leaves CUDA's generator flagged as capturing, the caching allocator mid-capture and the current stream on
the graph's side stream, so nothing that follows in the process can be trusted. So what could break it is
found before: a run whose model needs the host each step (``ModelConfig.eager_because``) trains eagerly by
design, decided when the run is built; the last eager warm-up step runs under CUDA's sync check, and a
step that synchronises stays eager; the batch thread is held off while capturing. If a capture breaks all
the same, :class:`CaptureFailed` stops the program with the cause, never going on in that process.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from probe.errors import ProbeError
from probe.training.background import CAPTURING

WARMUP_STEPS = 3  # eager steps before capture: the optimizer's state, cuBLAS's workspace, autograd's buffers
NO_CAPTURE = "--no-capture"  # the flag of `probe train`, `probe reproduce` and `probe sweep` that trains eagerly


class CaptureFailed(ProbeError):
    """A CUDA graph capture broke: the process's CUDA state is not to be trusted, so the whole program
    stops (never one member, the others going on)."""


@dataclass(frozen=True)
class Engine:
    """``compile``: the model's forward through ``torch.compile``; ``capture``: each step replayed
    as a CUDA graph (GPU only; a run whose model cannot be captured trains eagerly, saying so once).
    Either one trains on one fixed batch geometry."""

    compile: bool = False
    capture: bool = False

    @classmethod
    def for_device(cls, device: torch.device, *, compile: bool | None = None, capture: bool | None = None) -> Engine:
        """The default for ``device``: eager on a CPU (fixed shapes would only add padding there);
        captured on a GPU. ``compile`` and ``capture`` force either way."""
        if capture and device.type != "cuda":
            raise ProbeError(f"CUDA graphs need a GPU; pass {NO_CAPTURE} (or leave out --capture) on a CPU")
        return cls(
            compile=bool(compile),
            capture=device.type == "cuda" if capture is None else capture,
        )

    @property
    def fixed_shapes(self) -> bool:
        return self.compile or self.capture


def cause_of(error: BaseException) -> str:
    """The first line of what started ``error``: a failed capture raises its own error from
    ``capture_end`` while handling the op's, which is the one that says what happened."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else '?'}"


class CapturedStep:
    """One run's training step as a CUDA graph: ``step(batch)`` copies the batch into the graph's
    input buffers and replays it, returning the step's loss (a device scalar, valid until the next
    replay). The first :data:`WARMUP_STEPS` calls run ``eager`` (real steps, on a side stream, as
    capture requires), the last of them under CUDA's sync check: a step that synchronises with the
    host says so in one line on stderr and runs eagerly from then on (``failed``). Otherwise the next
    call captures and replays; a capture that breaks raises :class:`CaptureFailed`.

    What is CUDA's is in :meth:`_warm_up`, :meth:`_sync_check` and :meth:`_record`; the rest (input
    buffers, the schedule on the device, which call takes which step) is tested on a CPU with those
    replaced."""

    def __init__(
        self,
        eager: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        schedule: list[float],
        first_step: int,
        device: torch.device,
        hold: Callable[[], object] = lambda: None,
        name: str = "the run",
    ):
        self.eager, self.optimizer, self.device, self.hold, self.name = eager, optimizer, device, hold, name
        dtype = optimizer.param_groups[0]["params"][0].dtype  # the weights' (float32; float64 in a test)
        self.schedule = torch.tensor(schedule, dtype=dtype, device=device)  # [steps] lr at each step
        self.counter = torch.full((), first_step, dtype=torch.long, device=device)
        self.lr = self.schedule[min(first_step, len(schedule) - 1)].clone()
        for group in optimizer.param_groups:
            group["lr"] = self.lr  # read by the fused kernel on the device, every step
        self.calls = 0
        self.replay: Callable[[], None] | None = None
        self.held: object = None  # what the graph reads that was made before it (the PE's tables): kept alive
        self.inputs: tuple[torch.Tensor, ...] = ()
        self.loss: torch.Tensor | None = None
        self.failed: str | None = None  # why the step runs eagerly, if the sync check found a reason

    @property
    def captured(self) -> bool:
        return self.replay is not None

    def _advance(self) -> None:
        """The learning rate of the step the counter names, then the counter on by one: device ops
        (``index_select``: indexing with a 0-d tensor would read it on the host)."""
        at = self.counter.clamp(max=len(self.schedule) - 1).reshape(1)
        self.lr.copy_(self.schedule.index_select(0, at).reshape(()))
        self.counter += 1

    def _body(self) -> None:
        """The step the graph holds: its learning rate, then forward, backward and AdamW on the inputs."""
        self._advance()
        self.loss = self.eager(self.inputs)

    def __call__(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if self.replay is not None:
            for buffer, tensor in zip(self.inputs, batch):
                buffer.copy_(tensor, non_blocking=True)
            self.replay()
            return self.loss
        if self.failed:
            self._advance()
            return self.eager(batch)
        if self.calls < WARMUP_STEPS:
            self.calls += 1
            if self.calls < WARMUP_STEPS:
                return self._warm_up(batch)
            loss, sync = self._sync_check(lambda: self._warm_up(batch))
            if sync:
                self.failed = sync
                print(
                    f"probe: {self.name}: its training step waits on the host ({sync}); it runs eagerly",
                    file=sys.stderr,
                )
            return loss
        self.inputs = tuple(t.clone() for t in batch)
        self.optimizer.zero_grad(set_to_none=True)  # gradients are the graph's own, made while capturing
        try:
            replay = self._record(self._body)
        except Exception as error:  # noqa: BLE001 - any failure inside a capture poisons the process
            raise CaptureFailed(
                f"capturing the training step of {self.name} as a CUDA graph failed ({cause_of(error)}); "
                f"torch {torch.__version__} cannot go on safely after that, so probe stops here (every state "
                f"already written is kept): train with {NO_CAPTURE}"
            ) from error
        self.held, self.replay = self.hold(), replay
        self.replay()  # capturing records the step; this runs it
        return self.loss

    def _warm_up(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """An eager step on a side stream of the run's device, as the steps before a capture must be."""
        with torch.cuda.device(self.device):
            main = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(main)
            for tensor in batch:
                tensor.record_stream(side)  # made on the main stream, read on this one
            with torch.cuda.stream(side):
                self._advance()
                loss = self.eager(batch)
            main.wait_stream(side)
        return loss

    def _sync_check(self, step: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, str | None]:
        """``step()`` with CUDA's sync debug mode warning on each synchronising call (``"warn"``, not
        ``"error"``: the step is taken whole, and stays eager, rather than stopped halfway through an
        optimizer update), then the mode as it was: (its loss, where the first sync was, or None)."""
        previous = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's own notice that the mode is a prototype: not a sync
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                loss = step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        syncs = [w for w in seen if "synchroniz" in str(w.message).lower()]
        if not syncs:
            return loss, None
        first = syncs[0]
        return loss, f"{str(first.message).strip()} at {first.filename}:{first.lineno}"

    def _record(self, body: Callable[[], None]) -> Callable[[], None]:
        """``body`` captured as a CUDA graph (recorded, not run) on the run's device, other threads'
        CUDA calls allowed meanwhile (``thread_local``) and the batch thread held off; returns its replay."""
        with CAPTURING, torch.cuda.device(self.device):
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream(self.device)  # the graph's own: torch's default is made once, on one device
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                body()
        return graph.replay
