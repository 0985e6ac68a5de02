"""Sweeps: many ``probe train`` + ``probe eval`` runs from one grid, executed as Ray tasks.

A grid (a TOML file, a named grid shipped in ``probe/grids/``, or command-line flags) expands to
:class:`SweepRun` s. Each run is one Ray task that calls :func:`probe.train.train_run` and then
:func:`probe.evaluation.evaluate_run`, exactly what ``probe train`` and ``probe eval`` call, into
the same run folder (``probe.runs.run_dir``), so a sweep never trains differently from
``probe train`` and a rerun skips finished runs and resumes interrupted ones. A manifest (JSON)
records each run's state, attempts, timings, node and error as it happens.

Grid format (TOML). Top-level keys are defaults for every ``[[block]]``; a grid without blocks is
one block. ``task``, ``pe``, ``seed``, ``scratchpad`` and every value of ``options`` may be lists:
a block is the cross product of its lists. Scratchpad formats other than ``none`` apply only to
tasks that have a scratchpad. ``model`` holds model overrides (``n_layers = 1``); the other keys
are :class:`probe.train.TrainConfig` fields (``preset``, ``steps``, ``lr`` ...) plus ``eval_n``
(test examples evaluated, default the whole test split) and ``eval_valid`` (IID examples).
Task ``code`` is pretraining on a code corpus (``probe pretrain``; its options are
:class:`probe.corpus.CorpusSpec`'s): its corpus is prepared once before any run starts, and its
runs are validated by held-out perplexity (``probe perplexity`` reads them side by side)::

    name = "mine"
    preset = "tiny"
    pe = ["nope", "t5"]
    seed = [0, 1]

    [[block]]
    task = "copy"
    options = { variant = ["count", "random"] }

    [[block]]
    task = "addition"
    scratchpad = ["none", "full"]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import math
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from probe.errors import ProbeError
from probe.runs import run_dir

GRID_DIR = "grids"
LIST_KEYS = ("task", "pe", "seed", "scratchpad")
EVAL_KEYS = ("eval_n", "eval_valid")
CATEGORIES = {  # Figure mrr-per-category: the paper's three groups of tasks
    "primitive": ("copy", "reverse"),
    "mathematical & reasoning": ("addition", "polynomial", "sorting", "summation", "parity", "lego"),
    "classic length generalization": ("scan", "pcfg"),
}
STATES = ("pending", "running", "done", "failed", "interrupted", "elsewhere")  # elsewhere: another process holds it


# -- the grid --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its training config, its run folder, and how it is evaluated."""

    config: Any  # probe.train.TrainConfig
    path: Path
    eval_n: int | None = None
    eval_valid: int = 500

    @property
    def label(self) -> str:
        return f"{self.path.parent.parent.name}/{self.config.pe}/seed{self.config.seed}"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "path": str(self.path), "config": self.config.to_dict(),
                "eval_n": self.eval_n, "eval_valid": self.eval_valid}


def named_grids() -> list[str]:
    """Names of the grids shipped in ``probe/grids/`` (``probe sweep --grid NAME``)."""
    folder = resources.files("probe") / GRID_DIR
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_grid(name_or_path: str) -> dict[str, Any]:
    """A grid from a TOML file, or the shipped grid of that name."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ProbeError(f"grid file {path} does not exist")
        text = path.read_text()
    else:
        shipped = resources.files("probe") / GRID_DIR / f"{name_or_path}.toml"
        if not shipped.is_file():
            raise ProbeError(f"unknown grid {name_or_path!r}; give a .toml file or one of {', '.join(named_grids())}")
        text = shipped.read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the `sweep` extra installs tomli
        import tomli as tomllib
    try:
        grid = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ProbeError(f"grid {name_or_path} is not valid TOML: {error}") from None
    grid.setdefault("name", path.stem)
    return grid


def train_keys() -> tuple[str, ...]:
    """The TrainConfig fields a grid may set (all but the ones the grid's lists decide)."""
    from probe.train import TrainConfig

    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("task", "pe", "seed", "task_options"))


def expand_grid(grid: dict[str, Any], root: str | Path) -> list[SweepRun]:
    """Every run of ``grid`` under ``root``, in grid order, checked (names, options, shapes) so that
    a mistake stops the sweep before any run starts."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.models.registry import PAPER_PES, PE_KINDS
    from probe.tasks import SCRATCHPAD_TASKS, TASKS, get as get_task
    from probe.tasks.scratchpad import parse_format
    from probe.train import TrainConfig

    train_fields = train_keys()
    accepted = set(LIST_KEYS) | set(EVAL_KEYS) | set(train_fields) | {"options", "name", "description"}
    defaults = {k: v for k, v in grid.items() if k != "block"}
    blocks = grid.get("block") or [{}]
    if not isinstance(blocks, list):
        raise ProbeError("grid: 'block' must be an array of tables ([[block]])")
    runs: dict[Path, SweepRun] = {}
    checked: set[str] = set()
    for number, block in enumerate(blocks, start=1):
        where = f"grid {grid.get('name', '?')}" + (f", block {number}" if len(blocks) > 1 else "")
        spec = {**defaults, **block, "options": {**defaults.get("options", {}), **block.get("options", {})}}
        unknown = sorted(set(spec) - accepted)
        if unknown:
            raise ProbeError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(accepted))}")
        for key in (*train_fields, *EVAL_KEYS):
            if isinstance(spec.get(key), list):
                raise ProbeError(f"{where}: {key} must be one value (only {', '.join(LIST_KEYS)} and options may be lists)")
        tasks, pes, seeds = _listed(spec.get("task", "scan")), _listed(spec.get("pe", list(PAPER_PES))), _listed(spec.get("seed", 0))
        scratchpads = _listed(spec.get("scratchpad", "none"))
        for task in tasks:
            if task not in TASKS and task != CODE_TASK:
                raise ProbeError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}, or {CODE_TASK} (pretraining)")
        for pe in pes:
            if pe not in PE_KINDS:
                raise ProbeError(f"unknown positional encoding {pe!r}; choose from {', '.join(PE_KINDS)}")
        for seed in seeds:
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ProbeError(f"{where}: seed {seed!r} is not an integer")
        for fmt in scratchpads:
            try:
                parse_format(fmt)
            except ValueError as error:
                raise ProbeError(f"{where}: {error}") from None
        option_keys = sorted(spec["options"])
        option_values = [_listed(spec["options"][k]) for k in option_keys]
        train = {k: spec[k] for k in train_fields if k in spec}
        for task, fmt, values in itertools.product(tasks, scratchpads, itertools.product(*option_values)):
            if parse_format(fmt) is not None and task not in SCRATCHPAD_TASKS:
                continue  # a scratchpad format only means something for tasks that have one
            options = dict(zip(option_keys, values))
            if task == CODE_TASK:
                options = CorpusSpec.from_options(options).given()  # as `probe pretrain` names its folder
            if parse_format(fmt) is not None:
                options["scratchpad"] = fmt
            key = json.dumps([task, options], sort_keys=True)
            if key not in checked and task != CODE_TASK:
                get_task(task, **options)  # an unknown option or value raises here
                checked.add(key)
            for pe, seed in itertools.product(pes, seeds):
                try:
                    config = TrainConfig(task=task, pe=pe, seed=seed, task_options=options, **train)
                except TypeError as error:
                    raise ProbeError(f"{where}: a value has the wrong type ({error})") from None
                config.model_config(vocab_size=8)
                run = SweepRun(config, run_dir(root, task, pe, seed, options, config.pe_options),
                               spec.get("eval_n"), spec.get("eval_valid", 500))
                earlier = runs.get(run.path)
                if earlier is not None and earlier.config != config:
                    raise ProbeError(f"{where}: two runs of the grid share the folder {run.path} with different "
                                     "settings (preset, steps, model ...); a run folder holds one run")
                runs.setdefault(run.path, run)
    return list(runs.values())


def _listed(value: Any) -> list[Any]:
    return list(dict.fromkeys(value)) if isinstance(value, list) else [value]


def grid_from_flags(*, tasks: Sequence[str] | None = None, pes: Sequence[str] | None = None,
                    seeds: Sequence[int] | None = None, scratchpads: Sequence[str] | None = None,
                    options: dict[str, list[Any]] | None = None, model: dict[str, Any] | None = None,
                    **train: Any) -> dict[str, Any]:
    """The grid that command-line flags describe (repeated flags become lists). With no PE or seed
    given, as ``probe train``: every PE at seed 0 plus NoPE seed 1 (NoPE') on each task."""
    block: dict[str, Any] = {"name": "sweep", "task": list(tasks or ["scan"])}
    if pes:
        block["pe"] = list(pes)
    block["seed"] = list(seeds or [0])
    if scratchpads:
        block["scratchpad"] = list(scratchpads)
    if options:
        block["options"] = {k: v if len(v) > 1 else v[0] for k, v in options.items()}
    if model:
        block["model"] = dict(model)
    block.update({k: v for k, v in train.items() if v is not None})
    if not pes and not seeds:
        top = {k: v for k, v in block.items() if k != "seed"}
        return {**top, "block": [{"seed": 0}, {"pe": "nope", "seed": 1}]}
    return block


# -- what is left to do ----------------------------------------------------------------------
def run_state(run: SweepRun, evaluate: bool = True) -> str:
    """``done`` (trained and evaluated), ``evaluate`` (trained), ``resume`` (interrupted), ``new``, or
    ``conflict`` (trained with other settings: running it fails with the line that says which)."""
    from probe.corpus import CODE_TASK
    from probe.evaluation import EVAL
    from probe.models.checkpoint import read_checkpoint_config
    from probe.train import STATE, is_complete, settings_differ

    if is_complete(run.path):
        if settings_differ(read_checkpoint_config(run.path).get("training", {}), run.config.to_dict()):
            return "conflict"
        code = run.config.task == CODE_TASK  # validated by held-out perplexity when it was trained
        return "done" if not evaluate or code or (run.path / EVAL).is_file() else "evaluate"
    return "resume" if (run.path / STATE).is_file() else "new"


def steps_left(run: SweepRun) -> int:
    """Training steps a run still has to take (from its resumable state, if any)."""
    from safetensors import safe_open

    from probe.train import STATE, is_complete

    if is_complete(run.path):
        return 0
    state = run.path / STATE
    if state.is_file():
        try:
            with safe_open(str(state), "pt") as handle:
                return max(0, run.config.steps - json.loads(handle.metadata()["probe"])["step"])
        except Exception:
            return run.config.steps
    return run.config.steps


# -- cost ------------------------------------------------------------------------------------
def mean_batch_tokens(run: SweepRun, sample: int = 256) -> float:
    """Tokens in one training batch of ``run`` (batches are length-sorted, so padding is small)."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.tasks import Tokenizer, get as get_task

    if run.config.task == CODE_TASK:
        return run.config.batch_size * CorpusSpec.from_options(run.config.task_options).context

    task = get_task(run.config.task, **run.config.task_options)
    tokenizer = Tokenizer.for_task(task)
    examples = task.examples("train", n=sample, seed=0)
    lengths = [len(tokenizer.encode_example(example)[0]) for example in examples]
    return run.config.batch_size * sum(lengths) / len(lengths)


def measure_tokens_per_second(run: SweepRun, device: str = "cpu", steps: int = 5, threads: int = 1,
                              max_batch: int | None = 8) -> float:
    """Training throughput of ``run``'s model (tokens/s, the median step) from a few real steps of
    ``Trainer`` in a scratch folder (the first step is a warm-up), with the torch threads a sweep
    worker gets. On CPU the batch is capped at ``max_batch``: tokens/s barely depends on it there,
    and a dry run of ``base`` must not take minutes."""
    import torch

    from probe.sources import training_source
    from probe.train import Trainer, resolve_device

    resolved = resolve_device(device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    batch = run.config.batch_size if resolved.type == "cuda" or max_batch is None else min(run.config.batch_size, max_batch)
    config = dataclasses.replace(run.config, steps=steps + 1, batch_size=batch, log_every=1, checkpoint_every=10**9)
    speeds: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            trainer = Trainer(config, Path(scratch), resolved, source=training_source(config.task, config.task_options, config.seed, run.path))
            trainer.train(lambda step, loss, tokens_per_s: speeds.append(tokens_per_s) if step > 1 else None)
    finally:
        torch.set_num_threads(previous_threads)
    return sorted(speeds)[len(speeds) // 2]


def estimate_cost(runs: Sequence[SweepRun], *, device: str = "cpu", tokens_per_second: float | None = None,
                  measure_steps: int = 5, threads: int = 1, on_measure: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Seconds each run still needs: its steps left x tokens per batch / measured tokens per second.

    Throughput is measured once per model shape (preset + model overrides) on the first run of
    that shape, or taken from ``tokens_per_second`` (to price hardware you do not have here).
    Evaluation time is not included.
    """
    speeds: dict[str, float] = {}
    tokens: dict[str, float] = {}
    per_run: list[float] = []
    for run in runs:
        shape = json.dumps([run.config.preset, run.config.model], sort_keys=True)
        folder = json.dumps([run.config.task, run.config.task_options, run.config.batch_size], sort_keys=True)
        left = steps_left(run)
        if left == 0:
            per_run.append(0.0)
            continue
        if shape not in speeds:
            if tokens_per_second is not None:
                speeds[shape] = tokens_per_second
            else:
                if on_measure:
                    on_measure(f"measuring {run.config.preset} {run.config.model or ''} on {run.label}")
                speeds[shape] = measure_tokens_per_second(run, device, measure_steps, threads)
        if folder not in tokens:
            tokens[folder] = mean_batch_tokens(run)
        per_run.append(left * tokens[folder] / speeds[shape])
    return {"seconds": per_run, "total_seconds": sum(per_run), "tokens_per_second": speeds,
            "source": "given" if tokens_per_second is not None else f"measured on {device}"}


def wall_seconds(seconds: Iterable[float], slots: int) -> float:
    """Wall time of running jobs of these lengths on ``slots`` parallel slots, longest first."""
    loads = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


# -- the manifest ----------------------------------------------------------------------------
class Manifest:
    """The sweep's record on disk: one entry per run (state, attempts, timings, node, error),
    rewritten atomically after every change of state."""

    def __init__(self, path: str | Path, name: str, runs: Sequence[SweepRun]):
        self.path = Path(path)
        previous: dict[str, dict[str, Any]] = {}
        self.ray: dict[str, Any] = {}
        if self.path.is_file():
            try:
                old = json.loads(self.path.read_text())
                previous = {e["label"]: e for e in old.get("runs", [])}
                self.ray = old.get("ray", {})
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                previous = {}
        self.name = name
        self.created = time.time()
        self.entries: dict[str, dict[str, Any]] = {}
        for run in runs:
            entry = {"label": run.label, "path": str(run.path), "task": run.path.parent.parent.name,
                     "pe": run.config.pe, "seed": run.config.seed, "state": "pending", "attempts": 0,
                     "node": None, "started": None, "finished": None, "seconds": None, "error": None}
            old = previous.get(run.label, {})
            entry.update({k: old[k] for k in ("attempts", "node", "started", "finished", "seconds", "error",
                                              "train_seconds", "eval_seconds", "status", "iid_accuracy",
                                              "ood_accuracy", "heldout_loss", "heldout_perplexity", "history",
                                              "held_by") if k in old})
            self.entries[run.label] = entry

    def update(self, label: str, write: bool = True, **fields: Any) -> dict[str, Any]:
        self.entries[label].update(fields)
        if write:
            self.write()
        return self.entries[label]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for entry in self.entries.values():
            counts[entry["state"]] = counts.get(entry["state"], 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "created": self.created, "updated": time.time(), "ray": self.ray,
                "counts": self.counts(), "runs": list(self.entries.values())}

    def write(self) -> None:
        from probe.files import atomic_write_json

        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.to_dict())


def manifest_path(root: str | Path, name: str) -> Path:
    return Path(root) / f"sweep-{name}.json"


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


def run_one(run: dict[str, Any], device: str, threads: int, evaluate: bool, log: Any = None) -> dict[str, Any]:
    """Train (``train_run``) then evaluate (``evaluate_run``) one run; a user-level failure (NaN loss,
    bad option) comes back as a failed result instead of an exception, so Ray does not retry it."""
    label, path = run["label"], Path(run["path"])
    started = time.time()
    node = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray

        if ray.is_initialized():  # in a Ray worker; called directly, asking would start a Ray instance
            node["node_id"] = ray.get_runtime_context().get_node_id()
            node["ip"] = ray.util.get_node_ip_address()
    except Exception:
        pass

    def tell(**event: Any) -> None:
        if log is not None:
            log.push.remote({"label": label, **event})

    tell(kind="start", node=node, time=started)  # before the imports: a fresh worker spends seconds on them
    import torch

    from probe.corpus import CODE_TASK
    from probe.evaluation import evaluate_run
    from probe.locks import RunLocked, describe
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs import Run
    from probe.train import TrainConfig, resolve_device, train_run

    torch.set_num_threads(max(1, threads))
    result: dict[str, Any] = {"node": node, "started": started}
    try:
        config = TrainConfig(**run["config"])
        trained = train_run(config, path, resolve_device(device),
                            on_start=lambda step, total: tell(kind="step", step=step, total=total),
                            on_step=lambda step, loss, speed: tell(kind="step", step=step, total=config.steps, loss=loss))
        result.update(status=trained.status, steps=trained.steps, train_seconds=trained.seconds,
                      final_loss=trained.final_loss, steps_per_second=trained.steps_per_second)
        if config.task == CODE_TASK:
            result.update(trained.held_out)
        elif evaluate:
            begin = time.time()
            report = evaluate_run(Run(path, read_checkpoint_config(path)), n_test=run["eval_n"],
                                  n_valid=run["eval_valid"], device=resolve_device(device))
            result.update(eval_seconds=time.time() - begin, iid_accuracy=report["iid_accuracy"],
                          ood_accuracy=report["ood_accuracy"])
        else:
            result["iid_accuracy"] = trained.iid_accuracy
        result["state"] = "done"
    except RunLocked as error:  # another `probe train`, `probe eval` or sweep has it: not a failure, not ours to retry
        result.update(state="elsewhere", error=None, held_by=describe(error.holder))
    except Exception as error:  # recorded, never retried: the same inputs would fail the same way
        result.update(state="failed", error=str(error) if isinstance(error, ProbeError) else f"{type(error).__name__}: {error}")
    result["finished"] = time.time()
    result["seconds"] = result["finished"] - started
    return result


# -- the sweep on Ray ------------------------------------------------------------------------
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
                raise ProbeError("ray:// addresses need the Ray client: pip install 'ray[client]' "
                                 "(or run probe sweep on a cluster node with --address auto)")
        kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        if address in (None, "", "local"):
            kwargs.update(num_cpus=num_cpus, num_gpus=num_gpus, object_store_memory=200 * 2**20)
        try:
            ray.init(address=None if address in (None, "", "local") else address, **kwargs)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as error:
            where = address or "a local Ray instance"
            raise ProbeError(f"cannot start or join Ray at {where}: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
        except OSError as error:  # Ray keeps a token under ~/.ray and its session under the temp folder
            if ray.is_initialized():
                ray.shutdown()
            raise ProbeError(f"Ray cannot write {error.filename or 'its files'}: {error.strerror or error}; give it "
                             "writable folders (HOME=DIR for ~/.ray, RAY_TMPDIR=DIR for its session files)") from None
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": address or "local", "nodes": len(nodes),
            "cpus": sum(n["Resources"].get("CPU", 0) for n in nodes),
            "gpus": sum(n["Resources"].get("GPU", 0) for n in nodes),
            "max_node_cpus": max((n["Resources"].get("CPU", 0) for n in nodes), default=0),
            "max_node_gpus": max((n["Resources"].get("GPU", 0) for n in nodes), default=0)}


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ProbeError(f"--address {address!r} is not auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ProbeError(f"cannot reach a Ray cluster at {address} ({error.strerror or error}); "
                         "start one with `ray start --head` or check the address") from None


def check_resources(cluster: dict[str, Any], cpus_per_run: float, gpus_per_run: float) -> None:
    """A run must fit on some node, and Ray takes fractions only below one."""
    for name, value in (("--cpus-per-run", cpus_per_run), ("--gpus-per-run", gpus_per_run)):
        if value < 0 or (value > 1 and value != int(value)):
            raise ProbeError(f"{name} {value:g}: give a fraction below 1 or a whole number")
    if cpus_per_run > cluster["max_node_cpus"]:
        raise ProbeError(f"--cpus-per-run {cpus_per_run:g} is more than any node of the Ray cluster has "
                         f"(largest: {cluster['max_node_cpus']:g} CPUs)")
    if gpus_per_run > cluster["max_node_gpus"]:
        raise ProbeError(f"--gpus-per-run {gpus_per_run:g} is more than any node of the Ray cluster has "
                         f"(largest: {cluster['max_node_gpus']:g} GPUs)")


def execute(runs: Sequence[SweepRun], manifest: Manifest, *, cpus_per_run: float = 1, gpus_per_run: float = 0,
            max_retries: int = 3, evaluate: bool = True,
            on_event: Callable[[dict[str, Any]], None] | None = None, poll: float = 0.25) -> Manifest:
    """Run every unfinished run as a Ray task (Ray must be connected, see :func:`connect`);
    finished ones are marked done without starting anything. Failures are recorded and the others
    go on; a worker that dies is retried by Ray (``max_retries``) and resumes from its last state."""
    prepare_corpora(runs)
    todo = []
    for run in runs:
        state = run_state(run, evaluate)
        if state == "done":
            if manifest.entries[run.label]["state"] != "done":
                manifest.update(run.label, write=False, state="done", error=None)
        else:
            manifest.update(run.label, write=False, state="pending", error=None)
            todo.append(run)
    manifest.write()
    if on_event:
        on_event({"kind": "plan", "todo": [r.label for r in todo], "total_steps": {r.label: r.config.steps for r in todo},
                  "left": {r.label: steps_left(r) for r in todo}})
    if not todo:
        return manifest
    import ray
    from ray.exceptions import RayError

    device = "cuda" if gpus_per_run > 0 else "cpu"
    log = ray.remote(num_cpus=0)(EventLog).remote()
    ray.get(log.drain.remote())  # up before any run starts: a busy node can take seconds to start it,
    # and until it is up every progress event waits behind it
    task = ray.remote(run_one).options(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=max_retries,
                                       retry_exceptions=False)
    threads = max(1, int(cpus_per_run))
    refs = {task.remote(run.to_dict(), device, threads, evaluate, log): run for run in todo}
    running = {run.label for run in todo}

    def attempt(label: str, node: dict[str, Any], started: float) -> None:
        """Count an attempt once, whether its start event or its result is seen first."""
        entry = manifest.entries[label]
        if not any(a["node"].get("pid") == node.get("pid") and a["started"] == started for a in entry.get("history", [])):
            manifest.update(label, write=False, attempts=entry.get("attempts", 0) + 1,
                            history=[*entry.get("history", []), {"node": node, "started": started}])

    def drain() -> None:
        for event in ray.get(log.drain.remote()):
            label = event["label"]
            if event["kind"] == "start":
                attempt(label, event["node"], event["time"])
            if label not in running:
                continue  # late news of a run whose result is already in
            if event["kind"] == "start":
                manifest.update(label, state="running", node=event["node"], started=event["time"], error=None)
            if on_event:
                on_event(event)

    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=poll)
            drain()
            for ref in ready:
                run = refs.pop(ref)
                running.discard(run.label)
                try:
                    result = ray.get(ref)
                    attempt(run.label, result["node"], result["started"])
                except RayError as error:  # the worker died more often than max_retries allows
                    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                    result = {"state": "failed", "error": f"{type(error).__name__}: {first}", "finished": time.time()}
                entry = manifest.update(run.label, **result)
                if on_event:
                    on_event({"kind": "finish", "label": run.label, "entry": entry})
    except KeyboardInterrupt:
        for ref, run in refs.items():
            ray.cancel(ref, force=True)
            manifest.update(run.label, write=False, state="interrupted")
        manifest.write()
        raise
    return manifest


# -- the report ------------------------------------------------------------------------------
def prepare_corpora(runs: Sequence[SweepRun]) -> None:
    """Prepare each code corpus the runs train on, once, before any worker starts (workers on
    other nodes read it from the shared checkpoints folder)."""
    from probe.corpus import CODE_TASK, CorpusSpec, prepare_corpus
    from probe.corpus.prepared import corpus_of_run

    folders = {corpus_of_run(run.path): run.config.task_options for run in runs if run.config.task == CODE_TASK}
    for folder, options in folders.items():
        prepare_corpus(CorpusSpec.from_options(options), folder)


def category(task: str, options: dict[str, Any]) -> str:
    if options.get("scratchpad"):
        return "with scratchpad"
    return next((name for name, tasks in CATEGORIES.items() if task in tasks), "other")


def report(runs: Sequence[SweepRun]) -> dict[str, Any]:
    """The paper's aggregate over the runs' eval.json files: accuracy against length per task and
    PE (mean over seeds; Figure showcase) and each PE's mean rank overall and per category of
    tasks (Figures teaser and mrr-per-category)."""
    return aggregate({run.label: run.path for run in runs})


def find_manifests(root: str | Path) -> list[Path]:
    """The sweep manifests (``sweep-NAME.json``) in a checkpoints root, by name."""
    return sorted(p for p in Path(root).glob("sweep-*.json") if p.is_file())


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A manifest as :class:`Manifest` wrote it (ProbeError if it is not one)."""
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
        if not all(isinstance(e["label"], str) for e in manifest["runs"]):
            raise TypeError
    except OSError as error:
        raise ProbeError(f"cannot read sweep manifest {path}: {error.strerror}") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ProbeError(f"{path} is not a sweep manifest (corrupt JSON or no list of runs)") from None
    return manifest


def manifest_report(path: str | Path) -> dict[str, Any]:
    """:func:`report` of the runs a manifest lists, with the manifest's run counts by state
    (``states``). Run folders are found from the labels, relative to the manifest's folder (the
    checkpoints root), so a sweep's folder can be moved or copied from a cluster and still be read."""
    path = Path(path)
    manifest = read_manifest(path)
    summary = aggregate({e["label"]: path.parent / e["label"] for e in manifest["runs"]})
    return {**summary, "states": manifest.get("counts", {})}


def aggregate(runs: dict[str, Path]) -> dict[str, Any]:
    """:func:`report` of run folders by label; a run without a readable eval.json counts as missing."""
    from probe.evaluation import mean_ranks, mean_reciprocal_ranks, read_eval

    evaluated, missing, pretrained = [], [], []
    for label, folder in runs.items():
        result = read_eval(folder)
        if result is not None:
            evaluated.append(result)
        elif (code := _pretrained(folder)) is not None:
            pretrained.append(code)
        else:
            missing.append(label)
    curves: dict[str, dict[str, dict[str, Any]]] = {}
    for r in evaluated:
        curve = curves.setdefault(r["task_folder"], {}).setdefault(
            r["pe"], {"seeds": [], "by_length": {}, "seen": {}, "iid": [], "ood": []})
        curve["seeds"].append(r["seed"])
        curve["iid"].append(r["iid_accuracy"])
        if r["ood_accuracy"] is not None:
            curve["ood"].append(r["ood_accuracy"])
        for bucket in r["buckets"]:
            curve["by_length"].setdefault(bucket["length"], []).append(bucket["accuracy"])
            curve["seen"][bucket["length"]] = bucket["seen"]
    rows = []
    for folder, by_pe in curves.items():
        for pe, c in by_pe.items():
            lengths = sorted(c["by_length"])
            rows.append({
                "task_folder": folder, "pe": pe, "seeds": sorted(c["seeds"]),
                "iid_accuracy": _mean(c["iid"]), "ood_accuracy": _mean(c["ood"]) if c["ood"] else None,
                "lengths": lengths, "accuracy": [_mean(c["by_length"][n]) for n in lengths],
                "seen": [c["seen"][n] for n in lengths],
            })
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in evaluated:
        groups.setdefault(category(r["task"], r.get("task_options", {})), []).append(r)
    plain = [r for r in evaluated if not r.get("task_options", {}).get("scratchpad")]
    ranks = {"all tasks": mean_ranks(plain), **{name: mean_ranks(group) for name, group in groups.items()}}
    reciprocal = {"all tasks": mean_reciprocal_ranks(plain),
                  **{name: mean_reciprocal_ranks(group) for name, group in groups.items()}}
    return {"runs": len(runs), "evaluated": len(evaluated), "missing": missing, "aggregate": rows, "pretrained": pretrained,
            "mean_rank": {name: value for name, value in ranks.items() if value},
            "mean_reciprocal_rank": {name: value for name, value in reciprocal.items() if value}}


def _pretrained(folder: Path) -> dict[str, Any] | None:
    """A finished code run's held-out perplexity at its training context, or None."""
    from probe.models.checkpoint import read_checkpoint_config, task_name

    try:
        config = read_checkpoint_config(folder)
    except ProbeError:
        return None
    metrics = config.get("metrics", {})
    if task_name(config) != "code" or "heldout_perplexity" not in metrics:
        return None
    return {"run": str(folder), "pe": config["pe"], "seed": config.get("training", {}).get("seed", 0),
            "heldout_perplexity": metrics["heldout_perplexity"]}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def report_figures(summary: dict[str, Any], out: str | Path) -> list[Path]:
    """Write :func:`report_figure_objects` under ``out`` (HTML, and PNG where kaleido can)."""
    from probe.plots import write_figure

    written: list[Path] = []
    for name, figure in report_figure_objects(summary).items():
        written += write_figure(figure, Path(out) / name)
    return written


def report_figure_objects(summary: dict[str, Any]) -> dict[str, Any]:
    """{file stem: plotly figure}: accuracy against length per task (one line per PE, mean over
    seeds) as ``accuracy_<task folder>``, and the bars per category of the mean reciprocal rank
    (``mean_reciprocal_rank``, the paper's figures) and of the plain mean rank (``mean_rank``)."""
    import plotly.graph_objects as go

    from probe.models.registry import PE_LABELS
    from probe.plots import accuracy_by_length, pe_color

    figures: dict[str, Any] = {}
    by_folder: dict[str, list[dict[str, Any]]] = {}
    for row in summary["aggregate"]:
        by_folder.setdefault(row["task_folder"], []).append(row)
    for folder, rows in by_folder.items():
        curves = [{"label": f"{PE_LABELS.get(r['pe'], r['pe'])} ({len(r['seeds'])} seed{'s' * (len(r['seeds']) > 1)})",
                   "pe": r["pe"], "lengths": r["lengths"], "accuracy": r["accuracy"]} for r in rows]
        seen = [n for r in rows for n, s in zip(r["lengths"], r["seen"]) if s]
        figures[f"accuracy_{folder}"] = accuracy_by_length(curves, (min(seen), max(seen)) if seen else None,
                                                           f"{folder}: exact match by length (mean over seeds)")
    for key, title, axis in (
            ("mean_reciprocal_rank", "mean reciprocal rank by OOD accuracy (the paper's figures; higher is better)",
             "mean reciprocal rank (1 = always first)"),
            ("mean_rank", "mean rank by OOD accuracy (1 = best; ties share)", "mean rank (lower is better)")):
        ranks = summary.get(key) or {}
        if not ranks:
            continue
        figure = go.Figure()
        for pe in sorted({pe for scores in ranks.values() for pe in scores}):
            names = [name for name, scores in ranks.items() if pe in scores]
            figure.add_trace(go.Bar(x=names, y=[ranks[n][pe] for n in names], name=PE_LABELS.get(pe, pe),
                                    marker_color=pe_color(pe)))
        figure.update_layout(title=title, yaxis_title=axis, barmode="group", template="plotly_white")
        figures[key] = figure
    return figures
