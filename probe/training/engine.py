"""How a run's steps execute: eagerly, compiled (``torch.compile``), and on a GPU captured as one CUDA
graph per run. None of these changes what a step computes beyond float rounding; each is proved
equal to the eager step by a test on the CPU where it can run there (captured graphs need a GPU).

At the paper's scale a step is about 1,500 tokens through 12 x 768 (bench/paper_scale.py): on an H100
it is bound by its ~2,000 kernel launches, not by arithmetic. A captured step replays them as one
launch. Capture needs what the rest of the loop provides: one batch shape for the whole run
(:class:`probe.tasks.batches.Geometry`), no host sync inside a step (losses are read every ``log_every``
steps), and the learning rate on the device (:class:`CapturedStep` indexes a table of the schedule
with a step counter it keeps there).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from probe.errors import ProbeError

WARMUP_STEPS = 3  # eager steps before capture: the optimizer's state, cuBLAS's workspace, autograd's buffers


@dataclass(frozen=True)
class Engine:
    """``compile``: the model's forward through ``torch.compile``; ``capture``: each step replayed
    as a CUDA graph (GPU only). Either one trains on one fixed batch geometry."""

    compile: bool = False
    capture: bool = False

    @classmethod
    def for_device(cls, device: torch.device, *, compile: bool | None = None, capture: bool | None = None) -> Engine:
        """The default for ``device``: eager on a CPU (fixed shapes would only add padding there);
        captured on a GPU. ``compile`` and ``capture`` force either way."""
        if capture and device.type != "cuda":
            raise ProbeError("CUDA graphs need a GPU; leave out --capture on a CPU")
        return cls(
            compile=bool(compile),
            capture=device.type == "cuda" if capture is None else capture,
        )

    @property
    def fixed_shapes(self) -> bool:
        return self.compile or self.capture


class CapturedStep:
    """One run's training step as a CUDA graph: ``step(batch)`` copies the batch into the graph's
    input buffers and replays it, returning the step's loss (a device scalar, valid until the next
    replay). The first :data:`WARMUP_STEPS` calls run ``eager`` (real steps, on a side stream, as
    capture requires); the next one captures and replays. If capturing fails (an op the graph cannot
    hold), the step says so in one line on stderr and runs eagerly from then on (``failed``).

    What is CUDA's is in :meth:`_warm_up` and :meth:`_record`; the rest (input buffers, the schedule
    on the device, which call takes which step) is tested on a CPU with those two replaced."""

    def __init__(
        self,
        eager: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        schedule: list[float],
        first_step: int,
        device: torch.device,
        hold: Callable[[], object] = lambda: None,
    ):
        self.eager, self.optimizer, self.device, self.hold = eager, optimizer, device, hold
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
        self.failed: str | None = None  # why capturing failed, if it did

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
            return self._warm_up(batch)
        self.inputs = tuple(t.clone() for t in batch)
        self.optimizer.zero_grad(set_to_none=True)  # gradients are the graph's own, made while capturing
        try:
            replay = self._record(self._body)
        except RuntimeError as error:  # nothing captured ran: the step is still to take
            self.failed = str(error).strip().splitlines()[0] if str(error).strip() else "?"
            print(f"probe: capturing the training step failed ({self.failed}); it runs eagerly", file=sys.stderr)
            torch.cuda.synchronize(self.device)
            self._advance()
            return self.eager(batch)
        self.held, self.replay = self.hold(), replay
        self.replay()  # capturing records the step; this runs it
        return self.loss

    def _warm_up(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """An eager step on a side stream, as the steps before a capture must be."""
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

    def _record(self, body: Callable[[], None]) -> Callable[[], None]:
        """``body`` captured as a CUDA graph (recorded, not run); returns its replay."""
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        return graph.replay
