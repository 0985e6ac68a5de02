"""What every benchmark in bench/ shares: flags, the machine, interleaved timing, the SCAN training
batch and training steps, and the JSON writer (bench/results/<name>_<device>.json).

Shared machines are noisy, so variants are never timed one after the other: each repeat times
every variant once, in an order rotated by one per repeat (A B C, B C A, C A B, ...), and ratios
are taken per repeat (variants timed seconds apart see the same load), then the median.
On CPU the primary clock is the process's CPU time (``time.process_time``): other jobs on the
box stretch wall time by however long they hold the cores, but barely move the CPU time a step
needs. Wall time is recorded beside it. On CUDA the clock is wall time after a synchronize.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from probe.device import cpu_computes_bf16
from probe.tasks import Tokenizer
from probe.tasks import get as get_task
from probe.tasks.batches import encode

RESULTS = Path(__file__).resolve().parent / "results"


def add_common_args(parser: argparse.ArgumentParser, repeats: int | None) -> None:
    """--device, --threads, --repeats (``None``: chosen by ``training_repeats``) and --seed."""
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: two threads on a loaded 2-core box stall)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=repeats,
        help=f"interleaved rounds; medians over these (default {repeats or '40; 3 for base on CPU'})",
    )
    parser.add_argument("--seed", type=int, default=0)


def training_repeats(args: argparse.Namespace, device: torch.device) -> tuple[int, int]:
    """(repeats, steps per variant per repeat) for training-step benchmarks: one step per turn, so a
    round over the variants lasts seconds and each ratio compares steps taken under the same load;
    many rounds, except for ``base`` on a CPU, where one step takes seconds on its own."""
    slow = args.preset == "base" and device.type == "cpu"
    return args.repeats or (3 if slow else 40), args.steps or 1


def setup(args: argparse.Namespace) -> torch.device:
    """Threads and device from the flags; exits with one line if CUDA is asked for but absent."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible to torch; use --device cpu")
    return device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def machine(device: torch.device | str) -> dict[str, object]:
    """The machine a benchmark ran on, for its JSON."""
    from probe.device import cpu_model  # here, not above: an A/B's worker imports this file beside an older probe

    device = torch.device(device)
    info: dict[str, object] = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_bf16": cpu_computes_bf16(),  # bf16 arithmetic of its own: what --precision auto reads on a CPU
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def header(benchmark: str, what: str, device: torch.device | str, load_before: tuple[float, float, float]) -> dict:
    """The fields every result JSON opens with: which benchmark, what it times, the command line,
    the machine, and the load average before and after (the box is shared)."""
    return {
        "benchmark": benchmark,
        "what": what,
        "command": "python " + " ".join(sys.argv),
        "device": str(device),
        "machine": machine(device),
        "load_average_1_5_15min": {"before": load_before, "after": os.getloadavg()},
    }


def clock(device: torch.device) -> str:
    """The clock ratios are taken on: ``cpu`` (process CPU time) on CPU, ``wall`` on CUDA."""
    return "wall" if device.type == "cuda" else "cpu"


def time_once(fn: Callable[[], object], calls: int, device: torch.device) -> tuple[float, float]:
    """(wall, process CPU) seconds per call of ``fn`` over ``calls`` back-to-back calls."""
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def interleave(
    variants: dict[str, Callable[[], object]],
    *,
    repeats: int,
    calls: int,
    warmup: int,
    device: torch.device,
    progress: bool = True,
) -> dict[str, dict[str, list[float]]]:
    """{"wall" | "cpu": {name: [seconds per call, one per repeat]}}, the variants interleaved in
    rotated order."""
    names = list(variants)
    for name in names:
        for _ in range(warmup):
            variants[name]()
    sync(device)
    runs: dict[str, dict[str, list[float]]] = {"wall": {n: [] for n in names}, "cpu": {n: [] for n in names}}
    primary = clock(device)
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            wall, cpu = time_once(variants[name], calls, device)
            runs["wall"][name].append(wall)
            runs["cpu"][name].append(cpu)
        if progress:
            line = "  ".join(f"{n} {runs[primary][n][-1] * 1e3:.1f}" for n in names)
            print(f"  repeat {r + 1}/{repeats} ({primary} ms): {line}", flush=True)
    return runs


def time_training_steps(
    variants: dict[str, Callable[[], object]], *, preset: str, repeats: int, calls: int, device: torch.device
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, int]], int]:
    """(timings as :func:`interleave` returns them, operators per step of each variant, warm-up steps):
    the timing core every training-step benchmark shares."""
    print(f"{preset}: {len(variants)} variants, {calls} step(s) each per repeat, {repeats} repeats", flush=True)
    warmup = 3 if device.type == "cuda" else 1  # CUDA: allocator, cuBLAS heuristics, autocast caches
    timings = interleave(variants, repeats=repeats, calls=calls, warmup=warmup, device=device)
    ops = {name: dispatched_ops(run) for name, run in variants.items()}  # one more step each, in steady state
    return timings, ops, warmup


def ask_worker(process: subprocess.Popen, what: str):
    """A worker process's JSON answer to the line ``what``."""
    process.stdin.write(what + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def medians(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(r) for name, r in runs.items()}


def paired_ratio(runs: dict[str, list[float]], name: str, baseline: str) -> dict[str, object]:
    """Median of the per-repeat ratios name / baseline, with the spread and the ratio of medians."""
    ratios = [a / b for a, b in zip(runs[name], runs[baseline])]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "ratio_of_medians": statistics.median(runs[name]) / statistics.median(runs[baseline]),
        "per_repeat": ratios,
    }


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view:
            self.views += 1
        else:
            self.kernels += 1
        return func(*args, **(kwargs or {}))


def dispatched_ops(fn: Callable[[], object]) -> dict[str, int]:
    """Operators one call of ``fn`` dispatches below autograd (forward, backward, optimizer):
    ``kernels`` compute (on a GPU each is a launch), ``views`` only reshape. Independent of the
    batch size, so a device-independent measure of per-step host overhead."""
    with _OpCounter() as counter:
        fn()
    return {"kernels": counter.kernels, "views": counter.views}


def scan_batch(batch: int, length: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``batch`` SCAN training sequences of exactly ``length`` tokens (<bos> source <sep> target
    <eos>), the loss mask over next-token predictions, and the vocabulary size."""
    task = get_task("scan")
    tokenizer = Tokenizer.for_task(task)
    data = encode(task.examples("train", seed=seed), tokenizer)
    rows = (data.lengths == length).nonzero().flatten()
    if len(rows) == 0:
        sys.exit(
            f"--length {length}: no SCAN training sequence has that many tokens "
            f"(they have {int(data.lengths.min())} to {int(data.lengths.max())})"
        )
    generator = torch.Generator().manual_seed(seed)
    index = rows[torch.randint(len(rows), (batch,), generator=generator)]
    tokens, mask = data.batch(index)
    return tokens.to(device), mask.to(device), len(tokenizer)


def make_optimizer(model: torch.nn.Module, device: torch.device, lr: float = 1e-4) -> torch.optim.AdamW:
    """AdamW as ``probe.training.loop.Trainer`` builds it: decay on matrices only, fused on CUDA."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.05},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        **({"fused": True} if device.type == "cuda" else {"foreach": True}),
    )


def training_step(
    model: torch.nn.Module, tokens: torch.Tensor, mask: torch.Tensor, device: torch.device
) -> Callable[[], None]:
    """One step as ``probe.training.loop.Trainer`` takes it: target-token loss (bf16 autocast on CUDA),
    backward, gradient clipping at 1.0, AdamW. No dropout (the ``base`` recipe adds 0.1 through hooks)."""
    from probe.training.loop import target_loss

    optimizer = make_optimizer(model, device)
    model.train()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = target_loss(model, tokens, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def streamed_training_step(
    model: torch.nn.Module,
    stream,
    data,
    *,
    sites: str,
    p: float,
    pack: bool = False,
    bf16: bool = False,
    attention_dropout: bool = True,
    lr: float = 1e-4,
) -> Callable[[], None]:
    """One CPU training step per call on the next batch of ``stream``, as ``probe.training.loop.Trainer``
    takes it: the batch cut (packed rows with ``pack``), dropout ``p`` at ``sites``, the target-token
    loss (under bf16 autocast with ``bf16``), backward, clipping at 1.0, AdamW. ``attention_dropout``
    False leaves the attention probabilities undropped under the authors' sites (a diagnostic)."""
    from probe.training.dropout import dropout
    from probe.training.loop import target_loss

    optimizer = make_optimizer(model, torch.device("cpu"), lr=lr)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def step() -> None:
        _, _, index = next(stream)
        batch = data.packed_batch(index) if pack else data.batch(index)
        model.train()
        with dropout(model, p, sites), autocast:
            if not attention_dropout:
                for block in model.blocks:
                    block.attn.attn_dropout = 0.0
            loss = target_loss(model, *batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def trained_runs(patterns: list[str]) -> list[Path]:
    """The run folders ``patterns`` name (a glob is expanded), sorted; exits with one line naming any that holds
    no trained weights."""
    paths = sorted({Path(p) for pattern in patterns for p in glob.glob(pattern) or [pattern]})
    missing = [str(p) for p in paths if not (p / "model.safetensors").is_file()]
    if missing:
        sys.exit(f"not a trained run folder: {', '.join(missing)}")
    return paths


def scratchpad_scorer(path: Path, why: str):
    """The run at ``path`` loaded on a CPU as ``probe eval`` scores it
    (:func:`probe.analysis.evaluation.run_scorer`); exits with one line where it trained without a scratchpad, so
    ``why`` (what it lacks for the measure)."""
    from probe.analysis.evaluation import run_scorer
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run
    from probe.subjects.settings import ReadSettings

    scorer = run_scorer(Run(path, read_checkpoint_config(path)), ReadSettings())
    if not scorer.task.scratchpad:
        sys.exit(f"{path}: trained without a scratchpad, so {why}")
    return scorer


def measure_runs(patterns: list[str], measure: Callable[[Path], dict]) -> tuple[list[dict], tuple[float, float, float]]:
    """``measure`` on each trained run folder ``patterns`` name (:func:`trained_runs`), on one thread, each row
    printed as it lands (:func:`each_run`); with the load average before the first, which :func:`write_result`
    records."""
    torch.set_num_threads(1)
    load = os.getloadavg()
    return each_run(trained_runs(patterns), measure), load


def runs_main(doc: str, name: str, what: str, options: dict[str, dict], measure: Callable[..., dict]) -> None:
    """The command line of a script that measures run folders: the folders, and ``options`` (flag -> argparse
    keywords), each run measured by ``measure(path, **options given)``; the rows written as ``name``'s result
    (``--name``'s, where ``options`` has it), the options beside them."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (globs welcome)")
    for flag, keywords in options.items():
        parser.add_argument(flag, **keywords)
    given = vars(parser.parse_args())
    patterns, name = given.pop("runs"), given.pop("name", name)
    rows, load = measure_runs(patterns, lambda path: measure(path, **given))
    write_result(name, what, load, **given, runs=rows)


def each_run(paths: list[Path], measure: Callable[[Path], dict]) -> list[dict]:
    """``measure(path)`` for every run, each row printed as it lands (a long measurement shows it going)."""
    rows = []
    for path in paths:
        rows.append(measure(path))
        print(", ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    return rows


def scenario_config(scenario: str):
    """The :class:`~probe.training.train_config.TrainConfig` a study plans for ``scenario`` (``study:folder:pe``,
    seed 0); exits with one line where the study or its run does not exist."""
    from probe.errors import ProbeError
    from probe.studies.reproduce import plan

    study, folder, pe = scenario.split(":")
    with tempfile.TemporaryDirectory() as scratch:
        try:
            runs = [r for r in plan(study, scratch) if r.path.parent.parent.name == folder and r.config.pe == pe]
        except ProbeError as error:
            sys.exit(str(error))
    if not runs:
        sys.exit(f"the {study} study has no {folder} run of {pe}")
    return runs[0].config


def write_result(name: str, what: str, load_before: tuple[float, float, float], **fields: object) -> Path:
    """bench/results/<name>_cpu.json: the machine's header, then ``fields``; says where it went."""
    path = write_json(name, "cpu", {**header(name, what, "cpu", load_before), **fields})
    print(f"wrote {path}")
    return path


def write_json(name: str, device: torch.device | str, payload: dict) -> Path:
    """Atomically write bench/results/<name>_<device type>.json."""
    path = RESULTS / f"{name}_{torch.device(device).type}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
        json.dump(payload, handle, indent=2)
    os.chmod(handle.name, 0o644)  # NamedTemporaryFile makes it 0600
    os.replace(handle.name, path)
    return path


def fill_block(path: Path, name: str, text: str) -> None:
    """Replace what lies between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in the page ``path`` with
    ``text``: numbers a page quotes, written by the script that measured them rather than typed."""
    page = path.read_text()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in page or end not in page:
        sys.exit(f"{path} has no {begin} ... {end} block to fill")
    before, rest = page.split(begin, 1)
    after = rest.split(end, 1)[1]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(before + begin + "\n" + text + end + after)
    os.replace(tmp, path)


def add_study_arguments(parser, study: str) -> None:
    """A study report's inputs (the folder of its summaries, the seeds it should hold) and the name of the
    results files it writes, so that a report of another folder does not overwrite the committed one."""
    parser.add_argument("--summaries", default=str(RESULTS / study), help="folder of the study's summaries")
    parser.add_argument("--name", default=f"{study}_report", help="results file name (JSON and Markdown)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the seeds the study should hold")
