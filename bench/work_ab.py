"""A/B of the work the training step and every intervention's forward do, counted, not timed, between two checkouts.

    python bench/work_ab.py --old-tree /tmp/probe-old [--presets tiny small] [--name work_ab]

A timed A/B (``bench/ab_step.py``, ``bench/interventions.py``) on a shared 2-core machine moves by 5-25% from run
to run, more than a refactoring's cost, so a ``new / old <= 1.03`` target can be neither shown nor refuted
there. What a pass costs is the arithmetic torch dispatches plus the Python around it, and both can be counted:
each side (this file run with ``--worker``, that side's tree first on ``PYTHONPATH``, one torch thread) builds
the same model and batch, and records for one training step (``common.training_step``) and for one evaluation
forward under each variant of ``bench/interventions.py`` every aten operator it dispatches with its input
shapes (``TorchDispatchMode``, below autograd) and every Python function call (``sys.setprofile``). Per case
the driver reports whether the large operators (an input of at least 64^3 elements) are the same, the input
elements of all operators new / old, and the Python calls new / old; and, timed, the least wall time of a
1 x 4 forward over many (the arithmetic negligible: what the Python calls cost) on each side, turn by turn.
Writes bench/results/work_ab_cpu.json (``--name``: another name).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve()
BIG = 64**3  # an operator reading a tensor this large is arithmetic, not bookkeeping
VIEWS = ("view", "_unsafe_view", "reshape", "transpose", "permute", "expand", "as_strided", "unsqueeze", "t",
         "select", "slice", "detach", "alias", "squeeze")  # fmt: skip


class _Recorder(TorchDispatchMode):
    """Every aten operator dispatched, as ``name shapes``."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat = [t for a in args for t in (a if isinstance(a, list | tuple) else [a])]
        shapes = [list(t.shape) for t in flat if isinstance(t, torch.Tensor)]
        self.ops[f"{func.overloadpacket.__name__} {shapes}"] += 1
        return func(*args, **(kwargs or {}))


def counted(call) -> dict:
    """The operators and Python calls of one ``call()`` (after one warm-up call)."""
    call()
    with _Recorder() as recorder:
        call()
    calls = [0]

    def tracer(frame, event, arg) -> None:
        calls[0] += event == "call"

    sys.setprofile(tracer)
    try:
        call()
    finally:
        sys.setprofile(None)
    return {"ops": dict(recorder.ops), "python_calls": calls[0]}


def least_overhead(pe: str, forwards: int = 1500) -> float:
    """Microseconds: the least wall time of one eval forward of a 1 x 4 batch at ``tiny``."""
    from probe.models import build_model

    model = build_model(pe, vocab_size=24, preset="tiny", seed=0).eval()
    tokens = torch.randint(0, 24, (1, 4), generator=torch.Generator().manual_seed(0))
    best = math.inf
    with torch.no_grad():
        for _ in range(200):
            model(tokens)
        for _ in range(forwards):
            started = time.perf_counter()
            model(tokens)
            best = min(best, time.perf_counter() - started)
    return best * 1e6


def worker(args: argparse.Namespace) -> None:
    """Print the counts of every case as JSON (or, with ``--overhead``, one least time)."""
    torch.set_num_threads(1)
    if args.overhead:
        print(json.dumps(least_overhead(args.overhead)))
        return
    sys.path.insert(0, str(HERE.parent))
    from common import scan_batch, training_step
    from interventions import VOCAB, forwards

    from probe.models import build_model

    out = {}
    for preset in args.presets:
        for pe in args.pes:
            tokens, mask, vocab = scan_batch(32, 30, 0, torch.device("cpu"))
            model = build_model(pe, vocab_size=vocab, preset=preset, seed=0)
            out[f"{preset}/{pe}/step"] = counted(training_step(model, tokens, mask, torch.device("cpu")))
            model = build_model(pe, vocab_size=VOCAB, preset=preset, seed=0).eval()
            batch = torch.randint(0, VOCAB, (64, 64), generator=torch.Generator().manual_seed(0))
            for name, call in forwards(model, batch, pe).items():
                out[f"{preset}/{pe}/{name}"] = counted(call)
    print(json.dumps(out))


def _side(tree: Path, args: argparse.Namespace, *extra: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(HERE), "--worker", "--presets", *args.presets, "--pes", *args.pes, *extra]
    done = subprocess.run(command, env=env, cwd="/", capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _elements(ops: dict[str, int], big_only: bool = False) -> dict[str, int] | int:
    """Input elements of every operator (or, ``big_only``, the count of each large non-view operator)."""
    total, big = 0, Counter()
    for key, count in ops.items():
        name, shapes = key.split(" ", 1)
        sizes = [math.prod(shape) for shape in json.loads(shapes)]
        total += count * sum(sizes)
        if max(sizes, default=0) >= BIG and name not in VIEWS:
            big[name] += count
    return dict(big) if big_only else total


def compare(old: dict, new: dict) -> dict[str, dict]:
    """Per case: the large operators equal, input elements and Python calls new / old."""
    return {
        case: {
            "large_ops_equal": _elements(old[case]["ops"], True) == _elements(new[case]["ops"], True),
            "all_ops_equal": old[case]["ops"] == new[case]["ops"],
            "elements_new_over_old": _elements(new[case]["ops"]) / _elements(old[case]["ops"]),
            "python_calls": {"old": old[case]["python_calls"], "new": new[case]["python_calls"]},
        }
        for case in old
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required="--worker" not in sys.argv)
    parser.add_argument("--new-tree", type=Path, default=HERE.parent.parent)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--pes", nargs="+", default=["nope", "t5", "alibi", "rotary"])
    parser.add_argument("--turns", type=int, default=3, help="turns of the timed 1 x 4 forward, sides alternating")
    parser.add_argument("--name", default="work_ab")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--overhead", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    sys.path.insert(0, str(HERE.parent))
    from common import header, write_json

    load = os.getloadavg()
    cases = compare(_side(args.old_tree, args), _side(args.new_tree, args))
    overhead: dict[str, dict[str, list[float]]] = {}
    for pe in args.pes:
        times = overhead.setdefault(pe, {"old": [], "new": []})
        for _ in range(args.turns):
            for side, tree in (("old", args.old_tree), ("new", args.new_tree)):
                times[side].append(_side(tree, args, "--overhead", pe))
    for case, row in cases.items():
        calls = row["python_calls"]
        print(f"{case:32s} large ops {'equal' if row['large_ops_equal'] else 'DIFFER'}  elements "
              f"{row['elements_new_over_old']:.4f}  Python calls {calls['old']} -> {calls['new']}")  # fmt: skip
    for pe, times in overhead.items():
        print(f"least 1 x 4 forward, {pe}: old {min(times['old']):.0f} us, new {min(times['new']):.0f} us")
    payload = header("work_ab", __doc__.split("\n")[0], "cpu", load)
    payload.update(old_tree=str(args.old_tree), new_tree=str(args.new_tree), cases=cases, overhead_us=overhead)
    print(f"wrote {write_json(args.name, 'cpu', payload)}")


if __name__ == "__main__":
    main()
