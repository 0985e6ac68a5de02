"""`probe compare` end to end on the default checkpoints, time per stage.

    python bench/compare.py [--checkpoints checkpoints] [--task scan] [--device cpu] [--threads N]

Runs ``probe.analysis.compare_report("nope")`` (NoPE against every other PE of --task and --seed,
plus the NoPE' seed baseline) and records the seconds spent loading checkpoints, collecting
attention maps (forward passes with ``hook_pattern`` hooked), computing the layerwise distance,
bootstrapping, and writing JSON/CSV/figure; then times the command itself (``probe compare nope
--json``, a fresh process: imports included). Writes bench/results/compare_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import header, write_json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="checkpoints")
    parser.add_argument("--task", default="scan")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--n-per-bucket", type=int, default=10)
    parser.add_argument("--metric", default="jsd", choices=("jsd", "reference-code"))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--skip-cli", action="store_true", help="do not time the `probe compare` process")
    args = parser.parse_args()

    started = time.perf_counter()
    import torch

    from probe.analysis import compare_report
    from probe.errors import ProbeError
    from probe.subjects.settings import ReadSettings

    imported = time.perf_counter() - started

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is visible to torch; use --device cpu", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    start = time.perf_counter()
    try:
        settings = ReadSettings(seed=args.seed, n_per_bucket=args.n_per_bucket, device=args.device)
        report = compare_report("nope", (), settings, root=args.checkpoints, task=args.task, metric=args.metric)
    except ProbeError as error:
        print(f"bench/compare.py: {error}", file=sys.stderr)
        return 2
    analysis_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        report.write(out)
        write_s = time.perf_counter() - start

    cli = None
    if not args.skip_cli:
        with tempfile.TemporaryDirectory() as out:
            command = [
                sys.executable,
                "-m",
                "probe.cli",
                "compare",
                "nope",
                "--checkpoints",
                args.checkpoints,
                "--task",
                args.task,
                "--seed",
                str(args.seed),
                "--device",
                args.device,
                "--n-per-bucket",
                str(args.n_per_bucket),
                "--metric",
                args.metric,
                "--json",
                "--out",
                out,
            ]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            cli = {"command": " ".join(command[2:]), "wall_s": time.perf_counter() - start, "exit": done.returncode}
            if done.returncode == 0:
                same = json.loads(done.stdout)
                same.pop("files")
                cli["same_json_as_library"] = same == json.loads(json.dumps(report.to_json()))

    first = report.results[0]
    model_config = json.loads((Path(report.a.path) / "config.json").read_text())["model"]
    timings = dict(report.timings)
    payload = {
        **header(
            "compare",
            "probe compare nope: NoPE vs every other PE and the NoPE' seed baseline, stage by stage",
            args.device,
            load_before,
        ),
        "checkpoints": str(Path(args.checkpoints).resolve()),
        "task_folder": report.task_folder,
        "model": {k: model_config[k] for k in ("n_layers", "n_heads", "d_model", "d_head")},
        "comparisons": [r.label for r in report.results],
        "n_buckets": len(first.buckets),
        "n_examples_per_comparison": first.overall.n_examples,
        "metric": args.metric,
        "stages_s": {"import": imported, **timings, "write_outputs": write_s},
        "analysis_total_s": analysis_s,
        "cli": cli,
        "per_layer": {r.label: r.overall.per_layer.mean.tolist() for r in report.results},
        "average": {r.label: float(r.overall.average.mean) for r in report.results},
    }
    path = write_json("compare", args.device, payload)

    print(
        f"{len(report.results)} comparisons × {first.overall.n_examples} examples ({len(first.buckets)} buckets), "
        f"{payload['model']['n_layers']} layers × {payload['model']['n_heads']} heads"
    )
    for stage, seconds in payload["stages_s"].items():
        print(f"  {stage:<14} {seconds:8.2f} s")
    if cli:
        print(f"  {'probe compare':<14} {cli['wall_s']:8.2f} s (fresh process, exit {cli['exit']})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
