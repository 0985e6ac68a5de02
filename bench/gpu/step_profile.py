"""Where a captured member step's time goes at ``base``: host-bound or GPU-bound? The kit's rate slice
measured 84.4 member-steps/s on an H200 (11.8 ms a member step, five PEs together, every one captured),
against the 300 targeted. Per PE, one run alone through probe's own path (``Trainer``,
``train_stack``) for ``--steps`` steps, then:

- ``loop_ms``: wall time per step of the real loop between its last two loss reads (batch thread,
  input copy, RNG swap, replay, bookkeeping);
- ``replay_ms``: the captured graph replayed alone, timed with CUDA events (the GPU's time per step);
- the replay's kernels under ``torch.profiler``: how many, their summed device time, the largest.

``loop_ms`` far above ``replay_ms`` says the host holds the GPU back; the two close says the step's
kernels themselves are the cost (then the kernel count and sizes say which). Writes
bench/results/gpu_step_profile_<device>.json (and $OUT's copy)::

    python bench/gpu/step_profile.py --device cuda            # under bench/gpu/run's environment
    python bench/gpu/step_profile.py --device cuda --precision float32   # the forward without autocast
    python bench/gpu/step_profile.py --device cuda --precision tf32   # float32, its products in TF32

``gpu_step_profile_float32_tf32_cuda.json`` was measured by the ``--tf32`` flag that preceded ``--precision
tf32`` (e87b2ee: float32 with cuBLAS's products in TF32 for the whole process, the same step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import torch  # noqa: E402
from measure import paper_config, scan_source  # noqa: E402

from probe.training.loop import Trainer  # noqa: E402
from probe.training.stacked import train_stack  # noqa: E402
from probe.training.steps import Engine  # noqa: E402
from probe.training.train_config import PRECISIONS  # noqa: E402

RESULTS = HERE.parent / "results"


def profile_pe(
    pe: str,
    preset: str,
    steps: int,
    device: torch.device,
    folder: Path,
    compile: bool = False,
    precision: str = "auto",
) -> dict[str, Any]:
    folder.mkdir(parents=True)
    config = paper_config(pe, preset, 0, steps, log_every=steps // 3, eval_every=steps, precision=precision)
    trainer = Trainer(config, folder, device, source=scan_source(0), engine=Engine.for_device(device, compile=compile))
    marks: list[tuple[float, int]] = []
    train_stack([trainer], [lambda step, loss, speed: marks.append((time.perf_counter(), step))])
    (t0, s0), (t1, s1) = marks[-2], marks[-1]
    result: dict[str, Any] = {
        "loop_ms": 1e3 * (t1 - t0) / (s1 - s0),
        "engine": trainer.step_engine,
        "forward_precision": trainer.forward_precision,
    }
    captured = trainer._captured
    if captured is None or captured.replay is None:
        return result
    result["input_shapes"] = [list(t.shape) for t in captured.inputs]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        captured.replay()
    start.record()
    for _ in range(50):
        captured.replay()
    end.record()
    torch.cuda.synchronize(device)
    result["replay_ms"] = start.elapsed_time(end) / 50
    try:  # the profiler's view is a bonus: the timings above stand without it
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                captured.replay()
            torch.cuda.synchronize(device)
        averages = prof.key_averages()
        result["profile_3_replays"] = averages.table(
            sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=60
        )
        result["kernel_launches_per_step"] = sum(a.count for a in averages) / 3
    except Exception as error:  # noqa: BLE001
        result["profile_error"] = f"{type(error).__name__}: {error}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--pes", nargs="+", default=["nope", "t5"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the forward (the engine's option)")
    parser.add_argument(
        "--precision", default="auto", choices=PRECISIONS, help="the run's numerics (auto: bf16 on a GPU)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "settings": vars(args),
        "pes": {},
    }
    variant = ("_compiled" if args.compile else "") + ("" if args.precision == "auto" else f"_{args.precision}")
    paths = [RESULTS / f"gpu_step_profile{variant}_{device.type}.json"]
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / paths[0].name)
    with tempfile.TemporaryDirectory() as tmp:
        for pe in args.pes:
            try:
                out["pes"][pe] = profile_pe(
                    pe, args.preset, args.steps, device, Path(tmp) / pe, args.compile, args.precision
                )
            except Exception as error:  # noqa: BLE001 - one PE's failure is a result
                out["pes"][pe] = {"error": f"{type(error).__name__}: {error}"}
            for path in paths:
                path.write_text(json.dumps(out, indent=1))
            print(pe, json.dumps(out["pes"][pe], indent=1), flush=True)


if __name__ == "__main__":
    main()
