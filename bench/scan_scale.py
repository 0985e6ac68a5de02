"""Length generalization on the paper's SCAN split along a scale axis: IID and OOD per PE per point.

Each scale point is a preset plus overrides (depth, width, steps, batch, dropout). Every PE of a
point trains side by side (one process each, ``probe train --jobs``), then ``probe eval`` scores
the whole test split (26-48 actions) and the held-out IID split. Nothing here looks at test
accuracy to choose anything: with ``--fit-seconds`` the number of steps of the last point is the
largest that a measured training rate fits in that many seconds.

    python bench/scan_scale.py --point tiny --point small --device cpu
    python bench/scan_scale.py --point base --fit-seconds 400 --device cuda   # the paper's model

Writes ``bench/results/scan_scale_<device>.json``: per point and PE, the
training config, steps/s, IID and OOD exact match and the accuracy per length bucket.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.models.registry import PAPER_PES, PE_KINDS  # noqa: E402

TASK = ["--task", "scan", "-o", "split=paper"]

# name -> (preset, train flags). The paper trains 40K steps of 64 (160 epochs of 16K commands).
POINTS: dict[str, tuple[str, list[str]]] = {
    "tiny": ("tiny", ["--steps", "4000", "--batch-size", "32"]),
    "tiny-long": ("tiny", ["--steps", "16000", "--batch-size", "64", "--dropout", "0.1"]),
    "tiny-d4": ("tiny", ["--steps", "10000", "--batch-size", "64", "--dropout", "0.1", "-m", "n_layers=4"]),
    "small": ("small", ["--steps", "8000", "--batch-size", "64", "--dropout", "0.1"]),
    "small-d8": ("small", ["--steps", "8000", "--batch-size", "64", "--dropout", "0.1", "-m", "n_layers=8"]),
    "base": ("base", []),
}


PROBE = [sys.executable, "-c", "from probe.cli import main; raise SystemExit(main())"]


def start_train(root: Path, preset: str, flags: list[str], pes: list[str], device: str) -> subprocess.Popen:
    """``probe train`` of every PE of one point, side by side, in the background (JSON on stdout)."""
    pe_flags = [f for pe in pes for f in ("--pe", pe)]
    return subprocess.Popen(
        [
            *PROBE,
            "train",
            *TASK,
            *pe_flags,
            "--preset",
            preset,
            *flags,
            "--checkpoints",
            str(root),
            "--jobs",
            str(len(pes)),
            "--device",
            device,
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> list[dict]:
    out, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"{' '.join(process.args[3:6])}... failed with exit status {process.returncode}")
    return json.loads(out)


def steady_rate(run_path: str) -> float:
    """Steps/s between the first and the last logged step of a run (its warm-up left out)."""
    records = [json.loads(line) for line in (Path(run_path) / "metrics.jsonl").read_text().splitlines()]
    first, last = records[0], records[-1]
    return (last["step"] - first["step"]) / (last["time"] - first["time"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--point", action="append", choices=list(POINTS), help="scale points (default: tiny)")
    parser.add_argument("--pe", action="append", choices=PE_KINDS, help="PEs (default: all five)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fit-seconds",
        type=float,
        help="set each point's steps to what fits this many seconds, every point training at once",
    )
    parser.add_argument("--steps", type=int, help="every point's training steps (default: each point's own)")
    parser.add_argument("--valid", type=int, default=1000, help="held-out IID examples per run (default 1000)")
    parser.add_argument("--root", default="checkpoints/scan_scale", help="where the runs go")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    pes = args.pe or list(PAPER_PES)
    results = {
        **header(
            "scan_scale",
            "IID and OOD exact match on the paper's SCAN split per PE and scale point",
            args.device,
            os.getloadavg(),
        ),
        "points": [],
    }
    names = args.point or ["tiny"]
    flags = {
        name: [*POINTS[name][1], "--seed", str(args.seed), *(["--steps", str(args.steps)] if args.steps else [])]
        for name in names
    }
    rates: dict[str, float | None] = dict.fromkeys(names)
    if args.fit_seconds:  # every point side by side, as they will train: 120 steps, the rate after step 50
        probes = {
            name: start_train(
                Path(args.root) / "rate" / name,
                POINTS[name][0],
                [*flags[name], "--steps", "120", "--force"],
                pes,
                args.device,
            )
            for name in names
        }
        for name, process in probes.items():
            rates[name] = min(steady_rate(r["path"]) for r in finish(process))
            flags[name] += ["--steps", str(max(100, int(rates[name] * args.fit_seconds) // 100 * 100))]
    started = time.perf_counter()
    processes = {
        name: start_train(Path(args.root) / name, POINTS[name][0], flags[name], pes, args.device) for name in names
    }
    trained_by_point = {name: finish(process) for name, process in processes.items()}
    wall = time.perf_counter() - started
    for name in names:
        preset, root, trained, rate = POINTS[name][0], Path(args.root) / name, trained_by_point[name], rates[name]
        done = subprocess.run(
            [
                *PROBE,
                "eval",
                *TASK,
                "--checkpoints",
                str(root),
                "--valid",
                str(args.valid),
                "--device",
                args.device,
                "--json",
            ],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        report = json.loads(done.stdout)
        config = {r["pe"]: json.loads((Path(r["path"]) / "config.json").read_text())["training"] for r in trained}
        results["points"].append(
            {
                "name": name,
                "preset": preset,
                "flags": flags[name],
                "measured_rate": rate,
                "train_wall_seconds": wall,
                "runs": [
                    {
                        "pe": r["pe"],
                        "seed": r["seed"],
                        "training": config.get(r["pe"]),
                        "steps_per_second": next(t["steps_per_second"] for t in trained if t["pe"] == r["pe"]),
                        "iid": r["iid_accuracy"],
                        "ood": r["ood_accuracy"],
                        "buckets": r["buckets"],
                    }
                    for r in report["runs"]
                    if r["seed"] == args.seed
                ],
            }
        )
        out = write_json("scan_scale", args.device, results)
        for r in results["points"][-1]["runs"]:
            print(f"{name:>10} {r['pe']:>7}  IID {100 * r['iid']:5.1f}%  OOD {100 * (r['ood'] or 0):5.1f}%", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
