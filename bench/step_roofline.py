"""How far a study's training step lies from this CPU's limit: where its time goes, how fast its matrix
products run against the core's own sgemm, and so the most any float32 implementation could gain.

    python bench/step_roofline.py                  # the Section 3 scenarios that cost a seed the most
    python bench/step_roofline.py --scenario section3:scan+split=paper:nope --steps 30

Each scenario (study:folder:pe) trains from its seed in a process of its own, at one thread, with freed
memory kept (as the studies train): ``--steps`` steps timed plainly (process CPU time a step, from the
fourth), then ``--timed`` more with every aten op they dispatch timed (a dispatch mode, process CPU time): the
matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``), the attention kernel and its backward, the
optimizer and the rest; what is left of the step lies outside any op (Python, autograd, the mode's own
cost, a batch thread). Each product is then timed alone with its shapes and strides, and a 1024-cube sgemm
beside them: the core's peak is the fastest of these rates.

Two bounds on the speed-up of the same float32 arithmetic, both generous: ``bound_at_shapes`` if nothing
but the matrix products (each at its shape's speed alone) and the attention kernel (as it runs) took any
time; ``bound_at_peak`` the same with every matrix product at the core's peak. A study's price divides
by at most these. The plain and the timed steps train on different batches of one stream, so both are
many; each scenario runs ``--repeats`` times (medians). Writes bench/results/step_roofline_cpu.json
(``--name``: another stem).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from common import scenario_config, write_result  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

# The five scenarios that cost a Section 3 seed the most at the price of 2026-12-03
# (section3_dry_run_whole_s19_epyc_float32_1796312040.json: 44% of it), each with a different PE.
SCENARIOS = (
    "section3:sorting+train_length=8+variant=multi-digit:nope",
    "section3:copy+split=paper+variant=random-2x:t5",
    "section3:reverse+split=paper+variant=twice:rotary",
    "section3:polynomial+train_length=8:alibi",
    "section3:lego+train_length=8:ape",
)
MATMUL = ("mm", "addmm", "bmm", "baddbmm")
WARMUP = 2  # plain steps not timed: the first ones allocate what later steps reuse
TOP_PRODUCTS = 12  # the costliest products a round keeps in the JSON
PEAK_SIZE = 1024


def kind(op: str) -> str:
    """The part of a step an aten op's time counts to."""
    if op in MATMUL:
        return "matmul"
    if "attention" in op:
        return "attention"
    if "adam" in op.lower() or op.startswith("_foreach"):
        return "optimizer"
    return "other"


def sgemm_seconds(shapes: list[list[int]], strides: list[list[int]], round_seconds: float = 0.05) -> float:
    """CPU seconds one product (mm, addmm, bmm or baddbmm operands of ``shapes`` laid out as ``strides``) takes
    alone, on fresh float32 operands: the best of three rounds of ``round_seconds`` each."""
    operands = [torch.empty_strided(shape, stride).normal_() for shape, stride in zip(shapes, strides)]
    if len(operands) == 3 and operands[0].dim() < operands[1].dim():  # addmm(bias, a, b)
        fn = lambda: torch.addmm(*operands)  # noqa: E731
    elif operands[0].dim() == 3:
        fn = lambda: torch.bmm(operands[-2], operands[-1])  # noqa: E731
    else:
        fn = lambda: torch.mm(operands[-2], operands[-1])  # noqa: E731
    start = time.process_time()
    fn()
    calls = max(1, int(round_seconds / max(time.process_time() - start, 1e-6)))
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def product_flops(shapes: list[list[int]]) -> float:
    """2·m·n·k (times the batch) for one product of ``shapes``."""
    a, b = shapes[-2:]
    return 2.0 * (a[0] if len(a) == 3 else 1) * a[-2] * a[-1] * b[-1]


class OpTimer(TorchDispatchMode):
    """Times every aten op dispatched while it is entered, by process CPU time: each op's seconds by kind, and
    each matrix product's shapes and strides."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, float] = dict.fromkeys(("matmul", "attention", "optimizer", "other"), 0.0)
        self.others: dict[str, float] = {}
        self.products: dict[str, dict] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.process_time()
        out = func(*args, **(kwargs or {}))
        seconds = time.process_time() - start
        name = func.overloadpacket.__name__
        part = kind(name)
        self.parts[part] += seconds
        if part == "other":
            self.others[name] = self.others.get(name, 0.0) + seconds
        if part == "matmul":
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            shapes, strides = [list(t.shape) for t in tensors], [list(t.stride()) for t in tensors]
            row = self.products.setdefault(
                f"{name} {shapes} {strides}",
                {"op": name, "shapes": shapes, "strides": strides, "calls": 0, "seconds": 0.0},
            )
            row["calls"] += 1
            row["seconds"] += seconds
        return out


def child(scenario: str, steps: int, timed_steps: int) -> dict:
    """Train ``scenario`` in this process: the plain step's CPU time, then the timed ops' breakdown."""
    from probe.training.bookkeeping import train_run
    from probe.training.memory import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(1)
    marks: list[float] = []  # process CPU time after each step
    timer = OpTimer()

    def on_step(step: int, loss: float, speed: float) -> None:
        marks.append(time.process_time())
        if len(marks) == steps:  # entered only around the timed steps: a mode slows every op it sees
            timer.__enter__()
        elif len(marks) == steps + timed_steps:
            timer.__exit__(None, None, None)

    big = 10**9  # no validation, checkpoint or evaluation among the measured steps
    config = dataclasses.replace(
        scenario_config(scenario),
        steps=steps + timed_steps,
        eval_every=big,
        checkpoint_every=big,
        log_every=1,
        eval_examples=4,
    )
    with tempfile.TemporaryDirectory() as scratch:
        train_run(config, Path(scratch) / "run", torch.device("cpu"), on_step=on_step)
    plain = (marks[steps - 1] - marks[WARMUP]) / (steps - 1 - WARMUP)
    timed = (marks[steps + timed_steps - 1] - marks[steps - 1]) / timed_steps
    parts = {name: seconds / timed_steps for name, seconds in timer.parts.items()}
    products = list(timer.products.values())
    for product in products:
        flops = product_flops(product["shapes"])
        alone = sgemm_seconds(product["shapes"], product["strides"])
        calls = product.pop("calls") / timed_steps
        seconds = product.pop("seconds") / timed_steps
        product |= {
            "calls_per_step": calls,
            "seconds_per_step": seconds,
            "gflops_in_step": flops * calls / seconds / 1e9,
            "gflops_alone": flops / alone / 1e9,
            "seconds_per_step_alone": alone * calls,
            "flops_per_step": flops * calls,
        }
    return {
        "step_cpu_seconds": plain,
        "timed_step_cpu_seconds": timed,
        "op_seconds_per_step": parts,
        "outside_ops_seconds_per_step": timed - sum(parts.values()),
        "matmul_flops_per_step": sum(p["flops_per_step"] for p in products),
        "matmul_seconds_alone_per_step": sum(p["seconds_per_step_alone"] for p in products),
        "products": sorted(products, key=lambda p: -p["seconds_per_step"]),
        "other_ops_seconds_per_step": {
            name: seconds / timed_steps for name, seconds in sorted(timer.others.items(), key=lambda i: -i[1])[:12]
        },
    }


def peak_gflops() -> float:
    """The core's float32 sgemm rate on a 1024 cube at one thread (GFLOP/s, the best of three)."""
    shape, stride = [PEAK_SIZE, PEAK_SIZE], [PEAK_SIZE, 1]
    return product_flops([shape, shape]) / sgemm_seconds([shape, shape], [stride, stride], round_seconds=0.5) / 1e9


def in_a_process(scenario: str, steps: int, timed_steps: int) -> dict:
    """:func:`child` in a fresh interpreter (freed memory kept is process-wide, as in a study's worker)."""
    command = [sys.executable, __file__, "--child", "--scenario", scenario, "--steps", str(steps)]
    command += ["--timed", str(timed_steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{scenario} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(row: dict, cube: float) -> dict:
    """The shares of a timed step and the two bounds, from :func:`child`'s numbers and the cube's GFLOP/s."""
    peak = max([cube] + [p["gflops_alone"] for p in row["products"]])
    parts, timed = row["op_seconds_per_step"], row["timed_step_cpu_seconds"]
    attention = parts["attention"]
    return {
        "shares_of_timed_step": {
            **{name: seconds / timed for name, seconds in parts.items()},
            "outside_ops": row["outside_ops_seconds_per_step"] / timed,
        },
        "matmul_gflops_in_step": row["matmul_flops_per_step"] / parts["matmul"] / 1e9,
        "peak_gflops": peak,
        "bound_at_shapes": row["step_cpu_seconds"] / (row["matmul_seconds_alone_per_step"] + attention),
        "bound_at_peak": row["step_cpu_seconds"] / (row["matmul_flops_per_step"] / peak / 1e9 + attention),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="study:folder:pe (repeatable; default: five)")
    parser.add_argument("--steps", type=int, default=23, help="plain steps, the first three untimed (default 23)")
    parser.add_argument("--timed", type=int, default=20, help="steps with every op timed (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="processes per scenario; medians over them (default 3)")
    parser.add_argument("--name", default="step_roofline", help="the result's stem (default step_roofline)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scenarios = args.scenario or list(SCENARIOS)
    malformed = [s for s in scenarios if not re.fullmatch(r"[^:]+:[^:]+:[^:]+", s)]
    if malformed:
        sys.exit(f"--scenario takes study:folder:pe (e.g. {SCENARIOS[0]}), got {malformed[0]!r}")
    if args.steps < WARMUP + 3 or args.timed < 1:
        sys.exit(f"--steps must be at least {WARMUP + 3} and --timed at least 1")
    if args.child:
        print(json.dumps(child(scenarios[0], args.steps, args.timed)))
        return
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    peak = peak_gflops()
    print(f"sgemm {PEAK_SIZE}^3 at one thread: {peak:.1f} GFLOP/s")
    results = {}
    for repeat in range(args.repeats):
        for scenario in scenarios:
            row = in_a_process(scenario, args.steps, args.timed)
            rounds = results.setdefault(scenario, {"rounds": []})["rounds"]
            rounds.append({**summarize(row, peak), **row, "products": row["products"][:TOP_PRODUCTS]})
            line = rounds[-1]
            shares = ", ".join(f"{k} {v:.0%}" for k, v in line["shares_of_timed_step"].items())
            print(
                f"[{repeat + 1}/{args.repeats}] {scenario}: {line['step_cpu_seconds'] * 1e3:.0f} ms a step ({shares}); "
                f"matmuls at {line['matmul_gflops_in_step']:.1f} GFLOP/s; bounds {line['bound_at_shapes']:.2f}x at "
                f"their shapes, {line['bound_at_peak']:.2f}x at peak",
                flush=True,
            )
    for entry in results.values():
        for key in ("step_cpu_seconds", "matmul_gflops_in_step", "bound_at_shapes", "bound_at_peak"):
            entry[key] = statistics.median(r[key] for r in entry["rounds"])
    write_result(
        args.name,
        "a study's training step at one thread: where its time goes, its matrix products' GFLOP/s against each "
        "shape alone and the 1024-cube sgemm, and the most the same float32 arithmetic could gain",
        load_before,
        cube_gflops=peak,
        cube_size=PEAK_SIZE,
        steps=args.steps,
        timed=args.timed,
        repeats=args.repeats,
        median_bound_at_shapes=statistics.median(r["bound_at_shapes"] for r in results.values()),
        median_bound_at_peak=statistics.median(r["bound_at_peak"] for r in results.values()),
        scenarios=results,
    )


if __name__ == "__main__":
    main()
