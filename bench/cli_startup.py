"""How long the CLI takes to answer when it has nothing to compute: `probe --help`, every subcommand's
`--help`, and usage errors (a mistyped command, an unknown flag, a bad choice). Each case is a fresh
process (``python -c "from probe.cli import main; ..."``, this checkout first on ``sys.path``), timed
end to end, wall and CPU; the cases are interleaved, rotated by one each repeat, and the median is
reported beside bare ``python -c pass``. The target is under a second per case.

``--repo DIR`` times another checkout (e.g. an older commit in a git worktree) instead, for a before
and after. Writes bench/results/cli_startup_cpu.json (or ``--name``)."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import header, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from probe.cli import COMMANDS  # noqa: E402

CALL = "from probe.cli import main; raise SystemExit(main())"
ERRORS = {
    "mistyped command": ["evl"],
    "unknown flag": ["eval", "--bogus"],
    "bad choice": ["extrapolate", "--family", "temprature"],
    "missing argument": ["compare"],
}


def cases() -> dict[str, list[str]]:
    """Every case timed: its name and the CLI's arguments (None: bare Python)."""
    # `import` is released.py's command name (a Python keyword cannot be a module)
    names = ["import" if name == "released" else name for name in COMMANDS]
    return (
        {"python -c pass": None, "probe --help": ["--help"]}
        | {f"probe {name} --help": [name, "--help"] for name in names}
        | {f"usage error: {what}": argv for what, argv in ERRORS.items()}
    )


def time_case(argv: list[str] | None, repo: Path) -> tuple[float, float, int]:
    """(wall, CPU of the child) seconds and the exit status of one fresh process."""
    command = [sys.executable, "-c", "pass"] if argv is None else [sys.executable, "-c", CALL, *argv]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent, help="checkout timed")
    parser.add_argument("--name", default="cli_startup", help="result name (default cli_startup)")
    args = parser.parse_args()
    load = os.getloadavg()
    named = cases()
    order = list(named)
    walls: dict[str, list[float]] = {name: [] for name in order}
    cpus: dict[str, list[float]] = {name: [] for name in order}
    status: dict[str, int] = {}
    for repeat in range(args.repeats):
        for name in order[repeat % len(order) :] + order[: repeat % len(order)]:
            wall, cpu, status[name] = time_case(named[name], args.repo.resolve())
            walls[name].append(wall)
            cpus[name].append(cpu)
    results = {
        name: {
            "argv": named[name],
            "exit_status": status[name],
            "median_wall_s": statistics.median(walls[name]),
            "median_cpu_s": statistics.median(cpus[name]),
            "wall_s": walls[name],
            "cpu_s": cpus[name],
        }
        for name in order
    }
    payload = header("cli_startup", "seconds until the CLI answers: help and usage errors", "cpu", load)
    payload |= {"repo": str(args.repo.resolve()), "repeats": args.repeats, "target_s": 1.0, "cases": results}
    path = write_json(args.name, "cpu", payload)
    width = max(map(len, order))
    print(f"{'case':<{width}}  median wall  median CPU  exit")
    for name, r in results.items():
        print(f"{name:<{width}}  {r['median_wall_s']:>9.2f} s  {r['median_cpu_s']:>8.2f} s  {r['exit_status']:>4}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
