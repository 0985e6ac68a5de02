"""What the kit measures, each through probe's own training path (``Trainer``, ``train_stack``,
``train_stacked``, ``Engine.for_device``): the captured step against the eager one on the first steps
(:func:`smoke`), the member-step rate of the study's PEs stacked (:func:`rate_slice`), and a
whole run of the paper's SCAN study, selected on IID validation and scored teacher-forced on the test
split (:func:`whole_run`). Each reports through ``put(key, value)`` as soon as a number exists."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from probe.analysis.evaluation import split_accuracy
from probe.errors import ProbeError
from probe.models.checkpoint import load_checkpoint, read_checkpoint_config
from probe.reference import paper_summary
from probe.runs.folders import recorded_precision
from probe.tasks import Tokenizer
from probe.tasks import get as get_task
from probe.tasks.decoding import teacher_forced_exact_match, teacher_forced_examples
from probe.training.bookkeeping import train_stacked
from probe.training.loop import Trainer
from probe.training.sources import TaskSource
from probe.training.stacked import train_stack
from probe.training.steps import Engine
from probe.training.train_config import TrainConfig

DATASET = "scan-mdlen_tr25_ts48"  # the authors' name for SCAN's length split (probe.reference)
SMOKE_STEPS = 10  # 3 eager warm-ups, the capture, then replays
SMOKE_TOLERANCE = 1e-3  # relative: the same kernels replayed agree far closer; bf16 rounding is ~4e-3
Put = Callable[..., None]  # put(*keys, value=...)


class TimeUp(Exception):
    """Raised from a step callback to end training at a chosen moment (a slice, the deadline)."""


def paper_config(
    pe: str,
    preset: str,
    seed: int,
    steps: int,
    *,
    log_every: int,
    eval_every: int | None = None,
    precision: str = "auto",
):
    """A run of the paper's SCAN study as the authors trained it (their protocol on their split, packed
    rows), writing no resumable state: nothing on the device outlives the call. ``precision`` is the
    run's numerics (``auto``: bf16 autocast on a GPU; ``tf32``: float32, its products in TF32)."""
    return TrainConfig(
        task="scan",
        task_options={"split": "paper"},
        pe=pe,
        seed=seed,
        preset=preset,
        steps=steps,
        protocol="authors",
        pack=True,
        checkpoint_every=steps,
        log_every=log_every,
        eval_every=eval_every,
        precision=precision,
    )


def scan_source(seed: int) -> TaskSource:
    return TaskSource("scan", {"split": "paper"}, seed, authors=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def smoke(pes: list[str], device: torch.device, folder: Path, put: Put, say: Callable[[str], None]) -> None:
    """Per PE at ``tiny``: a run on the device's default engine (captured on a GPU) beside the same run
    eager, on the same batches, one program: whether capture held, and how far the first steps' losses
    and the weights after them differ. On a CPU both are eager (the harness, not capture, is checked)."""
    source = scan_source(0)
    for pe in pes:
        began = time.perf_counter()
        try:
            result = _smoke_one(pe, device, folder / pe, source)
        except Exception as error:  # noqa: BLE001 - one PE's failure is a result; the next PE still runs
            result = {"error": f"{type(error).__name__}: {error}"}
        put(pe, value=result | {"seconds": time.perf_counter() - began})
        say(f"smoke {pe}: " + (result.get("error") or _smoke_line(result)))


def _smoke_line(result: dict[str, Any]) -> str:
    engine = result["engine"]
    held = "captured" if engine["captured"] else f"not captured ({engine.get('capture_failed', 'eager by default')})"
    return (
        f"{held}; losses differ by {result['max_relative_loss_difference']:.1e}, weights by "
        f"{result['max_weight_difference_over_largest_weight']:.1e}: {'equal' if result['equal'] else 'NOT EQUAL'}"
    )


def _smoke_one(pe: str, device: torch.device, folder: Path, source: TaskSource) -> dict[str, Any]:
    config = paper_config(pe, "tiny", 0, SMOKE_STEPS, log_every=1, eval_every=0)
    engines = {"default": Engine.for_device(device), "eager": Engine()}
    trainers = [Trainer(config, _folder(folder / name), device, source=source, engine=e) for name, e in engines.items()]
    losses: dict[str, list[float]] = {name: [] for name in engines}
    callbacks = [lambda step, loss, speed, name=name: losses[name].append(loss) for name in engines]
    outcomes = train_stack(trainers, callbacks)
    failures = [str(o) for o in outcomes if isinstance(o, ProbeError)]
    if failures:
        raise RuntimeError("; ".join(failures))
    captured, eager = (t.model.state_dict() for t in trainers)
    scale = max(float(w.abs().max()) for w in eager.values())
    weights = max(float((captured[k].float() - eager[k].float()).abs().max()) for k in eager) / scale
    loss_diff = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses["default"], losses["eager"])]
    return {
        "engine": trainers[0].step_engine,
        "losses": losses,
        "max_relative_loss_difference": max(loss_diff),
        "max_weight_difference_over_largest_weight": weights,
        "equal": max(loss_diff) <= SMOKE_TOLERANCE and weights <= SMOKE_TOLERANCE,
    }


def rate_slice(
    pes: list[str], args: Any, device: torch.device, capture: bool, folder: Path, put: Put, say: Callable[[str], None]
) -> None:
    """The member-step rate of ``pes`` stacked at ``args.preset`` for ``args.slice_s`` seconds
    after their warm-up (captured or eager), with no evaluation inside the timed window; then one
    selection evaluation, timed, and the start-up cost: what the planner needs."""
    began = time.perf_counter()
    source = scan_source(args.seed)
    configs = [  # selection's first evaluation falls at the run's end: none inside the timed window
        paper_config(
            pe,
            args.preset,
            args.seed,
            args.steps,
            log_every=args.log_every,
            eval_every=args.steps,
            precision=args.precision,
        )
        for pe in pes
    ]
    engine = Engine.for_device(device, capture=capture)
    trainers = [Trainer(c, _folder(folder / c.pe), device, source=source, engine=engine) for c in configs]
    built = time.perf_counter()
    put("build_s", value=built - began)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    marks: list[tuple[float, int]] = []

    def on_lead_step(step: int, loss: float, speed: float) -> None:
        marks.append((time.perf_counter(), step))
        counted = [m for m in marks if m[1] >= 2 * args.log_every]  # past the warm-up and the capture
        rate = _rate(counted, len(trainers))
        what = "captured" if capture else "eager"
        say(f"rate slice ({what}): step {step}, loss {loss:.3f}, {rate or 0:.1f} member-steps/s")
        if counted and marks[-1][0] - counted[0][0] >= args.slice_s:
            raise TimeUp

    failed: dict[str, str] = {}
    try:
        outcomes = train_stack(trainers, [on_lead_step] + [None] * (len(trainers) - 1))
        failed = {t.config.pe: str(o) for t, o in zip(trainers, outcomes) if isinstance(o, ProbeError)}
    except TimeUp:  # the slice's time is up (a short --steps may end it first)
        pass
    if not marks:
        raise RuntimeError(f"the slice logged no step (failed: {failed or 'none'})")
    counted = [m for m in marks if m[1] >= 2 * args.log_every]
    put(
        "result",
        value={
            "members": len(trainers),
            "pes": pes,
            "member_steps_per_s": _rate(counted, len(trainers)),
            "timed_s": counted[-1][0] - counted[0][0] if len(counted) > 1 else None,
            "steps_each": marks[-1][1],
            "first_logged_step_s": marks[0][0] - built,  # build excluded: warm-up, capture, the first steps
            "engines": {t.config.pe: t.step_engine for t in trainers},
            "failed": failed,
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        },
    )
    put("evaluation", value=_time_evaluation(trainers[0], device, source))


def _folder(path: Path) -> Path:
    """A run folder for a Trainer built here (``train_stacked`` makes its own)."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def _rate(marks: list[tuple[float, int]], members: int) -> float | None:
    """Member-steps per second between the first and last of ``marks`` (time, step of each member)."""
    if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
        return None
    return members * (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])


def _time_evaluation(trainer: Trainer, device: torch.device, source: TaskSource) -> dict[str, Any]:
    """One selection evaluation (teacher-forced exact match on the IID validation examples), timed,
    and the sizes that scale it to the test split's scoring."""
    trainer.model.eval()
    sync(device)
    began = time.perf_counter()
    teacher_forced_exact_match(trainer.model, trainer.validation, device=device, precision=trainer.forward_precision)
    sync(device)
    return {
        "seconds": time.perf_counter() - began,
        "valid_examples": len(trainer.validation),
        "test_examples": len(source.task.examples("test", seed=0)),
    }


def whole_run(
    pe: str,
    args: Any,
    device: torch.device,
    capture: bool,
    folder: Path,
    put: Put,
    say: Callable[[str], None],
    deadline: float,
) -> None:
    """One run of the paper's study from nothing to its selected checkpoint (``train_stacked``: the
    authors' protocol, selection on IID validation), then scored; its progress, its selection and its
    test numbers are put as each exists. Training past ``deadline`` (epoch seconds) stops, keeping
    the validations it made."""
    config = paper_config(pe, args.preset, args.seed, args.steps, log_every=args.log_every, precision=args.precision)
    path = folder / pe
    began = time.perf_counter()
    last_put = [0.0]

    def on_step(run: Path, step: int, loss: float, speed: float) -> None:
        say(f"{pe}: step {step}/{config.steps}, loss {loss:.3f}, {step / (time.perf_counter() - began):.1f} steps/s")
        if time.perf_counter() - last_put[0] >= 5:  # the record stays current without rewriting every step
            last_put[0] = time.perf_counter()
            put("progress", value={"step": step, "loss": loss, "seconds": time.perf_counter() - began,
                                   "validations": _validations(path)})  # fmt: skip
        if time.time() > deadline:
            raise TimeUp

    engine = Engine.for_device(device, capture=capture)
    put("engine", value={"compile": engine.compile, "capture": engine.capture})
    put("forward_precision", value=config.forward_precision(device.type))
    try:
        (result,) = train_stacked([(config, path)], device, engine=engine, on_step=on_step)
    except TimeUp:
        put("progress", value={"stopped": "out of time", "seconds": time.perf_counter() - began,
                               "validations": _validations(path)})  # fmt: skip
        return
    if isinstance(result, ProbeError):
        raise RuntimeError(str(result))
    trained = read_checkpoint_config(path)
    put(
        "selection",
        value={
            "train_seconds": result.seconds,
            "steps_per_s": result.steps_per_second,
            "selected_step": trained["training"].get("selected_step"),
            "best_valid_exact_match": trained["training"].get("selection", {}).get("best_valid_exact_match"),
            "step_engine": trained["metrics"].get("step_engine"),
            "validations": _validations(path),
        },
    )
    say(f"{pe}: trained in {result.seconds:.0f} s; scoring the test split")
    put("test", value=score(path, device, config.eval_examples) | {"paper": paper_summary(DATASET).get(pe)})
    put("wall_s", value=time.perf_counter() - began)


def _validations(path: Path) -> list[list[float]]:
    """[step, valid exact match] of every selection evaluation the run has logged so far."""
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if '"valid_exact_match"' in line]
    return [[row["step"], row["valid_exact_match"]] for row in rows]


def score(path: Path, device: torch.device, n_valid: int) -> dict[str, Any]:
    """The published (selected) checkpoint on the held-out IID examples and the whole test split, one
    teacher-forced pass per batch (greedy exact match but for float ties)."""
    began = time.perf_counter()
    model = load_checkpoint(path, device=device)
    meta = read_checkpoint_config(path)
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    examples = task.examples("valid", n=n_valid, seed=0) + task.examples("test", seed=0)
    result = teacher_forced_examples(model, tokenizer, examples, device=device, precision=recorded_precision(meta))
    iid, ood = split_accuracy(task, result)
    return {
        "iid_accuracy": iid,
        "ood_accuracy": ood,
        "ood_by_length": {
            str(length): k / n for length, (n, k) in result.by_length().items() if not task.is_seen(length)
        },
        "n_examples": len(examples),
        "seconds": time.perf_counter() - began,
    }
