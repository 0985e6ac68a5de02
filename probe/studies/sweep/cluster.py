"""Running a sweep on Ray: the worker task, the event log actor, joining a cluster, and the
driver loop that records every run in the manifest."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.studies.sweep.cost import run_state, steps_left
from probe.studies.sweep.grid import SweepRun
from probe.studies.sweep.manifest import Manifest


# -- one run, on a Ray worker ----------------------------------------------------------------
class EventLog:
    """A Ray actor that workers tell what they are doing (start, steps); the driver drains it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def push(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def drain(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events


def run_one(
    run: dict[str, Any], device: str, threads: int, evaluate: bool, log: Any = None, capture: bool | None = None
) -> dict[str, Any]:
    """:func:`run_stack` of one run."""
    return run_stack([run], device, threads, evaluate, log, capture)[0]


def run_stack(
    runs: list[dict[str, Any]], device: str, threads: int, evaluate: bool, log: Any = None, capture: bool | None = None
) -> list[dict[str, Any]]:
    """Train stacked runs, those of one batch stream (``train_stacked``; one run alone) then evaluate each
    (``evaluate_run``); a user-level failure (NaN loss, bad option) comes back as a failed result
    instead of an exception, so Ray does not retry it."""
    started = time.time()
    node = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray

        if ray.is_initialized():  # in a Ray worker; called directly, asking would start a Ray instance
            node["node_id"] = ray.get_runtime_context().get_node_id()
            node["ip"] = ray.util.get_node_ip_address()
    except Exception:
        pass

    def tell(label: str, **event: Any) -> None:
        if log is not None:
            log.push.remote({"label": label, "time": time.time(), **event})

    for run in runs:  # before the imports: a fresh worker spends seconds on them
        tell(run["label"], kind="start", node=node, time=started)
    import torch

    from probe.device import resolve_device
    from probe.training.bookkeeping import train_stacked
    from probe.training.steps import Engine
    from probe.training.train_config import TrainConfig

    torch.set_num_threads(max(1, threads))
    results = [{"node": node, "started": started} for _ in runs]
    resolved = None
    try:
        resolved = resolve_device(device)
        configs = [TrainConfig(**run["config"]) for run in runs]
        labels = {str(Path(run["path"])): run["label"] for run in runs}
        steps = {str(Path(run["path"])): config.steps for run, config in zip(runs, configs)}
        trained = train_stacked(
            [(config, Path(run["path"])) for run, config in zip(runs, configs)],
            resolved,
            engine=Engine.for_device(resolved, capture=capture),
            on_start=lambda path, step, total: tell(labels[str(path)], kind="step", step=step, total=total),
            on_step=lambda path, step, loss, speed: tell(
                labels[str(path)], kind="step", step=step, total=steps[str(path)], loss=loss
            ),
        )
    except Exception as error:  # before any run trained: every run of the task failed alike
        trained = [error] * len(runs)
    for run, result, outcome in zip(runs, results, trained):
        result.update(_finish_run(run, outcome, resolved, evaluate))
        result["finished"] = time.time()
        result["seconds"] = result["finished"] - started
    return results


def _finish_run(run: dict[str, Any], trained: Any, device: Any, evaluate: bool) -> dict[str, Any]:
    """What a sweep records of one run: its training, its evaluation, or why it failed."""
    from probe.analysis.evaluation import evaluate_run
    from probe.corpus import CODE_TASK
    from probe.runs.folders import Run
    from probe.runs.locks import RunLocked, describe
    from probe.subjects.settings import ReadSettings

    path = Path(run["path"])
    result: dict[str, Any] = {}
    try:
        if isinstance(trained, Exception):
            raise trained
        result.update(
            status=trained.status,
            steps=trained.steps,
            train_seconds=trained.seconds,
            final_loss=trained.final_loss,
            steps_per_second=trained.steps_per_second,
        )
        if trained.config.task == CODE_TASK:
            result.update(trained.held_out)
        elif evaluate:
            begin = time.time()
            report = evaluate_run(
                Run.of(path),
                ReadSettings(device=device),
                n_test=run["eval_n"],
                n_valid=run["eval_valid"],
                last_step=run.get("eval_last", True),
            )
            result.update(
                eval_seconds=time.time() - begin,
                iid_accuracy=report.iid_accuracy,
                ood_accuracy=report.ood_accuracy,
            )
        else:
            result["iid_accuracy"] = trained.iid_accuracy
        result["state"] = "done"
    except RunLocked as error:  # another `probe train`, `probe eval` or sweep has it: not a failure, not ours to retry
        result.update(state="elsewhere", error=None, held_by=describe(error.holder))
    except Exception as error:  # recorded, never retried: the same inputs would fail the same way
        message = str(error) if isinstance(error, ProbeError) else f"{type(error).__name__}: {error}"
        result.update(state="failed", error=sweep_advice(message))
    return result


def sweep_advice(message: str) -> str:
    """A training error's advice as a sweep's: it has no --force, so the way out is another folder."""
    return re.sub(
        r"(delete it or )?pass --force\b.*$", "remove the run folder or choose another --checkpoints", message
    )


def connect(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> dict[str, Any]:
    """``ray.init`` a local instance (no address) or join a cluster (``auto``, ``host:port``,
    ``ray://host:port``); returns the cluster's nodes and resources. Unreachable: ProbeError."""
    try:
        import ray
    except ImportError:
        raise ProbeError("probe sweep needs Ray: pip install 'probe[sweep]' (or pip install 'ray>=2.9')") from None
    if not ray.is_initialized():
        if address not in (None, "", "local", "auto"):
            _check_reachable(address)
        if address and address.startswith("ray://"):
            if importlib.util.find_spec("grpc") is None:  # the Ray client's transport
                raise ProbeError(
                    "ray:// addresses need the Ray client: pip install 'ray[client]' "
                    "(or run probe sweep on a cluster node with --address auto)"
                )
        kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        if address in (None, "", "local"):
            kwargs.update(num_cpus=num_cpus, num_gpus=num_gpus, object_store_memory=200 * 2**20)
        try:
            ray.init(address=None if address in (None, "", "local") else address, **kwargs)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as error:
            where = address or "a local Ray instance"
            raise ProbeError(
                f"cannot start or join Ray at {where}: "
                f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
            ) from None
        except OSError as error:  # Ray keeps a token under ~/.ray and its session under the temp folder
            if ray.is_initialized():
                ray.shutdown()
            raise ProbeError(
                f"Ray cannot write {error.filename or 'its files'}: {error.strerror or error}; give it "
                "writable folders (HOME=DIR for ~/.ray, RAY_TMPDIR=DIR for its session files)"
            ) from None
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "address": address or "local",
        "nodes": len(nodes),
        "cpus": sum(n["Resources"].get("CPU", 0) for n in nodes),
        "gpus": sum(n["Resources"].get("GPU", 0) for n in nodes),
        "max_node_cpus": max((n["Resources"].get("CPU", 0) for n in nodes), default=0),
        "max_node_gpus": max((n["Resources"].get("GPU", 0) for n in nodes), default=0),
    }


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ProbeError(f"--address {address!r} is not auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ProbeError(
            f"cannot reach a Ray cluster at {address} ({error.strerror or error}); "
            "start one with `ray start --head` or check the address"
        ) from None


def check_resources(cluster: dict[str, Any], cpus_per_run: float, gpus_per_run: float) -> None:
    """A run must fit on some node, and Ray takes fractions only below one."""
    for name, value in (("--cpus-per-run", cpus_per_run), ("--gpus-per-run", gpus_per_run)):
        if value < 0 or (value > 1 and value != int(value)):
            raise ProbeError(f"{name} {value:g}: give a fraction below 1 or a whole number")
    if cpus_per_run > cluster["max_node_cpus"]:
        raise ProbeError(
            f"--cpus-per-run {cpus_per_run:g} is more than any node of the Ray cluster has "
            f"(largest: {cluster['max_node_cpus']:g} CPUs)"
        )
    if gpus_per_run > cluster["max_node_gpus"]:
        raise ProbeError(
            f"--gpus-per-run {gpus_per_run:g} is more than any node of the Ray cluster has "
            f"(largest: {cluster['max_node_gpus']:g} GPUs)"
        )


def prepare_corpora(runs: Sequence[SweepRun]) -> None:
    """Prepare each code corpus the runs train on, once, before any worker starts (workers on
    other nodes read it from the shared checkpoints folder)."""
    from probe.corpus import CODE_TASK, CorpusSpec, prepare_corpus
    from probe.corpus.prepared import corpus_of_run

    folders = {corpus_of_run(run.path): run.config.task_options for run in runs if run.config.task == CODE_TASK}
    for folder, options in folders.items():
        prepare_corpus(CorpusSpec.from_options(options), folder)


def execute(
    runs: Sequence[SweepRun],
    manifest: Manifest,
    *,
    cpus_per_run: float = 1,
    gpus_per_run: float = 0,
    max_retries: int = 3,
    evaluate: bool = True,
    capture: bool | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    poll: float = 0.25,
) -> Manifest:
    """Run every unfinished run as a Ray task (Ray must be connected, see :func:`connect`);
    finished ones are marked done without starting anything. Failures are recorded and the others
    go on; a worker that dies is retried by Ray (``max_retries``) and resumes from its last state."""
    prepare_corpora(runs)
    todo = _mark_plan(runs, manifest, evaluate)
    if on_event:
        on_event(
            {
                "kind": "plan",
                "todo": [r.label for r in todo],
                "total_steps": {r.label: r.config.steps for r in todo},
                "left": {r.label: steps_left(r) for r in todo},
            }
        )
    if not todo:
        return manifest
    import ray

    device = "cuda" if gpus_per_run > 0 else "cpu"
    log = ray.remote(num_cpus=0)(EventLog).remote()
    ray.get(log.drain.remote())  # up before any run starts: a busy node can take seconds to start it,
    # and until it is up every progress event waits behind it
    task = ray.remote(run_stack).options(
        num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=max_retries, retry_exceptions=False
    )
    threads = max(1, int(cpus_per_run))
    refs = {
        task.remote([run.to_dict() for run in group], device, threads, evaluate, log, capture): group
        for group in tasks(todo, device)
    }
    running = {run.label for run in todo}
    try:
        while refs:
            ray.wait(list(refs), num_returns=1, timeout=poll)
            events = ray.get(log.drain.remote())
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            finished = [(run, result) for ref in ready for run, result in _results(ref, refs.pop(ref))]
            for item in in_order(events, finished):
                _relay(item, manifest, running, on_event)
    except KeyboardInterrupt:
        _cancel(refs, manifest)
        raise
    return manifest


def _mark_plan(runs: Sequence[SweepRun], manifest: Manifest, evaluate: bool) -> list[SweepRun]:
    """Mark finished runs done and the others pending in the manifest (written once), so a
    re-run sweep starts only what is left; returns the runs left to do."""
    todo = []
    for run in runs:
        state = run_state(run, evaluate)
        if state == "done":
            if manifest.entries[run.label]["state"] != "done":
                manifest.update(run.label, write=False, state="done", error=None)
        else:
            manifest.pending(run.label)
            todo.append(run)
    manifest.write()
    return todo


def _count_attempt(manifest: Manifest, label: str, node: dict[str, Any], started: float) -> None:
    """Count an attempt once, whether its start event or its result is seen first."""
    entry = manifest.entries[label]
    if not any(a["node"].get("pid") == node.get("pid") and a["started"] == started for a in entry.get("history", [])):
        manifest.update(
            label,
            write=False,
            attempts=entry.get("attempts", 0) + 1,
            history=[*entry.get("history", []), {"node": node, "started": started}],
        )


def in_order(events: list[dict[str, Any]], finished: list[tuple[SweepRun, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One poll's news (the workers' events drained, then the results ready by then) as one stream in the
    order it happened on the workers' clocks, each result a ``finish``. Results are collected after the
    events are drained, and a task's result is ready before its CPU goes to another task, so a run that
    started on a CPU a finished run freed is relayed after that finish."""
    results = [{"kind": "finish", "label": run.label, "time": r["finished"], "result": r} for run, r in finished]
    return sorted([*events, *results], key=lambda item: item["time"])


def _relay(
    item: dict[str, Any], manifest: Manifest, running: set[str], on_event: Callable[[dict[str, Any]], None] | None
) -> None:
    """Record one piece of news in the manifest and pass it on; news of a run whose result is already
    in only counts its attempt."""
    label = item["label"]
    if item["kind"] == "start":
        _count_attempt(manifest, label, item["node"], item["time"])
    if label not in running:
        return  # late news of a run whose result is already in
    if item["kind"] == "finish":
        running.discard(label)
        result = item["result"]
        if "node" in result:
            _count_attempt(manifest, label, result["node"], result["started"])
        item = {"kind": "finish", "label": label, "entry": manifest.update(label, **result)}
    elif item["kind"] == "start":
        manifest.update(label, state="running", node=item["node"], started=item["time"], error=None)
    if on_event:
        on_event(item)


def _results(ref: Any, group: list[SweepRun]) -> list[tuple[SweepRun, dict[str, Any]]]:
    """A finished task's result per run, or each run failed when Ray gave up on the worker (it died more
    often than ``max_retries`` allows)."""
    import ray
    from ray.exceptions import RayError

    try:
        return list(zip(group, ray.get(ref)))
    except RayError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        failed = {"state": "failed", "error": f"{type(error).__name__}: {first}", "finished": time.time()}
        return [(run, dict(failed)) for run in group]


def _cancel(refs: dict[Any, list[SweepRun]], manifest: Manifest) -> None:
    """On Ctrl-C: cancel the tasks still running and mark their runs interrupted, so the
    manifest says what a re-run has to redo."""
    import ray

    for ref, group in refs.items():
        ray.cancel(ref, force=True)
        for run in group:
            manifest.update(run.label, write=False, state="interrupted")
    manifest.write()


def tasks(runs: Sequence[SweepRun], device: str) -> list[list[SweepRun]]:
    """The Ray tasks that train ``runs``: on a GPU, the runs of one batch stream (a study's PEs at a
    seed) in one task that trains them stacked (``probe.training.parallel.default_stack``); one run a task
    otherwise."""
    from probe.training.parallel import default_stack
    from probe.training.stacked import stack_key

    if not default_stack(device):
        return [[run] for run in runs]
    groups: dict[tuple, list[SweepRun]] = {}
    for run in runs:
        groups.setdefault(stack_key(run.config), []).append(run)
    return list(groups.values())
