"""Several training runs at once on one machine: one process per run, one thread each
(:func:`train_parallel`), or runs that read one batch stream as one program (:func:`train_by_stack`).

On a CPU, tiny models use a second core poorly inside one run (small matrices, many small ops),
so ``probe train`` runs independent runs side by side instead: with 2 cores, two runs of one
thread each train about twice as fast in total as one run of two threads. Every run trains on one
thread (:data:`~probe.training.bookkeeping.TRAIN_THREADS`), so its weights do not depend on ``--jobs``.
Each worker calls :func:`probe.training.bookkeeping.train_run`, the same code a single run uses; progress
comes back on a queue. A process that trains keeps the memory its steps free mapped for the next step
(:mod:`probe.training.memory`).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import queue as queue_module
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as wait_any
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from probe.training.bookkeeping import TRAIN_THREADS, RunResult
from probe.training.memory import freed_memory_kept, keep_freed_memory
from probe.training.steps import CaptureFailed, Engine
from probe.training.train_config import TrainConfig

if TYPE_CHECKING:
    import torch


@dataclass
class RunFailure:
    path: Path
    config: TrainConfig
    error: str


def default_stack(device_type: str) -> bool:
    """Whether runs that can be stacked are by default: on a GPU, where one program replaying
    each member's captured step keeps the card busy; not on a CPU, where side-by-side processes
    already use every core and a fixed batch geometry would only add padding."""
    return device_type == "cuda"


def default_jobs(n_runs: int, device_type: str) -> int:
    """One run per core on a CPU; one at a time on a GPU (it is the bottleneck, not Python)."""
    if device_type != "cpu":
        return 1
    return max(1, min(n_runs, os.cpu_count() or 1))


def _worker(
    config: TrainConfig, path: str, device: str, force: bool, wait: bool, threads: int, events, engine: Engine
) -> RunResult:
    import torch

    from probe.runs.locks import say_waiting
    from probe.training.bookkeeping import train_run

    global _SPOILT
    if _SPOILT:  # the pool hands this process on to the next run: it trains nothing more
        raise CaptureFailed(f"{path} not trained: {_SPOILT}")
    torch.set_num_threads(threads)
    try:
        return train_run(
            config,
            Path(path),
            torch.device(device),
            force=force,
            wait=wait,
            on_wait=lambda holder: say_waiting(path, holder),
            on_start=lambda step, total: events.put((path, "start", step, None, None)),
            on_step=lambda step, loss, speed: events.put((path, "step", step, loss, speed)),
            engine=engine,
        )
    except CaptureFailed as error:
        _SPOILT = f"this worker's CUDA state was spoilt by a failed capture ({error})"
        raise


_SPOILT = ""  # in a worker process: why it must train nothing more (a capture broke in it)


def train_parallel(
    runs: Sequence[tuple[TrainConfig, Path]],
    device: str,
    *,
    jobs: int,
    force: bool = False,
    wait: bool = False,
    on_event: Callable[[str, str, int, float | None, float | None], None] | None = None,
    engine: Engine | None = None,
    on_done: Callable[[int], None] | None = None,
    beside: Sequence[Callable[[], None]] = (),
) -> list[RunResult | RunFailure]:
    """Train ``runs`` with ``jobs`` worker processes; results in the order of ``runs``. ``on_done(i)`` is
    called as run ``i`` ends, trained or failed, while the workers go on with the others: a study evaluates a
    scenario whose runs have all ended while the next scenario's train. ``beside`` is more of the caller's work
    done while the workers train (a study evaluating the runs a sitting before it had trained). Both are done in
    order, one item at a time, on a thread of the caller's (:class:`_CallersWork`), so the workers' progress
    keeps reaching ``on_event`` here while an item takes minutes.

    A run that fails with a ProbeError (NaN loss, a damaged state file) is returned as a
    :class:`RunFailure` and the others go on (a broken CUDA graph capture stops them all); Ctrl-C
    reaches every worker, each of which keeps its last state for the next ``probe train`` to resume.
    """
    threads = TRAIN_THREADS
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        events = manager.Queue()
        results: dict[int, RunResult | RunFailure] = {}
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=keep_freed_memory) as pool:
            futures = {
                pool.submit(_worker, config, str(path), device, force, wait, threads, events, engine or Engine()): i
                for i, (config, path) in enumerate(runs)
            }
            pending, callers = set(futures), _CallersWork(beside)
            try:
                while callers.busy() or pending:  # busy() first: an item's exception is raised at once
                    done, pending = wait_any(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    if not pending and not done:
                        callers.wait(0.2)
                    _drain(events, on_event)
                    for future in done:
                        index = futures[future]
                        results[index] = _outcome(future, *runs[index])
                        if on_done:
                            callers.put(functools.partial(on_done, index))
            except BaseException:  # a broken capture, Ctrl-C, a failing callback: start nothing more
                for other in pending:
                    other.cancel()
                raise
            finally:
                callers.close()
            _drain(events, on_event)
    return [results[i] for i in range(len(runs))]


class _CallersWork:
    """The caller's items, called in order on a thread of their own while the main thread reports the workers'
    progress: a study's evaluation of a scenario takes minutes, and a log silent that long reads as a stopped
    study. An item's exception is raised in the main thread (:meth:`busy`), and no later item runs. A daemon
    thread, so Ctrl-C does not wait for the item in hand (what a study writes, it writes atomically)."""

    def __init__(self, items: Sequence[Callable[[], None]]) -> None:
        self.todo: queue_module.Queue[Callable[[], None] | None] = queue_module.Queue()
        self.idle = threading.Condition()
        self.open = 0  # items put and not yet returned
        self.failure: BaseException | None = None
        for item in items:
            self.put(item)
        self.thread = threading.Thread(target=self._work, name="probe-callers-work", daemon=True)
        self.thread.start()

    def put(self, item: Callable[[], None]) -> None:
        with self.idle:
            self.open += 1
        self.todo.put(item)

    def busy(self) -> bool:
        """Whether an item is still to return; raises the exception an item raised."""
        with self.idle:
            if self.failure is not None:
                raise self.failure
            return self.open > 0

    def wait(self, timeout: float) -> None:
        """Until an item returns or fails, ``timeout`` seconds at most."""
        with self.idle:
            self.idle.wait(timeout)

    def close(self) -> None:
        """No more items: the thread ends after the one in hand."""
        self.todo.put(None)

    def _work(self) -> None:
        while (item := self.todo.get()) is not None:
            try:
                item()
            except BaseException as error:  # handed to the main thread; nothing after it runs
                with self.idle:
                    self.failure = error
                    self.idle.notify_all()
                return
            with self.idle:
                self.open -= 1
                self.idle.notify_all()


def _outcome(future, config: TrainConfig, path: Path) -> RunResult | RunFailure:
    """A finished worker's result, or its ProbeError as a :class:`RunFailure`; a broken capture is raised."""
    from probe.errors import ProbeError

    try:
        return future.result()
    except CaptureFailed:  # its worker's CUDA state is spoilt: stop, as in one process
        raise
    except ProbeError as error:
        return RunFailure(Path(path), config, str(error))


def _drain(events, on_event) -> None:
    while True:
        try:
            event = events.get_nowait()
        except queue_module.Empty:
            return
        if on_event:
            on_event(*event)


def train_by_stack(
    runs: Sequence[tuple[TrainConfig, Path]],
    device: torch.device | str,
    *,
    engine: Engine,
    force: bool = False,
    wait: bool = False,
    on_event: Callable[[str, str, int, float | None, float | None], None] | None = None,
    on_wait: Callable[[Path, dict], None] | None = None,
) -> list[RunResult | RunFailure]:
    """Train ``runs`` in this process, those of one :func:`~probe.training.stacked.stack_key` stacked
    (:func:`~probe.training.bookkeeping.train_stacked`); results in the order of ``runs``, a run that
    failed (NaN loss, another's folder) as a :class:`RunFailure` while the others go on."""
    from probe.errors import ProbeError
    from probe.training.bookkeeping import train_stacked
    from probe.training.stacked import stack_key

    groups: dict[tuple, list[int]] = {}
    for i, (config, _) in enumerate(runs):
        groups.setdefault(stack_key(config), []).append(i)
    results: dict[int, RunResult | RunFailure] = {}
    for members in groups.values():
        outcomes = train_stacked(
            [runs[i] for i in members],
            device,
            engine=engine,
            force=force,
            wait=wait,
            on_wait=on_wait,
            on_start=(lambda path, step, total: on_event(str(path), "start", step, None, None)) if on_event else None,
            on_step=(lambda path, step, loss, speed: on_event(str(path), "step", step, loss, speed))
            if on_event
            else None,
        )
        for i, outcome in zip(members, outcomes):
            config, path = runs[i]
            results[i] = RunFailure(Path(path), config, str(outcome)) if isinstance(outcome, ProbeError) else outcome
    return [results[i] for i in range(len(runs))]


OnEvent = Callable[[str, str, int, float | None, float | None], None]  # (run folder, start|step, step, loss, tok/s)


def train_runs(
    runs: Sequence[tuple[TrainConfig, Path]],
    device: torch.device | str,
    *,
    stack: bool | None = None,
    jobs: int | None = None,
    compile: bool = False,
    capture: bool | None = None,
    force: bool = False,
    wait: bool = False,
    on_event: OnEvent | None = None,
    on_wait: Callable[[Path, dict], None] | None = None,
) -> list[RunResult | RunFailure]:
    """Train every (config, folder) of ``runs`` the way the device trains best: stacked, as one program
    (``stack``; default on a GPU), else ``jobs`` side by side (default one per core on a CPU), else one after
    another. ``capture``: each step a CUDA graph (default on a GPU; :class:`~probe.training.steps.Engine`).
    Every folder is checked writable and free first, so a problem is one line before any work; the
    result (or failure) of each run, in order. What `probe train` and `probe pretrain` call."""
    from probe.errors import ProbeError
    from probe.runs.locks import check_free
    from probe.training.bookkeeping import check_writable

    if jobs is not None and jobs < 1:
        raise ProbeError(f"--jobs must be at least 1, got {jobs}")
    stack = default_stack(device.type) if stack is None else stack
    if stack and jobs not in (None, 1):
        raise ProbeError("--stack trains its runs in one process; leave out --jobs, or pass --no-stack")
    jobs = 1 if stack else jobs or default_jobs(len(runs), device.type)
    engine = Engine.for_device(device, compile=compile, capture=capture)
    for _, path in runs:
        check_writable(path)
        if not wait:
            check_free(path)  # train_run takes the lock itself
    event = on_event or (lambda *_: None)
    if stack:
        return train_by_stack(
            list(runs), device, engine=engine, force=force, wait=wait, on_event=event, on_wait=on_wait
        )
    if jobs > 1:
        return train_parallel(list(runs), str(device), jobs=jobs, force=force, wait=wait, on_event=event, engine=engine)
    with freed_memory_kept(device.type):  # its steps' activations stay mapped
        alone = len(runs) == 1
        return [_in_turn(config, path, device, engine, force, wait, event, on_wait, alone) for config, path in runs]


def _in_turn(
    config: TrainConfig,
    path: Path,
    device: torch.device,
    engine: Engine,
    force: bool,
    wait: bool,
    event: OnEvent,
    on_wait: Callable[[Path, dict], None] | None,
    alone: bool,
) -> RunResult | RunFailure:
    """One run of those trained one after another; its ProbeError is its :class:`RunFailure`, and the runs
    after it still train. Raised instead: a broken capture (it stops them all), and the error of a run
    ``alone`` (no other run to go on: the command's one line, exit 2)."""
    from probe.errors import ProbeError
    from probe.training.bookkeeping import train_run

    try:
        return train_run(
            config,
            path,
            device,
            force=force,
            wait=wait,
            on_wait=None if on_wait is None else lambda holder: on_wait(path, holder),
            on_start=lambda step, total: event(str(path), "start", step, None, None),
            on_step=lambda step, loss, speed: event(str(path), "step", step, loss, speed),
            engine=engine,
        )
    except ProbeError as error:
        if alone or isinstance(error, CaptureFailed):
            raise
        return RunFailure(Path(path), config, str(error))
