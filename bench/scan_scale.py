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

PES = ("nope", "t5", "alibi", "rotary", "ape")
TASK = ["--task", "scan", "-o", "split=paper"]

# name -> (preset, train flags). The paper trains 40K steps of 64 (160 epochs of 16K commands).
POINTS: dict[str, tuple[str, list[str]]] = {
    "tiny": ("tiny", ["--steps", "4000", "--batch-size", "32"]),
    "tiny-long": ("tiny", ["--steps", "16000", "--batch-size", "64", "--dropout", "0.1"]),
    "small": ("small", ["--steps", "8000", "--batch-size", "64", "--dropout", "0.1"]),
    "base": ("base", []),
}


def probe(*args: str) -> str:
    """Run the probe CLI in this interpreter; its stdout (the --json output)."""
    command = [sys.executable, "-c", "from probe.cli import main; raise SystemExit(main())", *args]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"probe {' '.join(args)} failed with exit status {done.returncode}")
    return done.stdout


def train(root: Path, preset: str, flags: list[str], pes: list[str], device: str, extra: list[str]) -> list[dict]:
    pe_flags = [f for pe in pes for f in ("--pe", pe)]
    out = probe("train", *TASK, *pe_flags, "--preset", preset, *flags, *extra, "--checkpoints", str(root),
                "--jobs", str(len(pes)), "--device", device, "--json")
    return json.loads(out)


def fitted_steps(root: Path, preset: str, flags: list[str], pes: list[str], device: str, seconds: float) -> tuple[int, float]:
    """Steps that fit ``seconds`` at the slowest PE's rate, measured side by side over 60 steps."""
    runs = train(root / "rate", preset, flags, pes, device, ["--steps", "60", "--force"])
    rate = min(r["steps_per_second"] for r in runs)
    return max(100, int(rate * seconds) // 100 * 100), rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--point", action="append", choices=list(POINTS), help="scale points (default: tiny)")
    parser.add_argument("--pe", action="append", choices=PES, help="PEs (default: all five)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit-seconds", type=float, help="set each point's steps to what fits this many seconds")
    parser.add_argument("--root", default="checkpoints/scan_scale", help="where the runs go")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    pes = args.pe or list(PES)
    results = {**header("scan_scale", "IID and OOD exact match on the paper's SCAN split per PE and scale point",
                        args.device, os.getloadavg()), "points": []}
    for name in args.point or ["tiny"]:
        preset, flags = POINTS[name]
        root = Path(args.root) / name
        flags = [*flags, "--seed", str(args.seed)]
        rate = None
        if args.fit_seconds:
            steps, rate = fitted_steps(root, preset, flags, pes, args.device, args.fit_seconds)
            flags += ["--steps", str(steps)]
        started = time.perf_counter()
        trained = train(root, preset, flags, pes, args.device, [])
        wall = time.perf_counter() - started
        report = json.loads(probe("eval", *TASK, "--checkpoints", str(root), "--valid", "1800",
                                  "--device", args.device, "--json"))
        config = {r["pe"]: json.loads((Path(r["path"]) / "config.json").read_text())["training"] for r in trained}
        results["points"].append({
            "name": name, "preset": preset, "flags": flags, "measured_rate": rate, "train_wall_seconds": wall,
            "runs": [{"pe": r["pe"], "seed": r["seed"], "training": config.get(r["pe"]),
                      "steps_per_second": next(t["steps_per_second"] for t in trained if t["pe"] == r["pe"]),
                      "iid": r["iid_accuracy"], "ood": r["ood_accuracy"], "buckets": r["buckets"]}
                     for r in report["runs"] if r["seed"] == args.seed],
        })
        out = write_json("scan_scale", args.device, results)
        for r in results["points"][-1]["runs"]:
            print(f"{name:>10} {r['pe']:>7}  IID {100 * r['iid']:5.1f}%  OOD {100 * (r['ood'] or 0):5.1f}%", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
