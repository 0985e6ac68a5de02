"""`probe sweep`: a grid of `probe train` + `probe eval` runs on Ray (local by default, or a cluster)."""

from __future__ import annotations

import argparse
from typing import Any

from probe.commands.common import add_checkpoints, add_json, console, duration, print_json
from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="train and evaluate a grid of runs on Ray (resumable; --grid paper for the paper's study)",
        description="Train and evaluate every run of a grid, each as a Ray task calling what `probe train` and "
        "`probe eval` call, into the same run folders. The grid comes from flags (repeatable --task, --pe, --seed, "
        "--scratchpad, -o KEY=VALUE) or --grid FILE.toml / a shipped name (default, smoke, paper); with --grid, "
        "--task/--pe/--seed/--scratchpad pick runs out of the grid and --preset/--steps/... override it. "
        "A rerun skips finished runs and resumes interrupted ones. Without --address a local Ray instance "
        "uses this machine's cores and GPUs.",
    )
    grid = parser.add_argument_group("the grid")
    grid.add_argument("--grid", metavar="NAME|FILE", help="a TOML grid file or a shipped grid name")
    grid.add_argument("--task", action="append", help="task (repeatable; default scan)")
    grid.add_argument("--pe", action="append", help="positional encoding (repeatable; default all)")
    grid.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0, plus NoPE seed 1)")
    grid.add_argument("--scratchpad", action="append", metavar="FORMAT", help="scratchpad format (repeatable; none for without)")
    grid.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                      help="task option; repeating a key sweeps its values (-o variant=count -o variant=random)")
    grid.add_argument("-m", "--model", action="append", default=[], metavar="KEY=VALUE",
                      help="model override, e.g. -m n_layers=1 -m d_model=32")
    grid.add_argument("--preset", help="model size: tiny, small or base (default tiny)")
    grid.add_argument("--steps", type=int, help="training steps (default: the preset's recipe)")
    grid.add_argument("--lr", type=float, help="peak learning rate (default: the preset's recipe)")
    grid.add_argument("--batch-size", type=int)
    grid.add_argument("--checkpoint-every", type=int, metavar="N", help="save resumable state every N steps")
    grid.add_argument("--eval-n", type=int, metavar="N", help="test examples per run (default: the whole test split)")
    grid.add_argument("--eval-valid", type=int, metavar="N", help="IID held-out examples per run (default 500)")
    grid.add_argument("--no-eval", action="store_true", help="train only")
    ray_group = parser.add_argument_group("Ray")
    ray_group.add_argument("--address", help="join a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: start a local one)")
    ray_group.add_argument("--cpus-per-run", type=float, default=1.0, metavar="N", help="CPUs each run asks Ray for (default 1)")
    ray_group.add_argument("--gpus-per-run", type=float, default=0.0, metavar="N",
                           help="GPUs each run asks for; a fraction shares one GPU (0.25: four runs per GPU). >0 trains on CUDA")
    ray_group.add_argument("--num-cpus", type=int, metavar="N", help="CPUs of the local Ray instance (default: all)")
    ray_group.add_argument("--max-retries", type=int, default=3, help="times Ray restarts a run whose worker died (default 3)")
    out = parser.add_argument_group("output")
    out.add_argument("--dry-run", action="store_true", help="print the runs, how many, and their estimated cost; start nothing")
    out.add_argument("--list", action="store_true", help="with --dry-run: list every run, not one row per task")
    out.add_argument("--tokens-per-second", type=float, metavar="N",
                     help="with --dry-run: price the grid at this training throughput instead of measuring it here")
    out.add_argument("--measure-steps", type=int, default=5, metavar="N", help="steps timed per model shape for the estimate")
    out.add_argument("--cluster-size", type=int, default=8, metavar="N", help="with --dry-run: also estimate wall time on N such slots")
    out.add_argument("--report", action="store_true", help="print the aggregate of the grid's evaluated runs; start nothing")
    out.add_argument("--out", metavar="DIR", help="where report figures go (default: CHECKPOINTS/sweep-NAME-report)")
    out.add_argument("--name", help="sweep name for the manifest CHECKPOINTS/sweep-NAME.json (default: the grid's name)")
    add_checkpoints(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def _pairs(pairs: list[str], what: str) -> dict[str, list[Any]]:
    import json

    values: dict[str, list[Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ProbeError(f"{what} {pair!r} is not KEY=VALUE")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        values.setdefault(key, []).append(parsed)
    return values


def build_grid(args: argparse.Namespace) -> dict[str, Any]:
    from probe.sweep import grid_from_flags, load_grid

    model = {k: v[-1] for k, v in _pairs(args.model, "model override").items()}
    train = {"preset": args.preset, "steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
             "checkpoint_every": args.checkpoint_every, "eval_n": args.eval_n, "eval_valid": args.eval_valid}
    if not args.grid:
        return grid_from_flags(tasks=args.task, pes=args.pe, seeds=args.seed, scratchpads=args.scratchpad,
                               options=_pairs(args.option, "option"), model=model, **train)
    if args.option:
        raise ProbeError("-o/--option cannot be combined with --grid; put task options in the grid file")
    grid = load_grid(args.grid)
    overrides = {k: v for k, v in train.items() if v is not None}
    for table in [grid, *grid.get("block", [])]:
        for key in overrides:
            table.pop(key, None)
        if model and "model" in table:
            table["model"] = {**table["model"], **model}
    grid.update(overrides)
    if model:
        grid["model"] = {**grid.get("model", {}), **model}
    return grid


def select(runs: list, args: argparse.Namespace) -> list:
    """With --grid, --task/--pe/--seed/--scratchpad pick runs out of it."""
    if not args.grid:
        return runs
    from probe.tasks.scratchpad import parse_format

    try:
        formats = None if args.scratchpad is None else {parse_format(f) for f in args.scratchpad}
    except ValueError as error:
        raise ProbeError(str(error)) from None
    picked = [r for r in runs
              if (args.task is None or r.config.task in args.task) and (args.pe is None or r.config.pe in args.pe)
              and (args.seed is None or r.config.seed in args.seed)
              and (formats is None or parse_format(r.config.task_options.get("scratchpad")) in formats)]
    if not picked:
        raise ProbeError(f"no run of grid {args.grid} matches the --task/--pe/--seed/--scratchpad given")
    return picked


def run(args: argparse.Namespace) -> int:
    from probe.sweep import expand_grid, manifest_path

    grid = build_grid(args)
    runs = select(expand_grid(grid, args.checkpoints), args)
    name = args.name or str(grid.get("name", "sweep"))
    out = console(stderr=args.json)
    if args.report:
        return show_report(runs, name, args, out)
    if args.dry_run:
        return dry_run(runs, name, args, out)
    for value, flag in ((args.max_retries, "--max-retries"), (args.num_cpus, "--num-cpus")):
        if value is not None and value < 0:
            raise ProbeError(f"{flag} must not be negative, got {value}")
    return execute(runs, name, manifest_path(args.checkpoints, name), args, out)


def _shape(key: str) -> str:
    import json

    preset, model = json.loads(key)
    return preset + "".join(f" {k}={v}" for k, v in model.items())


def dry_run(runs: list, name: str, args: argparse.Namespace, out) -> int:
    import os

    from rich.table import Table

    from probe.sweep import estimate_cost, run_state, wall_seconds

    states = [run_state(r, not args.no_eval) for r in runs]
    device = "cuda" if args.gpus_per_run > 0 else "cpu"
    with out.status("estimating cost") as status:
        cost = estimate_cost(runs, device=device, tokens_per_second=args.tokens_per_second,
                             measure_steps=args.measure_steps, threads=max(1, int(args.cpus_per_run)),
                             on_measure=status.update)
    seconds = cost["seconds"]
    if args.gpus_per_run > 0:
        slots, machine = max(1, int(1 / args.gpus_per_run)) if args.gpus_per_run < 1 else 1, "one GPU"
    else:
        slots, machine = max(1, int((os.cpu_count() or 1) // max(args.cpus_per_run, 1e-9))), "this machine's CPUs"
    wall_one = wall_seconds(seconds, slots)
    wall_cluster = wall_seconds(seconds, slots * args.cluster_size)
    table = Table(title=f"probe sweep {name} --dry-run: {len(runs)} runs under {args.checkpoints}")
    if args.list:
        columns = ("run", "preset", "steps", "state", "estimate")
        rows = [(r.label, r.config.preset, str(r.config.steps), s, duration(t)) for r, s, t in zip(runs, states, seconds)]
    else:
        columns = ("task", "PEs", "seeds", "preset", "steps", "runs", "to start", "estimate")
        groups: dict[str, list] = {}
        for r, s, t in zip(runs, states, seconds):
            groups.setdefault(r.path.parent.parent.name, []).append((r, s, t))
        rows = []
        for folder, members in groups.items():
            rows.append((folder, " ".join(dict.fromkeys(r.config.pe for r, _, _ in members)),
                         " ".join(str(x) for x in dict.fromkeys(r.config.seed for r, _, _ in members)),
                         " ".join(dict.fromkeys(r.config.preset for r, _, _ in members)),
                         " ".join(str(x) for x in dict.fromkeys(r.config.steps for r, _, _ in members)),
                         str(len(members)), str(sum(s != "done" for _, s, _ in members)), duration(sum(t for _, _, t in members))))
    for column in columns:
        numeric = column in ("steps", "runs", "to start", "estimate")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric)
    for row in rows:
        table.add_row(*row)
    out.print(table)
    counts = {s: states.count(s) for s in ("new", "resume", "evaluate", "done")}
    speed = "; ".join(f"{_shape(shape)}: {tps:,.0f} tokens/s" for shape, tps in cost["tokens_per_second"].items())
    out.print(f"runs: {len(runs)} ({counts['new']} new, {counts['resume']} to resume, {counts['evaluate']} to evaluate, "
              f"{counts['done']} done)")
    out.print(f"throughput ({cost['source']}): {speed or '-'}")
    out.print(f"estimated training time: {duration(cost['total_seconds'])} of run time in all; wall "
              f"{duration(wall_one)} on {machine} ({slots} run(s) at a time), {duration(wall_cluster)} on "
              f"{args.cluster_size} of them (evaluation not included; runs assumed not to slow each other)")
    if not args.list and len(runs) <= 40:
        out.print("[dim]--list shows every run[/dim]")
    if args.json:
        print_json({"name": name, "runs": [{**r.to_dict(), "state": s, "estimated_seconds": t}
                                           for r, s, t in zip(runs, states, seconds)],
                    "count": len(runs), "states": counts, "tokens_per_second": cost["tokens_per_second"],
                    "throughput_source": cost["source"], "device": device, "total_seconds": cost["total_seconds"],
                    "wall_seconds": {"1": wall_one, str(args.cluster_size): wall_cluster},
                    "runs_at_a_time": slots})
    return 0


def execute(runs: list, name: str, path, args: argparse.Namespace, out) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from probe import sweep

    manifest = sweep.Manifest(path, name, runs)
    if all(sweep.run_state(r, not args.no_eval) == "done" for r in runs):
        sweep.execute(runs, manifest, evaluate=not args.no_eval)  # marks them done; starts nothing
        out.print(f"all {len(runs)} runs of {name} are already done (manifest {path})")
        return finish(runs, manifest, name, args, out)
    with out.status("starting Ray" if not args.address else f"joining Ray at {args.address}"):
        cluster = sweep.connect(args.address, num_cpus=args.num_cpus)
        sweep.check_resources(cluster, args.cpus_per_run, args.gpus_per_run)
    manifest.ray = {**cluster, "cpus_per_run": args.cpus_per_run, "gpus_per_run": args.gpus_per_run,
                    "max_retries": args.max_retries}
    out.print(f"Ray: {cluster['nodes']} node(s), {cluster['cpus']:g} CPUs, {cluster['gpus']:g} GPUs; "
              f"each run asks for {args.cpus_per_run:g} CPU, {args.gpus_per_run:g} GPU; manifest {path}")
    columns = (TextColumn("{task.description:<40}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        state: dict[str, Any] = {"bars": {}, "steps": {}}
        overall = progress.add_task(f"sweep {name}", total=1, info="")

        def refresh() -> None:
            c = manifest.counts()
            left = c["pending"] + c["interrupted"]
            elsewhere = f"  elsewhere {c['elsewhere']}" if c["elsewhere"] else ""
            progress.update(overall, completed=sum(state["steps"].values()),
                            info=f"done {c['done']}  running {c['running']}  failed {c['failed']}{elsewhere}  left {left}")

        def on_event(event: dict[str, Any]) -> None:
            kind, label = event["kind"], event.get("label")
            if kind == "plan":
                state["steps"] = {lab: event["total_steps"][lab] - left for lab, left in event["left"].items()}
                progress.reset(overall, total=sum(event["total_steps"].values()) or 1, completed=sum(state["steps"].values()))
            elif kind == "start" and label not in state["bars"]:
                state["bars"][label] = progress.add_task(f"  {label}", total=1, info=event["node"]["host"])
            elif kind == "step":
                state["steps"][label] = event["step"]
                bar = state["bars"].get(label)
                if bar is not None:
                    loss = f"loss {event['loss']:.4f}" if "loss" in event else ""
                    progress.update(bar, total=event["total"], completed=event["step"], info=loss)
            elif kind == "finish":
                entry = event["entry"]
                if entry["state"] == "done":
                    state["steps"][label] = max(state["steps"].get(label, 0), entry.get("steps") or 0)
                bar = state["bars"].pop(label, None)
                if bar is not None:
                    progress.remove_task(bar)
                if entry["state"] == "failed":
                    progress.console.print(f"[red]failed[/red] {label}: {entry['error']}")
                elif entry["state"] == "elsewhere":
                    progress.console.print(f"[yellow]in use[/yellow] {label}: by {entry['held_by']}; left to it")
            refresh()

        sweep.execute(runs, manifest, cpus_per_run=args.cpus_per_run, gpus_per_run=args.gpus_per_run,
                      max_retries=args.max_retries, evaluate=not args.no_eval, on_event=on_event)
    return finish(runs, manifest, name, args, out)


def finish(runs: list, manifest, name: str, args: argparse.Namespace, out) -> int:
    from rich.table import Table

    table = Table(title=f"probe sweep {name}: {manifest.counts()['done']} done, {manifest.counts()['failed']} failed")
    perplexity = any("heldout_perplexity" in entry for entry in manifest.entries.values())
    for column in ("run", "state", "attempts", "node", "seconds", "IID", "OOD",
                   *(["held-out perplexity"] if perplexity else []), "error"):
        table.add_column(column)
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    for entry in manifest.entries.values():
        held_out = entry.get("heldout_perplexity")
        table.add_row(entry["label"], entry["state"], str(entry.get("attempts", 0)),
                      (entry.get("node") or {}).get("host", "-"),
                      "-" if entry.get("seconds") is None else f"{entry['seconds']:.0f}",
                      pct(entry.get("iid_accuracy")), pct(entry.get("ood_accuracy")),
                      *([("-" if held_out is None else f"{held_out:.2f}")] if perplexity else []),
                      entry.get("error") or (f"in use by {entry['held_by']}" if entry["state"] == "elsewhere" else ""))
    out.print(table)
    if manifest.counts()["elsewhere"]:
        out.print(f"[yellow]{manifest.counts()['elsewhere']} run(s) were in use by another process and left to it; "
                  "run the same sweep again once they are done to pick up their results[/yellow]")
    summary = None if args.no_eval else show_report(runs, name, args, out, quiet_json=True)
    if args.json:
        print_json({"manifest": manifest.to_dict(), "report": summary})
    return 1 if manifest.counts()["failed"] else 0


def show_report(runs: list, name: str, args: argparse.Namespace, out, quiet_json: bool = False):
    from pathlib import Path

    from rich.table import Table

    from probe.models.registry import PE_LABELS
    from probe.sweep import report, report_figures

    summary = report(runs)
    table = Table(title=f"probe sweep {name} --report: {summary['evaluated']} of {summary['runs']} runs evaluated "
                        "(exact match, mean over seeds)")
    for column in ("task", "PE", "seeds", "IID", "OOD", "by length (* unseen)"):
        table.add_column(column)
    for row in summary["aggregate"]:
        table.add_row(row["task_folder"], PE_LABELS.get(row["pe"], row["pe"]), str(len(row["seeds"])),
                      f"{100 * row['iid_accuracy']:.1f}%",
                      "-" if row["ood_accuracy"] is None else f"{100 * row['ood_accuracy']:.1f}%",
                      " ".join(f"{n}:{100 * a:.0f}" + ("" if s else "*")
                               for n, a, s in zip(row["lengths"], row["accuracy"], row["seen"])))
    if summary["aggregate"] or not summary["pretrained"]:
        out.print(table)
    for group, ranks in summary["mean_reciprocal_rank"].items():
        out.print(f"mean reciprocal rank ({group}; the paper's figures, 1 = always first): "
                  + ", ".join(f"{PE_LABELS.get(pe, pe)} {value:.2f}" for pe, value in ranks.items()))
    for group, ranks in summary["mean_rank"].items():
        out.print(f"mean rank ({group}; 1 = best): " + ", ".join(f"{PE_LABELS.get(pe, pe)} {rank:.2f}" for pe, rank in ranks.items()))
    for run in summary["pretrained"]:
        out.print(f"{run['run']}: held-out perplexity {run['heldout_perplexity']:.2f} at its training context", highlight=False)
    if summary["pretrained"]:
        out.print("perplexity against context size: probe perplexity --checkpoints " + str(args.checkpoints))
    if summary["missing"]:
        out.print(f"[yellow]{len(summary['missing'])} run(s) not evaluated yet[/yellow]"
                  + (f": {', '.join(summary['missing'][:5])}" + (" ..." if len(summary["missing"]) > 5 else "")))
    target = Path(args.out) if args.out else Path(args.checkpoints) / f"sweep-{name}-report"
    figures = [str(p) for p in report_figures(summary, target)] if summary["aggregate"] else []
    if figures:
        out.print(f"figures: {target}/ ({len(figures)} files)")
    summary["figures"] = figures
    if args.json and not quiet_json:
        print_json(summary)
    return summary if quiet_json else 0
