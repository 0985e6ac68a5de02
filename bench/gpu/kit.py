"""One GPU chance in one command (bench/gpu/run starts it, after installing the carried wheels): the
versions, a smoke of the captured step on ``tiny`` for every paper PE, the member-step rate at the
study's preset captured and eager (a slice of ``--slice-s`` each), then as many whole paper-scale
runs (40,000 x 64, the authors' protocol, selection on IID validation, the test split scored
teacher-forced) as that rate fits in the time left, NoPE and T5 first.

    bench/gpu/run --device cuda                               # the device's one command
    bench/gpu/run --device cuda --pes alibi rotary            # a later chance: the PEs not yet measured
    bench/gpu/run --device cpu --preset tiny --steps 100 --slice-s 10 --log-every 10   # as bench/gpu/rehearse

Each phase runs in a child process of its own, so a phase that takes CUDA down with it (a failed
capture leaves torch <= 2.12 unusable in that process) costs that phase only. Every number is written
as it is measured to bench/results/gpu_kit_<name>_<device>.json and to $OUT when set; by default
the PEs that an earlier record already holds a whole run of are skipped, so the chances merge.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]  # the kit, bench/common.py, probe

from planner import RunCost, candidates, load_records, measured_pes, plan  # noqa: E402
from record import Progress, Record, Stopped, out_paths, since, stop_on_signals  # noqa: E402

from probe.training.train_config import PRECISIONS, TrainConfig  # noqa: E402

RESULTS = HERE.parent / "results"
MARGIN_S = 30  # kept free at the end: the last writes, the tool's own copy of $OUT
CHILD_GRACE_S = 10  # a child told to stop has this long to write its part


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, for the rehearsal")
    parser.add_argument("--preset", default="base", help="of the rate slices and the whole runs (default base)")
    parser.add_argument("--steps", type=int, default=40_000, help="of a whole run (default the paper's 40,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pes", nargs="+", help="the whole runs' PEs in order (default: the five not yet measured)")
    parser.add_argument("--slice-s", type=float, default=60, help="each rate slice's timed window (default 60)")
    parser.add_argument("--budget-s", type=float, default=530, help="from the start of bench/gpu/run (default 530)")
    parser.add_argument(
        "--precision", default="auto", choices=PRECISIONS, help="the run's numerics (auto: bf16 on a GPU)"
    )
    parser.add_argument("--log-every", type=int, default=50, help="steps between loss reads (default 50)")
    parser.add_argument("--rates-from", type=Path, help="an earlier record of this device: its rates, no slices")
    parser.add_argument("--patience", type=float, default=1, help="multiplies each phase's time limit (default 1)")
    parser.add_argument("--threads", type=int, help="torch's CPU threads in each phase (default torch's)")
    parser.add_argument("--no-capture", action="store_true", help="skip the captured slice; whole runs eager")
    parser.add_argument("--name", help="bench/results/gpu_kit_<name>_<device>.json (default: preset and UTC time)")
    parser.add_argument("--phase", choices=("smoke", "slice", "run"), help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--part", type=Path, help=argparse.SUPPRESS)  # where a child writes its part
    parser.add_argument("--capture", action="store_true", help=argparse.SUPPRESS)  # a child's engine
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # a child's, epoch seconds
    return parser.parse_args(argv)


def started_at() -> float:
    """When the command began: bench/gpu/run stamps it before installing, which the budget counts."""
    return float(os.environ.get("KIT_STARTED", time.time()))


def versions() -> dict[str, object]:
    """What the device image and the carried wheels gave, and the tree's commit."""
    from importlib.metadata import version

    import numpy
    import torch
    import transformers

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    found = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "transformer_lens": version("transformer-lens"),
        "commit": commit or None,
    }
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


def run_child(
    phase: list[str], args: argparse.Namespace, record: Record, key: tuple[str, ...], limit_s: float, progress: Progress
) -> dict:
    """Run ``kit.py --phase ...`` as a child, its lines relayed, merging the part it writes into
    ``record`` at ``key`` every few seconds; past ``limit_s``, or when this process is told to stop,
    the child is told to stop too and its last part is merged. Returns that part."""
    with tempfile.TemporaryDirectory(prefix="gpu-kit-") as scratch:
        part = Path(scratch) / "part.json"
        command = [sys.executable, str(HERE / "kit.py"), *phase, "--part", str(part), *common_flags(args)]
        spawned = time.time()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        threading.Thread(target=lambda: [progress.relay(line) for line in child.stdout], daemon=True).start()
        began = time.monotonic()

        def merge() -> dict:
            data = json.loads(part.read_text()) if part.is_file() else {}
            record.put(*key, value=data)
            return data

        over = False
        try:
            while child.poll() is None and not over:
                over = time.monotonic() - began > limit_s
                time.sleep(2)
                merge()
        except Stopped:
            _stop(child)
            merge()
            raise
        if over:
            _stop(child)
        data = merge()
        if over:
            record.put(*key, "_stopped", value=f"ran over its {limit_s:.0f} s")
        if child.returncode:
            record.put(*key, "_exit", value=child.returncode)
        if "ready_at" in data:  # the child's start (interpreter, torch, TransformerLens): part of a run's cost
            record.put(*key, "_start_s", value=data["ready_at"] - spawned)
        return record.data_at(*key)


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM (the child writes its part), then SIGKILL after the grace."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def common_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--device", args.device, "--preset", args.preset, "--steps", str(args.steps), "--seed", str(args.seed)]
    flags += ["--slice-s", str(args.slice_s), "--log-every", str(args.log_every), "--precision", args.precision]
    return flags + (["--threads", str(args.threads)] if args.threads else [])


def child(args: argparse.Namespace) -> None:
    """One phase in this process, its results in ``--part`` (a record of its own)."""
    import torch
    from measure import rate_slice, smoke, whole_run
    from planner import ORDER

    started = started_at()
    record = Record([args.part], {"ready_at": time.time()})
    stop_on_signals(record, started)
    progress = Progress(started, heartbeat=None)  # the parent relays these lines and keeps the heartbeat
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="gpu-kit-runs-") as folder:
        folder = Path(folder)
        try:
            if args.phase == "smoke":
                smoke(list(ORDER), device, folder, record.put, progress.say)
            elif args.phase == "slice":
                rate_slice(args.pes, args, device, args.capture, folder, record.put, progress.say)
            else:
                whole_run(args.pes[0], args, device, args.capture, folder, record.put, progress.say, args.deadline)
        except Stopped as stop:
            sys.exit(128 + stop.signum)
        except Exception as error:  # noqa: BLE001 - the phase's failure is its result
            record.put("error", value=f"{type(error).__name__}: {error}")
            raise


def rate_cost(rate: dict, args: argparse.Namespace) -> RunCost | None:
    """A whole run's cost from a slice's part (None where the slice measured no rate)."""
    from probe.training.selection import every

    result, evaluation = rate.get("result", {}), rate.get("evaluation")
    if not result.get("member_steps_per_s") or not evaluation:
        return None
    scale = (evaluation["valid_examples"] + evaluation["test_examples"]) / evaluation["valid_examples"]
    return RunCost(
        steps=args.steps,
        member_steps_per_s=result["member_steps_per_s"],
        evaluations=args.steps // every(args.steps),  # the authors' selection: 20 a run
        evaluation_s=evaluation["seconds"],
        scoring_s=evaluation["seconds"] * (2 + scale),  # last validation, the selected one's, then scoring
        startup_s=rate.get("_start_s", 0) + rate.get("build_s", 0) / result["members"] + result["first_logged_step_s"],
    )


def parent(args: argparse.Namespace) -> int:
    """The whole command: versions, smoke, two rate slices, the planned runs; every result recorded."""
    import torch
    from common import header

    started = started_at()
    deadline = started + args.budget_s
    device = torch.device(args.device)
    done = measured_pes(load_records(RESULTS, device.type), args.preset, args.seed, args.steps, args.precision)
    pes = candidates(args.pes, done)
    name = args.name or f"gpu_kit_{args.preset}_{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    what = "the captured step's smoke, member-step rates captured and eager, whole paper-scale SCAN runs"
    record = Record(out_paths(name, device.type, RESULTS), header("gpu_kit", what, device, os.getloadavg()))
    stop_on_signals(record, started)
    progress = Progress(started)
    settings = {
        "preset": args.preset,
        "seed": args.seed,
        "steps": args.steps,
        "precision": args.precision,
        "pes": pes,
        "already_measured": sorted(done),
    }
    record.put("settings", value=settings | {"slice_s": args.slice_s, "budget_s": args.budget_s})
    try:
        record.put("versions", value=versions())
        progress.say(f"versions: {record.data['versions']}")
        phases(args, pes, device, deadline, record, progress)
        record.put("phase", value="done")
        return 0
    except Stopped as stop:
        progress.say(f"stopped by {signal.Signals(stop.signum).name}; the record keeps what was measured")
        return 128 + stop.signum
    finally:
        record.put("wall_s", value=since(started))
        progress.close()
        summary(record)


def summary(record: Record) -> None:
    """The table the device's reply ends with (the reply keeps the output's tail)."""
    for pe, row in record.data.get("smoke", {}).items():
        if isinstance(row, dict) and "engine" in row:
            print(f"smoke {pe:<7} captured {row['engine']['captured']!s:<5} equal to eager {row['equal']}")
    for engine, part in record.data.get("rate", {}).items():
        if isinstance(part, dict) and part.get("result"):
            print(f"rate {engine:<8} {part['result']['member_steps_per_s'] or 0:8.1f} member-steps/s")
    print(f"{'PE':<8} {'IID':>6} {'OOD':>6} {'paper OOD':>9} {'selected':>8} {'train s':>8}")
    for pe, run in record.data.get("runs", {}).items():
        test, selection = run.get("test", {}), run.get("selection", {})
        paper = (test.get("paper") or {}).get("ood")
        cells = [test.get("iid_accuracy"), test.get("ood_accuracy"), paper]
        iid, ood, paper = ("-" if v is None else f"{100 * v:.1f}" for v in cells)
        step, seconds = selection.get("selected_step", "-"), selection.get("train_seconds")
        print(f"{pe:<8} {iid:>6} {ood:>6} {paper:>9} {step!s:>8} {'-' if seconds is None else f'{seconds:.0f}':>8}")
    print(f"record: {', '.join(str(p) for p in record.paths)}", flush=True)


def phases(
    args: argparse.Namespace, pes: list[str], device, deadline: float, record: Record, progress: Progress
) -> None:
    """Smoke, rate slices (captured, then eager), then whole runs as the rates allow."""
    record.put("phase", value="smoke")
    progress.say("smoke: the captured step against eager, tiny, every paper PE")
    run_child(["--phase", "smoke"], args, record, ("smoke",), 180 * args.patience, progress)
    engine, costs = choose(measure_rates(args, pes or ["nope"], device, record, progress), args)
    if engine is None:
        record.put("plan", value={"runs": [], "why": "no rate was measured"})
        return
    record.put("plan", value={"engine": engine, "estimated_run_s": costs[engine].seconds()})
    run_planned(args, pes, engine, costs, deadline, record, progress)


def measure_rates(
    args: argparse.Namespace, pes: list[str], device, record: Record, progress: Progress
) -> dict[str, dict]:
    """{engine: slice part}: ``pes`` stacked for a slice, captured (on a GPU) then eager; or
    the rates of an earlier record (``--rates-from``), which leaves the time to whole runs."""
    if args.rates_from:
        earlier_record = json.loads(args.rates_from.read_text())
        earlier = earlier_record["rate"]
        rates = {engine: earlier[engine] for engine in ("captured", "eager") if engine in earlier}
        record.put("rate", value=rates | {"from": str(args.rates_from)})
        measured_in, runs_in = (
            TrainConfig(task="scan", preset=args.preset, precision=p).forward_precision(device.type)
            for p in (earlier_record.get("settings", {}).get("precision", "auto"), args.precision)
        )
        if measured_in != runs_in:  # the plan is as good as the rate: say when it is another precision's
            progress.say(f"rates measured in {measured_in} plan these {runs_in} runs")
        return rates
    rates = {}
    for engine in ("captured", "eager") if device.type == "cuda" and not args.no_capture else ("eager",):
        record.put("phase", value=f"rate {engine}")
        progress.say(f"rate slice, {engine}: {', '.join(pes)} stacked at {args.preset}")
        flags = ["--phase", "slice", "--pes", *pes] + (["--capture"] if engine == "captured" else [])
        limit = args.slice_s + 240 * args.patience  # start, build, warm-up, capture, one timed evaluation
        rates[engine] = run_child(flags, args, record, ("rate", engine), limit, progress)
    if all(rates.get(e, {}).get("result", {}).get("member_steps_per_s") for e in ("captured", "eager")):
        ratio = rates["captured"]["result"]["member_steps_per_s"] / rates["eager"]["result"]["member_steps_per_s"]
        record.put("rate", "speedup", value=ratio)
    return rates


def run_planned(
    args: argparse.Namespace,
    pes: list[str],
    engine: str,
    costs: dict[str, RunCost],
    deadline: float,
    record: Record,
    progress: Progress,
) -> None:
    """Whole runs one after another, each while the planner says one more fits the time left; after a
    captured run that failed, the rest run eagerly (a capture that failed once fails again)."""
    cost = costs[engine]
    for pe in pes:
        left = deadline - time.time()
        fits = plan(pes[pes.index(pe) :], cost, left, MARGIN_S)
        record.put("plan", "last", value={"seconds_left": left, "fits": fits})
        if not fits:
            progress.say(f"plan: no whole run fits the {left:.0f} s left (one takes ~{cost.seconds():.0f} s)")
            return
        record.put("phase", value=f"run {pe}")
        progress.say(f"whole run {pe}: {args.steps} steps at {args.preset}, {engine}; {len(fits)} fit")
        flags = ["--phase", "run", "--pes", pe, "--deadline", str(deadline - MARGIN_S)]
        flags += ["--capture"] if engine == "captured" else []
        part = run_child(flags, args, record, ("runs", pe), deadline - time.time(), progress)
        if "wall_s" in part:  # plan the next from the slower of the estimate and this run
            taken = part["wall_s"] + part.get("_start_s", 0)
            cost = replace(cost, startup_s=cost.startup_s + max(0.0, taken - cost.seconds()))
        if engine == "captured" and part.get("_exit") and "eager" in costs:
            engine, cost = "eager", costs["eager"]
            record.put("plan", "engine", value="eager after a captured run failed")


def choose(rates: dict[str, dict], args: argparse.Namespace) -> tuple[str | None, dict[str, RunCost]]:
    """The engine the whole runs take (None where no rate was measured) and each engine's run cost:
    captured where its slice measured a rate with every member captured and no slower than eager."""
    costs = {name: cost for name in rates if (cost := rate_cost(rates[name], args))}
    engines = rates.get("captured", {}).get("result", {}).get("engines", {})
    held = bool(engines) and all(e.get("captured") for e in engines.values())
    if held and "captured" in costs:
        faster = "eager" not in costs or costs["captured"].member_steps_per_s >= costs["eager"].member_steps_per_s
        if faster:
            return "captured", costs
    return ("eager" if "eager" in costs else None), costs


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    args = parse(argv)
    if args.phase:
        child(args)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
