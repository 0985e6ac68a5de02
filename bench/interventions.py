"""Forward time under each inference-time intervention relative to the untouched model (issue 41: <= 1.10x),
or, with ``--old-tree``, against another checkout of probe (issue 51: new / old <= 1.03 on every variant).

    python bench/interventions.py [--device cuda] [--presets tiny small] [--length 64] [--batch 64]
    python bench/interventions.py --old-tree /tmp/probe-old [--turns 15]
    python bench/interventions.py --reuse --docs     # the table of docs/extrapolation.md from the results file

Per preset and PE (NoPE, T5, Rotary), the evaluation forward pass (eval mode, no gradient) on a batch of
random tokens at ``--length`` (SCAN's unseen test sequences are 30 to 60 tokens; a PE's cost does not depend
on what the tokens say), untouched and under each intervention of :mod:`probe.models.interventions`, all
variants interleaved in one run. ``hooked`` is the untouched model on its explicit attention path (an
identity hook on every layer's scores): every score intervention takes that path, so ``hooked`` / ``none``
is what the path costs and each intervention / ``hooked`` what its own elementwise work costs.
Writes bench/results/interventions_<device>.json; ``--docs`` renders it into docs/extrapolation.md.

With ``--old-tree``, each side is a worker process (this file run with ``--worker``, that side's tree first on
``PYTHONPATH``, one torch thread) that builds the same model and batch and times every variant's forward
passes on process CPU time; the driver asks both sides for one variant after the other, alternating which
side goes first, and reports per variant the median over turns of new / old. A side attaches an intervention
the way its checkout does (``probe.models.attach.attached``, or the older hooks). Writes
bench/results/interventions_ab_cpu.json (``--name``: another name).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import torch
from common import RESULTS, add_common_args, fill_block, header, interleave, medians, paired_ratio, setup, write_json

from probe.models import build_model
from probe.models.interventions import Intervention

HERE = Path(__file__).resolve()

TARGET = 1.10
VOCAB = 24
DOCS = HERE.parent.parent / "docs" / "extrapolation.md"
COLUMNS = {  # each variant's column in the docs' table, in its order
    "hooked": "explicit path (identity hook)",
    "temperature": "temperature",
    "log-length": "log-length",
    "head-temperature": "per-head",
    "window+sinks": "window + sinks",
    "log-length+window": "log-length + window",
    "cap": "cap",
}


def variants_of(pe: str, length: int) -> dict[str, Intervention | None]:
    trained = length // 2  # as if trained on half the length read: log-length and cap act on the far half
    out: dict[str, Intervention | None] = {
        "none": None,
        "temperature": Intervention(temperature=0.8),
        "log-length": Intervention(log_length=trained),
        "head-temperature": None,  # filled per model (its shape)
        "window+sinks": Intervention(window=trained, sinks=4),
        "log-length+window": Intervention(log_length=trained, window=trained, sinks=4),
    }
    if pe != "nope":
        out["cap"] = Intervention(cap=trained - 1)
    return out


def under(model, spec: Intervention | None) -> Callable[[], AbstractContextManager]:
    """A context in which ``model`` attends under ``spec`` (None: untouched), however this checkout attaches it."""
    if spec is None:
        return ExitStack
    try:
        from probe.models.attach import attached
    except ImportError:  # a checkout from before attach(): interventions were hooks
        from probe.models.intervention_hooks import intervention_hooks

        hooks = intervention_hooks(model, spec)
        return lambda: model.hooks(fwd_hooks=hooks)
    return lambda: attached(model, spec)


def plan_for(model, pe: str, length: int) -> dict[str, Intervention | None]:
    cfg = model.cfg
    plan = variants_of(pe, length)
    plan["head-temperature"] = Intervention(
        head_temperatures=tuple(tuple(0.9 + 0.05 * h for h in range(cfg.n_heads)) for _ in range(cfg.n_layers))
    )
    return plan


def forwards(model, tokens: torch.Tensor, pe: str) -> dict[str, Callable[[], None]]:
    """{variant: one evaluation forward under it}, ``hooked`` the untouched model on its explicit path."""
    identity = [(f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook: s) for layer in range(model.cfg.n_layers)]

    def forward(context: Callable[[], AbstractContextManager]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad(), context():
                model(tokens)

        return run

    calls = {"hooked": forward(lambda: model.hooks(fwd_hooks=identity))}
    for name, spec in plan_for(model, pe, tokens.size(1)).items():
        calls[name] = forward(under(model, spec))
    return calls


def worker(args: argparse.Namespace) -> None:
    """Answer each variant named on stdin with the CPU seconds of ``--calls`` forward passes under it."""
    torch.set_num_threads(1)
    model = build_model(args.pe, vocab_size=VOCAB, preset=args.preset, seed=args.seed).eval()
    tokens = torch.randint(0, VOCAB, (args.batch, args.length), generator=torch.Generator().manual_seed(args.seed))
    calls = forwards(model, tokens, args.pe)
    for call in calls.values():  # warm-up
        call(), call()
    print(json.dumps(list(calls)), flush=True)
    for line in sys.stdin:
        started = time.process_time()
        for _ in range(args.calls):
            calls[line.strip()]()
        print(json.dumps(time.process_time() - started), flush=True)


def spawn(tree: Path, args: argparse.Namespace, preset: str, pe: str) -> tuple[subprocess.Popen, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    options = ["--preset", preset, "--pe", pe, "--batch", str(args.batch), "--length", str(args.length)]
    options += ["--calls", str(args.calls), "--seed", str(args.seed)]
    command = [sys.executable, str(HERE), "--worker", *options]
    process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
    return process, json.loads(process.stdout.readline())


def ask(process: subprocess.Popen, variant: str) -> float:
    process.stdin.write(variant + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def against_old(args: argparse.Namespace) -> None:
    """new / old per variant, the two checkouts side by side (module docstring)."""
    load = os.getloadavg()
    results: dict[str, dict] = {}
    for preset in args.presets:
        for pe in args.pes:
            (old, names), (new, _) = spawn(args.old_tree, args, preset, pe), spawn(args.new_tree, args, preset, pe)
            sides, row = {"old": old, "new": new}, {}
            for name in names:
                ratios, times = [], {"old": [], "new": []}
                for turn in range(args.turns):
                    order = ("old", "new") if turn % 2 == 0 else ("new", "old")
                    got = {side: ask(sides[side], name) for side in order}
                    for side in got:
                        times[side].append(got[side] / args.calls)
                    ratios.append(got["new"] / got["old"])
                row[name] = {
                    "new_over_old": statistics.median(ratios),
                    "old_s": statistics.median(times["old"]),
                    "new_s": statistics.median(times["new"]),
                }
            for process in sides.values():
                process.stdin.close()
                process.wait()
            results[f"{preset}/{pe}"] = row
            print(f"{preset}/{pe}: " + "  ".join(f"{n} {r['new_over_old']:.3f}" for n, r in row.items()), flush=True)
    worst = max(r["new_over_old"] for row in results.values() for r in row.values())
    payload = header(
        "interventions_ab",
        f"evaluation forward pass at T = {args.length}, batch {args.batch}, under each intervention, new checkout / "
        "old checkout; process CPU time, one torch thread; median over alternating turns of per-turn ratios",
        "cpu",
        load,
    ) | {
        "old_tree": str(args.old_tree),
        "new_tree": str(args.new_tree),
        "target": 1.03,
        "worst_new_over_old": worst,
        "meets_target": worst <= 1.03,
        "turns": args.turns,
        "calls_per_turn": args.calls,
        "results": results,
    }
    path = write_json(args.name or "interventions_ab", "cpu", payload)
    print(f"worst new / old: {worst:.3f} (target 1.03); wrote {path}")


def docs_table(payload: dict) -> str:
    """The page's table: each preset and PE's forward pass under each variant over the untouched model, with
    how it was measured and beside what load."""
    from probe.models.registry import PE_LABELS

    load = payload["load_average_1_5_15min"]["before"][0]
    lines = [
        f"`python bench/{payload['command'].removeprefix('python ').removeprefix('bench/')}` "
        f"(`bench/results/interventions_{payload['device']}.json`, {payload['machine']['cpu']}, "
        f"{payload['machine']['torch_threads']} thread, load average {load:.1f} before it): {payload['what']}; "
        f"{payload['timing']}.",
        "",
        "| preset / PE | " + " | ".join(COLUMNS.values()) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for key, result in payload["results"].items():
        preset, pe = key.split("/")
        ratios = result["vs_none"]
        cells = [f"{ratios[n]:.2f}" if n in ratios else "–" for n in COLUMNS]
        lines.append(f"| {preset} / {PE_LABELS.get(pe, pe)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=30)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--pes", nargs="+", default=["nope", "t5", "rotary"])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=4, help="forward passes per variant per repeat")
    parser.add_argument("--old-tree", type=Path, help="another checkout: time each variant new / old")
    parser.add_argument("--new-tree", type=Path, default=HERE.parent.parent)
    parser.add_argument("--turns", type=int, default=15, help="with --old-tree: turns per variant")
    parser.add_argument("--name", help="with --old-tree: results file bench/results/<name>_cpu.json")
    parser.add_argument("--docs", action="store_true", help="render the results into docs/extrapolation.md")
    parser.add_argument("--reuse", action="store_true", help="with --docs: render the committed results, no timing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--preset", default="tiny", help=argparse.SUPPRESS)
    parser.add_argument("--pe", default="nope", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.old_tree is not None:
        return against_old(args)
    if args.reuse:
        fill_block(DOCS, "interventions", docs_table(json.loads((RESULTS / "interventions_cpu.json").read_text())))
        return None
    device = setup(args)
    load = os.getloadavg()
    tokens = torch.randint(0, VOCAB, (args.batch, args.length), generator=torch.Generator().manual_seed(args.seed))
    tokens = tokens.to(device)
    results: dict[str, dict] = {}
    for preset in args.presets:
        for pe in args.pes:
            model = build_model(pe, vocab_size=VOCAB, preset=preset, seed=args.seed, device=device).eval()
            calls = forwards(model, tokens, pe)
            print(f"{preset} {pe}: {len(calls)} variants", flush=True)
            runs = interleave(calls, repeats=args.repeats, calls=args.calls, warmup=2, device=device)
            primary = "wall" if device.type == "cuda" else "cpu"
            results[f"{preset}/{pe}"] = {
                "forward_s": medians(runs[primary]),
                "vs_none": {n: paired_ratio(runs[primary], n, "none")["median"] for n in calls if n != "none"},
                "vs_hooked": {
                    n: paired_ratio(runs[primary], n, "hooked")["median"] for n in calls if n not in ("none", "hooked")
                },
                "runs_s": runs,
            }
    worst = max(r for key in results for n, r in results[key]["vs_none"].items() if n != "hooked")
    payload = header(
        "interventions",
        f"evaluation forward pass at T = {args.length}, batch {args.batch}, under each intervention, against none",
        device,
        load,
    ) | {
        "target": TARGET,
        "worst_vs_none": worst,
        "meets_target": worst <= TARGET,
        "timing": f"{args.repeats} interleaved repeats of {args.calls} forward passes per variant, ratios are "
        "medians of per-repeat ratios on the process CPU clock (wall on CUDA)",
        "results": results,
    }
    path = write_json("interventions", device, payload)
    for key, r in results.items():
        print(key, "  ".join(f"{n} {v:.3f}" for n, v in r["vs_none"].items()))
    print(f"worst against none: {worst:.3f} (target {TARGET}); wrote {path}")
    if args.docs and device.type == "cpu":
        fill_block(DOCS, "interventions", docs_table(payload))


if __name__ == "__main__":
    main()
