"""The grid: named and TOML grids, and their expansion into checked :class:`SweepRun` s."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.presets import MAIN_JOB, MAIN_JOB_TRAINING
from probe.runs.folders import run_dir

GRID_DIR = "grids"
LIST_KEYS = ("task", "pe", "seed", "scratchpad")
EVAL_KEYS = ("eval_n", "eval_valid", "eval_last", "attended")


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its training config, its run folder, and how it is evaluated."""

    config: Any  # probe.training.train_config.TrainConfig
    path: Path
    eval_n: int | None = None
    eval_valid: int = 500
    eval_last: bool = True  # a selected run scored again at its last step, to show beside it
    attended: bool = False  # its attended distances read as it lands (Figure attended_distance), kept in its summary

    @property
    def label(self) -> str:
        """The run folder's last three parts (task folder / PE folder / seed): a PE's options are part of
        its folder, so runs that differ only in them keep apart."""
        return "/".join(self.path.parts[-3:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": str(self.path),
            "config": self.config.to_dict(),
            "eval_n": self.eval_n,
            "eval_valid": self.eval_valid,
            "eval_last": self.eval_last,
            "attended": self.attended,
        }


DEFAULT_GRID = "default"


def main_job_grid() -> dict[str, Any]:
    """The main job as a grid (:data:`probe.presets.MAIN_JOB`): every paper PE at seed 0 plus NoPE', the runs
    `probe train` trains with no arguments, so a sweep and `probe train` share (and skip) each other's runs."""
    from probe.studies.plans import seed_baseline_blocks

    training = {k: MAIN_JOB[k] for k in MAIN_JOB_TRAINING}
    return {
        "name": DEFAULT_GRID,
        "description": f"the main job: every PE on {MAIN_JOB['task']} plus NoPE', preset {MAIN_JOB['preset']}",
        "task": MAIN_JOB["task"],
        "options": dict(MAIN_JOB["options"]),
        **training,
        "block": seed_baseline_blocks([0]),
    }


def named_grids() -> list[str]:
    """Names of the grids shipped in ``probe/studies/grids/`` and the main job's (``probe sweep --grid NAME``)."""
    folder = resources.files("probe.studies") / GRID_DIR
    return sorted([DEFAULT_GRID, *(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))])


def load_grid(name_or_path: str) -> dict[str, Any]:
    """A grid from a TOML file, or the shipped grid of that name; ``default`` is the main job's
    (:func:`main_job_grid`)."""
    if name_or_path == DEFAULT_GRID:
        return main_job_grid()
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ProbeError(f"grid file {path} does not exist")
        text = path.read_text()
    else:
        shipped = resources.files("probe.studies") / GRID_DIR / f"{name_or_path}.toml"
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
    from probe.training.train_config import TrainConfig

    return tuple(
        f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("task", "pe", "seed", "task_options")
    )


def expand_grid(grid: dict[str, Any], root: str | Path) -> list[SweepRun]:
    """Every run of ``grid`` under ``root``, in grid order, checked (names, options, shapes) so that
    a mistake stops the sweep before any run starts."""
    from probe.studies.ladder import Ladder

    train_fields = train_keys()
    accepted = set(LIST_KEYS) | set(EVAL_KEYS) | set(train_fields) | {"options", "name", "description"}
    defaults = {k: v for k, v in grid.items() if k not in ("block", "ladder")}
    rule = Ladder.from_grid(grid.get("ladder"))
    if rule is not None:  # a study with a recipe rule lists its first rung; probe reproduce climbs it
        defaults.setdefault("steps", rule.steps[0])
    blocks = _blocks(grid, defaults)
    runs: dict[Path, SweepRun] = {}
    for number, block in enumerate(blocks, start=1):
        where = f"grid {grid.get('name', '?')}" + (f", block {number}" if len(blocks) > 1 else "")
        spec = _block_spec(defaults, block, accepted, train_fields, where)
        tasks, pes, seeds, scratchpads = _block_lists(spec, where)
        train = {k: spec[k] for k in train_fields if k in spec}
        for task, options in _task_options(spec, tasks, scratchpads, where):
            for pe, seed in itertools.product(pes, seeds):
                run = _grid_run(spec, root, where, task, pe, seed, options, train)
                earlier = runs.get(run.path)
                if earlier is not None and earlier.config != run.config:
                    raise ProbeError(
                        f"{where}: two runs of the grid share the folder {run.path} with different "
                        "settings (preset, steps, model ...); a run folder holds one run"
                    )
                if earlier is not None:  # a grid that lists a run twice is most likely a typo
                    raise ProbeError(f"{where}: run {run.label} is already listed earlier in the grid")
                runs[run.path] = run
    return list(runs.values())


def _blocks(grid: dict[str, Any], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid's blocks (one empty block where it has none); a grid that says nothing, or whose block
    list is empty, is refused rather than read as the default task's runs."""
    name = grid.get("name", "?")
    blocks = grid.get("block", [{}])
    if not isinstance(blocks, list):
        raise ProbeError(f"grid {name}: 'block' must be an array of tables ([[block]])")
    if not blocks:
        raise ProbeError(f"grid {name} has an empty block list: it names no run")
    if not set(defaults) - {"name", "description"} and blocks == [{}]:
        raise ProbeError(f"grid {name} is empty: give at least a task, PEs or seeds (see probe/studies/grids/)")
    return blocks


def _block_spec(
    defaults: dict[str, Any], block: dict[str, Any], accepted: set[str], train_fields: Sequence[str], where: str
) -> dict[str, Any]:
    """A block over the grid's defaults (options merged key by key), refused when it has a key no
    grid takes or a list where only one value makes sense."""
    spec = {**defaults, **block, "options": {**defaults.get("options", {}), **block.get("options", {})}}
    unknown = sorted(set(spec) - accepted)
    if unknown:
        raise ProbeError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(accepted))}")
    for key in (*train_fields, *EVAL_KEYS):
        if isinstance(spec.get(key), list):
            raise ProbeError(f"{where}: {key} must be one value (only {', '.join(LIST_KEYS)} and options may be lists)")
    return spec


def _block_lists(spec: dict[str, Any], where: str) -> tuple[list[Any], list[str], list[Any], list[Any]]:
    """A block's tasks, PEs (sets expanded), seeds and scratchpad formats, each name checked."""
    from probe.corpus import CODE_TASK
    from probe.models.registry import PAPER_PES, pe_class
    from probe.studies.plans import PE_SETS, expand_pes
    from probe.tasks import TASKS
    from probe.tasks.scratchpad import parse_format

    if "task" not in spec:  # a grid file has no default task: the flags' default (the main job's) is not its
        raise ProbeError(f'{where}: names no task; give task = "..." at the top or in the block')
    tasks, seeds = _listed(spec["task"], "task", where), _listed(spec.get("seed", 0), "seed", where)
    pes = expand_pes(_listed(spec.get("pe", list(PAPER_PES)), "pe", where))
    scratchpads = _listed(spec.get("scratchpad", "none"), "scratchpad", where)
    for task in tasks:
        if task not in TASKS and task != CODE_TASK:
            raise ProbeError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}, or {CODE_TASK} (pretraining)")
    for pe in pes:
        pe_class(pe, sets=PE_SETS)
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ProbeError(f"{where}: seed {seed!r} is not an integer")
    for fmt in scratchpads:
        try:
            parse_format(fmt)
        except ValueError as error:
            raise ProbeError(f"{where}: {error}") from None
    return tasks, pes, seeds, scratchpads


def _task_options(
    spec: dict[str, Any], tasks: list[Any], scratchpads: list[Any], where: str
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Each task of a block with each combination of its listed options and scratchpads, in grid
    order, as the run folder names them (each value as the task reads it: ``scratchpad=c`` is ``C``); an
    unknown option or value stops the sweep here."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.tasks import SCRATCHPAD_TASKS, resolved_options
    from probe.tasks.scratchpad import parse_format

    option_keys = sorted(spec["options"])
    option_values = [_listed(spec["options"][k], f"option {k}", where) for k in option_keys]
    for task, fmt, values in itertools.product(tasks, scratchpads, itertools.product(*option_values)):
        if parse_format(fmt) is not None and task not in SCRATCHPAD_TASKS:
            continue  # a scratchpad format only means something for tasks that have one
        options = dict(zip(option_keys, values))
        if task == CODE_TASK:
            yield task, CorpusSpec.from_options(options).given()  # as `probe pretrain` names its folder
            continue
        if parse_format(fmt) is not None:
            options["scratchpad"] = fmt
        yield task, resolved_options(task, options)  # an unknown option or value raises here


def _grid_run(
    spec: dict[str, Any],
    root: str | Path,
    where: str,
    task: Any,
    pe: str,
    seed: int,
    options: dict[str, Any],
    train: dict[str, Any],
) -> SweepRun:
    """One run of a block, its config checked by building its model's config (a bad shape stops
    the sweep before it starts)."""
    from probe.training.train_config import TrainConfig

    _check_values(train, where)
    try:
        config = TrainConfig(task=task, pe=pe, seed=seed, task_options=options, **train)
    except TypeError as error:
        raise ProbeError(f"{where}: a value has the wrong type ({error})") from None
    config.model_config(vocab_size=8)
    switches = {key: spec.get(key, default) for key, default in (("eval_last", True), ("attended", False))}
    for key, value in switches.items():
        if not isinstance(value, bool):
            raise ProbeError(f"{where}: {key} must be true or false, got {value!r}")
    return SweepRun(
        config,
        run_dir(root, task, pe, seed, options, config.pe_options),
        spec.get("eval_n"),
        spec.get("eval_valid", 500),
        **switches,
    )


POSITIVE_KEYS = ("steps", "batch_size")


def _check_values(train: dict[str, Any], where: str) -> None:
    """Each recipe value of plain type (number, text, switch) checked against its TrainConfig field, so a
    mistake names the grid's key, not a command-line flag the user did not pass."""
    import typing

    from probe.training.train_config import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    for key, value in train.items():
        kinds = typing.get_args(hints[key]) or (hints[key],)
        if not all(k in (int, float, str, bool, type(None)) for k in kinds) or value is None and type(None) in kinds:
            continue
        if not _fits(value, kinds):
            wanted = " or ".join(k.__name__ for k in kinds if k is not type(None))
            raise ProbeError(f"{where}: {key} must be {wanted}, got {value!r}")
        if key in POSITIVE_KEYS and value < 1:
            raise ProbeError(f"{where}: {key} in the grid must be at least 1, got {value}")


def _fits(value: Any, kinds: tuple[type, ...]) -> bool:
    """Whether ``value`` is one of ``kinds`` (an integer passes for a float; a switch is no number)."""
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, tuple(k for k in kinds if k is not bool))


def _listed(value: Any, key: str, where: str) -> list[Any]:
    """A grid value as a list; a value listed twice is refused (a typo, not a wish for one run)."""
    values = value if isinstance(value, list) else [value]
    for number, item in enumerate(values):
        if item in values[:number]:
            raise ProbeError(f"{where}: {key} lists {item!r} twice")
    return values


def grid_from_flags(
    *,
    tasks: Sequence[str] | None = None,
    pes: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    scratchpads: Sequence[str] | None = None,
    options: dict[str, list[Any]] | None = None,
    model: dict[str, Any] | None = None,
    **train: Any,
) -> dict[str, Any]:
    """The grid that command-line flags describe (repeated flags become lists). With no task given, the main
    job's (:data:`probe.presets.MAIN_JOB`: its options and recipe under the flags); with no PE or seed
    given, as ``probe train``: every PE at seed 0 plus NoPE' (:func:`probe.studies.plans.seed_baseline_blocks`)."""
    from probe.studies.plans import seed_baseline_blocks

    block: dict[str, Any] = {"name": "sweep", "task": list(tasks or [MAIN_JOB["task"]])}
    if not tasks:  # the main job, its options and recipe under the flags
        options = {**{k: [v] for k, v in MAIN_JOB["options"].items()}, **(options or {})}
        train = {**{k: MAIN_JOB[k] for k in MAIN_JOB_TRAINING}, **{k: v for k, v in train.items() if v is not None}}
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
        return {**top, "block": seed_baseline_blocks([0])}
    return block


def with_overrides(grid: dict[str, Any], train: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """``grid`` with the recipe values given on the command line (``preset``, ``steps`` ...; None keeps the
    grid's) and model overrides, which win over the grid's and every block's."""
    overrides = {k: v for k, v in train.items() if v is not None}
    for table in [grid, *grid.get("block", [])]:
        for key in overrides:
            table.pop(key, None)
        if model and "model" in table:
            table["model"] = {**table["model"], **model}
    grid.update(overrides)
    if model:
        grid["model"] = {**grid.get("model", {}), **model}
    return grid


def pick_runs(
    runs: Sequence[SweepRun],
    grid_name: str,
    *,
    tasks: Sequence[str] | None = None,
    pes: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    scratchpads: Sequence[str] | None = None,
) -> list[SweepRun]:
    """The runs of a grid with one of ``tasks``, ``pes``, ``seeds`` and ``scratchpads`` (None: any), so a
    part of a shipped grid runs alone; none matching is a ProbeError."""
    from probe.tasks.scratchpad import parse_format

    try:
        formats = None if scratchpads is None else {parse_format(f) for f in scratchpads}
    except ValueError as error:
        raise ProbeError(str(error)) from None
    picked = [
        r
        for r in runs
        if (tasks is None or r.config.task in tasks)
        and (pes is None or r.config.pe in pes)
        and (seeds is None or r.config.seed in seeds)
        and (formats is None or parse_format(r.config.task_options.get("scratchpad")) in formats)
    ]
    if not picked:
        raise ProbeError(f"no run of grid {grid_name} matches the --task/--pe/--seed/--scratchpad given")
    return picked
