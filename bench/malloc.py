"""A training step with glibc's malloc as it comes, against freed memory kept for reuse (probe.training.memory).

    python bench/malloc.py                       # the default scenarios, 3 rounds
    python bench/malloc.py --scenario section6:polynomial+scratchpad=full:t5 --steps 14 --repeats 5

glibc hands a large allocation back to the kernel when it is freed, so a step that allocates the same large
activations every step faults them in again page by page (the kernel zeroing each page). The malloc setting is
process-wide, so each arm trains in a process of its own: per round and scenario, one fresh process per arm (the
order rotated each round), each training the scenario's run from its seed for ``--steps`` steps at one thread,
timed from its third step on (process CPU time, user and system, and wall), its minor page faults counted and
its weights hashed at the end. The two arms must end on the same weights bit for bit: memory placement is not
numerics. Ratios are per round (the arms minutes apart at most), then the median. Writes
bench/results/malloc_cpu.json (``--name``: another stem).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import paired_ratio, scenario_config, write_result  # noqa: E402

ARMS = ("glibc", "kept")
SCENARIOS = (
    "section6:polynomial+scratchpad=full:t5",
    "section6:addition+scratchpad=full:nope",
    "section6:parity+scratchpad=full:rotary",
    "section3:copy+split=paper+variant=count-2x:t5",
    "section3:sorting+train_length=8+variant=multi-digit:nope",
)
WARMUP = 2  # steps not timed: the first allocates what later steps reuse


def child(arm: str, scenario: str, steps: int) -> dict:
    """Train ``scenario`` (study:folder:pe) for ``steps`` steps in this process under ``arm``; its numbers."""
    if arm == "kept":
        from probe.training.memory import keep_freed_memory

        if not keep_freed_memory():
            sys.exit("this C library is not glibc: nothing to compare")
    import torch

    from probe.training.bookkeeping import train_run

    torch.set_num_threads(1)
    big = 10**9  # no validation, checkpoint or evaluation inside the timed steps; a held-out set of 4 at the end
    config = dataclasses.replace(
        scenario_config(scenario), steps=steps, eval_every=big, checkpoint_every=big, log_every=1, eval_examples=4
    )
    with tempfile.TemporaryDirectory() as scratch:
        marks: list[tuple[float, float, float, int]] = []

        def on_step(step: int, loss: float, speed: float) -> None:
            times = os.times()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            marks.append((time.perf_counter(), times.user, times.system, faults))

        train_run(config, Path(scratch) / "run", torch.device("cpu"), on_step=on_step)
        from safetensors.torch import load_file

        tensors = load_file(str(Path(scratch) / "run" / "model.safetensors"))
    first, last = marks[WARMUP], marks[-1]
    timed = len(marks) - 1 - WARMUP
    return {
        "wall_per_step": (last[0] - first[0]) / timed,
        "user_per_step": (last[1] - first[1]) / timed,
        "system_per_step": (last[2] - first[2]) / timed,
        "cpu_per_step": (last[1] + last[2] - first[1] - first[2]) / timed,
        "faults_per_step": (last[3] - first[3]) / timed,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "weights_sha256": hashlib.sha256(b"".join(tensors[k].numpy().tobytes() for k in sorted(tensors))).hexdigest(),
    }


def in_a_process(arm: str, scenario: str, steps: int) -> dict:
    """:func:`child` in a fresh interpreter (the malloc setting is process-wide): its numbers."""
    command = [sys.executable, __file__, "--child", arm, "--scenario", scenario, "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{scenario} under {arm} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="study:folder:pe (repeatable; default: five)")
    parser.add_argument("--steps", type=int, default=12, help="steps a process trains (default 12; two untimed)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--name", default="malloc", help="the result's stem (default malloc)")
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.scenario[0], args.steps)))
        return
    load_before = os.getloadavg()
    scenarios = args.scenario or list(SCENARIOS)
    malformed = [scenario for scenario in scenarios if scenario.count(":") != 2]
    if malformed:
        sys.exit(f"--scenario takes study:folder:pe (e.g. {SCENARIOS[0]}), got {malformed[0]!r}")
    results = {}
    for scenario in scenarios:
        rounds: dict[str, list[dict]] = {arm: [] for arm in ARMS}
        for repeat in range(args.repeats):
            for arm in ARMS[repeat % 2 :] + ARMS[: repeat % 2]:
                rounds[arm].append(in_a_process(arm, scenario, args.steps))
        shas = {r["weights_sha256"] for arm in ARMS for r in rounds[arm]}
        cpu = {arm: [r["cpu_per_step"] for r in rounds[arm]] for arm in ARMS}
        wall = {arm: [r["wall_per_step"] for r in rounds[arm]] for arm in ARMS}
        results[scenario] = {
            "same_weights": len(shas) == 1,
            "speedup_cpu": paired_ratio(cpu, "glibc", "kept"),
            "speedup_wall": paired_ratio(wall, "glibc", "kept"),
            **{
                f"{arm}_median": {
                    key: statistics.median(r[key] for r in rounds[arm])
                    for key in ("cpu_per_step", "system_per_step", "faults_per_step", "max_rss_mib")
                }
                for arm in ARMS
            },
            "rounds": rounds,
        }
        line = results[scenario]
        print(
            f"{scenario}: {line['speedup_cpu']['median']:.2f}x CPU time a step, "
            f"{line['speedup_wall']['median']:.2f}x wall; system {line['glibc_median']['system_per_step']:.3f} -> "
            f"{line['kept_median']['system_per_step']:.3f} s; same weights: {line['same_weights']}"
        )
    write_result(
        args.name,
        "a training step's time with glibc's malloc as it comes and with freed memory kept (keep_freed_memory); "
        "speedup = glibc / kept",
        load_before,
        steps=args.steps,
        warmup=WARMUP,
        repeats=args.repeats,
        scenarios=results,
    )


if __name__ == "__main__":
    main()
