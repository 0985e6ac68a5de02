"""A sweep on the terminal: the plan and its estimated cost (``--dry-run``), live progress bars while
Ray runs it, the table of outcomes, and the report table, as ``probe sweep`` prints them. Each
returns what ``--json`` prints, so the command only parses flags and prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.studies.ranks import without_repeats
from probe.studies.sweep.cluster import check_resources, connect, execute
from probe.studies.sweep.cost import PRICED, duration, estimate_cost, plan_state, run_state, wall_seconds
from probe.studies.sweep.grid import SweepRun
from probe.studies.sweep.manifest import Manifest, manifest_path
from probe.studies.sweep.report import ALL_TASKS, report, report_figures


@dataclass(frozen=True)
class Launch:
    """Where a sweep's runs live, how each asks Ray for resources, and where its report goes."""

    checkpoints: str | Path
    evaluate: bool = True
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0  # a fraction shares one GPU; > 0 trains on CUDA
    max_retries: int = 3
    address: str | None = None  # None: a local Ray instance
    num_cpus: int | None = None  # of the local Ray instance (None: all)
    report_out: str | Path | None = None  # report figures (None: CHECKPOINTS/sweep-NAME-report)
    capture: bool | None = None  # each step a CUDA graph (None: on a GPU); False: eager


def _shape(key: str) -> str:
    """``small n_layers=8 bf16, rows ~64, vocabulary ~128, rotary``: a cost estimate's model shape, precision,
    row width, vocabulary and PE (with the options it was given), as the dry run prints it."""
    preset, model, precision, rows, vocabulary, pe, pe_options = json.loads(key)
    model_text = "".join(f" {k}={v}" for k, v in model.items()) + ("" if precision == "auto" else f" {precision}")
    options = "".join(f" {k}={v}" for k, v in pe_options.items())
    return f"{preset}{model_text}, rows ~{rows}, vocabulary ~{vocabulary}, {pe}{options}"


def dry_run(
    runs: Sequence[SweepRun],
    name: str,
    launch: Launch,
    out: Any,
    *,
    tokens_per_second: float | None = None,
    measure_steps: int = 5,
    cluster_size: int = 8,
    list_runs: bool = False,
) -> dict[str, Any]:
    """Print the runs (one row per task folder, or every run), their states and the estimated training
    time on this machine and on ``cluster_size`` such slots; start nothing. Returns the plan."""
    from probe.figures.terminal import fitted

    states = [plan_state(r, launch.evaluate) for r in runs]
    device = "cuda" if launch.gpus_per_run > 0 else "cpu"
    with out.status("estimating cost") as status:
        cost = estimate_cost(
            runs,
            device=device,
            tokens_per_second=tokens_per_second,
            measure_steps=measure_steps,
            threads=max(1, int(launch.cpus_per_run)),
            on_measure=status.update,
            states=states,
        )
    seconds = cost["seconds"]
    slots, machine = _slots(launch)
    wall_one = wall_seconds(seconds, slots)
    wall_cluster = wall_seconds(seconds, slots * cluster_size)
    title = f"probe sweep {name} --dry-run: {len(runs)} runs under {launch.checkpoints}"
    out.print(fitted(_plan_table(title, runs, states, seconds, list_runs), out))
    counts = {s: states.count(s) for s in dict.fromkeys(("new", "resume", "evaluate", "done", *states))}
    speed = "; ".join(f"{_shape(shape)}: {tps:,.0f} tokens/s" for shape, tps in cost["tokens_per_second"].items())
    out.print(_counts_line(counts))
    out.print(f"throughput ({cost['source']}): {speed or '-'}")
    out.print(
        f"estimated training time: {duration(cost['total_seconds'])} of run time in all; wall "
        f"{duration(wall_one)} on {machine} ({slots} run(s) at a time), {duration(wall_cluster)} on "
        f"{cluster_size} of them (checkpoint selection included, the evaluation after training not; runs assumed "
        "not to slow each other)"
    )
    if not list_runs and len(runs) <= 40:
        out.print("[dim]--list shows every run[/dim]")
    return {
        "name": name,
        "runs": [{**r.to_dict(), "state": s, "estimated_seconds": t} for r, s, t in zip(runs, states, seconds)],
        "count": len(runs),
        "states": counts,
        "tokens_per_second": cost["tokens_per_second"],
        "throughput_source": cost["source"],
        "device": device,
        "total_seconds": cost["total_seconds"],
        "wall_seconds": {"1": wall_one, str(cluster_size): wall_cluster},
        "runs_at_a_time": slots,
    }


def _counts_line(counts: dict[str, int]) -> str:
    """The dry run's count of runs by state, the states that start nothing (conflict, damaged, in use)
    named where there are any, so the counts add up to the runs."""
    others = "".join(f", {n} {s}" for s, n in counts.items() if s not in (*PRICED, "done"))
    return (
        f"runs: {sum(counts.values())} ({counts['new']} new, {counts['resume']} to resume, {counts['evaluate']} "
        f"to evaluate, {counts['done']} done{others})"
    )


def _slots(launch: Launch) -> tuple[int, str]:
    """How many runs one machine holds at a time at ``launch``'s resources per run, and what that
    machine is called in the dry run's estimate."""
    if launch.gpus_per_run > 0:
        return (max(1, int(1 / launch.gpus_per_run)) if launch.gpus_per_run < 1 else 1), "one GPU"
    cores = launch.num_cpus or os.cpu_count() or 1  # a fractional share still trains on a whole thread
    threads = max(1, int(launch.cpus_per_run))
    slots = min(cores // max(launch.cpus_per_run, 1e-9), cores // threads)
    return max(1, int(slots)), ("this machine's CPUs" if launch.num_cpus is None else f"{cores} CPUs")


def _plan_table(
    title: str, runs: Sequence[SweepRun], states: list[str], seconds: Sequence[float], list_runs: bool
) -> Any:
    """The dry run's table: one row per run with ``--list``, else one per task folder (a sweep
    can hold hundreds of runs)."""
    from rich.table import Table

    if list_runs:
        columns: tuple[str, ...] = ("run", "preset", "steps", "state", "estimate")
        rows = [
            (r.label, r.config.preset, str(r.config.steps), s, duration(t)) for r, s, t in zip(runs, states, seconds)
        ]
    else:
        columns = ("task", "PEs", "seeds", "preset", "steps", "runs", "to start", "estimate")
        groups: dict[str, list] = {}
        for r, s, t in zip(runs, states, seconds):
            groups.setdefault(r.path.parent.parent.name, []).append((r, s, t))
        rows = [_folder_row(folder, members) for folder, members in groups.items()]
    table = Table(title=title)
    for column in columns:
        numeric = column in ("steps", "runs", "to start", "estimate")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric)
    for row in rows:
        table.add_row(*row)
    return table


def _folder_row(folder: str, members: list[tuple[SweepRun, str, float]]) -> tuple[str, ...]:
    """One task folder's row of the dry run: the distinct PEs, seeds, presets and steps of its
    runs, how many are left to start and their estimated time."""
    return (
        folder,
        " ".join(dict.fromkeys(r.config.pe for r, _, _ in members)),
        " ".join(str(x) for x in dict.fromkeys(r.config.seed for r, _, _ in members)),
        " ".join(dict.fromkeys(r.config.preset for r, _, _ in members)),
        " ".join(str(x) for x in dict.fromkeys(r.config.steps for r, _, _ in members)),
        str(len(members)),
        str(sum(s in PRICED for _, s, _ in members)),
        duration(sum(t for _, _, t in members)),
    )


def run_with_progress(runs: Sequence[SweepRun], name: str, launch: Launch, out: Any) -> Manifest:
    """Run the sweep on Ray (:func:`probe.studies.sweep.execute`) with one progress bar per running run and one
    for the whole sweep; a sweep whose runs are all done starts nothing. Returns its manifest."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    path = manifest_path(launch.checkpoints, name)
    manifest = Manifest(path, name, runs)
    if all(run_state(r, launch.evaluate) == "done" for r in runs):
        execute(runs, manifest, evaluate=launch.evaluate)  # marks them done; starts nothing
        out.print(f"all {len(runs)} runs of {name} are already done (manifest {path})")
        return manifest
    _join_ray(launch, manifest, out)
    columns = (
        TextColumn("{task.description:<40}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=out, transient=False) as progress:
        bars = _ProgressBars(progress, manifest, progress.add_task(f"sweep {name}", total=1, info=""))
        execute(
            runs,
            manifest,
            cpus_per_run=launch.cpus_per_run,
            gpus_per_run=launch.gpus_per_run,
            max_retries=launch.max_retries,
            evaluate=launch.evaluate,
            capture=launch.capture,
            on_event=bars.on_event,
        )
    return manifest


def _join_ray(launch: Launch, manifest: Manifest, out: Any) -> None:
    """Start or join Ray, check that a run fits on some node, and record the cluster in the
    manifest, so a sweep that cannot run fails before its progress bars are drawn."""
    with out.status("starting Ray" if not launch.address else f"joining Ray at {launch.address}"):
        cluster = connect(launch.address, num_cpus=launch.num_cpus)
        check_resources(cluster, launch.cpus_per_run, launch.gpus_per_run)
    manifest.ray = {
        **cluster,
        "cpus_per_run": launch.cpus_per_run,
        "gpus_per_run": launch.gpus_per_run,
        "max_retries": launch.max_retries,
    }
    out.print(
        f"Ray: {cluster['nodes']} node(s), {cluster['cpus']:g} CPUs, {cluster['gpus']:g} GPUs; "
        f"each run asks for {launch.cpus_per_run:g} CPU, {launch.gpus_per_run:g} GPU; manifest {manifest.path}"
    )


class _ProgressBars:
    """The sweep's progress: one bar for the whole sweep (steps of every run) and one per running
    run, moved by :func:`execute`'s events."""

    def __init__(self, progress: Any, manifest: Manifest, overall: Any) -> None:
        self.progress, self.manifest, self.overall = progress, manifest, overall
        self.bars: dict[str, Any] = {}
        self.steps: dict[str, int] = {}

    def refresh(self) -> None:
        """The whole sweep's bar: steps done and the manifest's counts."""
        c = self.manifest.counts()
        left = c["pending"] + c["interrupted"]
        elsewhere = f"  elsewhere {c['elsewhere']}" if c["elsewhere"] else ""
        self.progress.update(
            self.overall,
            completed=sum(self.steps.values()),
            info=f"done {c['done']}  running {c['running']}  failed {c['failed']}{elsewhere}  left {left}",
        )

    def on_event(self, event: dict[str, Any]) -> None:
        """Move the bars by one event of :func:`execute` (plan, start, step, finish)."""
        kind, label = event["kind"], event.get("label")
        if kind == "plan":
            self.steps = {lab: event["total_steps"][lab] - left for lab, left in event["left"].items()}
            self.progress.reset(
                self.overall, total=sum(event["total_steps"].values()) or 1, completed=sum(self.steps.values())
            )
        elif kind == "start" and label not in self.bars:
            self.bars[label] = self.progress.add_task(f"  {label}", total=1, info=event["node"]["host"])
        elif kind == "step":
            self.steps[label] = event["step"]
            bar = self.bars.get(label)
            if bar is not None:
                loss = f"loss {event['loss']:.4f}" if "loss" in event else ""
                self.progress.update(bar, total=event["total"], completed=event["step"], info=loss)
        elif kind == "finish":
            self._finish(label, event["entry"])
        self.refresh()

    def _finish(self, label: str, entry: dict[str, Any]) -> None:
        """A run's result is in: count its steps, drop its bar, and say why when it did not finish."""
        if entry["state"] == "done":
            self.steps[label] = max(self.steps.get(label, 0), entry.get("steps") or 0)
        bar = self.bars.pop(label, None)
        if bar is not None:
            self.progress.remove_task(bar)
        if entry["state"] == "failed":
            self.progress.console.print(f"[red]failed[/red] {label}: {entry['error']}")
        elif entry["state"] == "elsewhere":
            self.progress.console.print(f"[yellow]in use[/yellow] {label}: by {entry['held_by']}; left to it")


def show_outcome(runs: Sequence[SweepRun], manifest: Manifest, name: str, launch: Launch, out: Any) -> dict[str, Any]:
    """Print each run's outcome (state, attempts, node, time, accuracy or perplexity, error) and, when the
    runs were evaluated, the report; returns the manifest and the report."""
    from rich.table import Table

    entries = [manifest.entries[r.label] for r in runs]  # this invocation's: the manifest keeps others' too
    counts = {state: sum(e["state"] == state for e in entries) for state in ("done", "failed", "elsewhere")}
    table = Table(title=f"probe sweep {name}: {counts['done']} done, {counts['failed']} failed")
    perplexity = any("heldout_perplexity" in entry for entry in entries)
    for column in (
        "run",
        "state",
        "attempts",
        "node",
        "seconds",
        "IID",
        "OOD",
        *(["held-out perplexity"] if perplexity else []),
        "error",
    ):
        table.add_column(column)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    for entry in entries:
        held_out = entry.get("heldout_perplexity")
        table.add_row(
            entry["label"],
            entry["state"],
            str(entry.get("attempts", 0)),
            (entry.get("node") or {}).get("host", "-"),
            "-" if entry.get("seconds") is None else f"{entry['seconds']:.0f}",
            pct(entry.get("iid_accuracy")),
            pct(entry.get("ood_accuracy")),
            *([("-" if held_out is None else f"{held_out:.2f}")] if perplexity else []),
            entry.get("error") or (f"in use by {entry['held_by']}" if entry["state"] == "elsewhere" else ""),
        )
    out.print(table)
    if counts["elsewhere"]:
        out.print(
            f"[yellow]{counts['elsewhere']} run(s) were in use by another process and left to it; "
            "run the same sweep again once they are done to pick up their results[/yellow]"
        )
    summary = show_report(runs, name, launch, out) if launch.evaluate else None
    return {"manifest": manifest.to_dict(), "report": summary}


def show_report(runs: Sequence[SweepRun], name: str, launch: Launch, out: Any) -> dict[str, Any]:
    """Print the aggregate of the runs' evaluations (accuracy by length, mean ranks) and pretraining runs'
    perplexity, write the report figures; returns :func:`probe.studies.sweep.report` with ``figures``."""
    from rich.table import Table

    from probe.models.registry import PE_LABELS

    summary = report(runs)
    table = Table(
        title=f"probe sweep {name} --report: {summary['evaluated']} of {summary['runs']} runs evaluated "
        "(exact match, mean over seeds)"
    )
    for column in ("task", "PE", "seeds", "IID", "OOD", "by length (* unseen)"):
        table.add_column(column)
    for row in summary["aggregate"]:
        table.add_row(
            row["task_folder"],
            PE_LABELS.get(row["pe"], row["pe"]),
            str(len(row["seeds"])),
            f"{100 * row['iid_accuracy']:.1f}%",
            "-" if row["ood_accuracy"] is None else f"{100 * row['ood_accuracy']:.1f}%",
            " ".join(
                f"{n}:{100 * a:.0f}" + ("" if s else "*")
                for n, a, s in zip(row["lengths"], row["accuracy"], row["seen"])
            ),
        )
    if summary["aggregate"] or not summary["pretrained"]:
        out.print(table)
    for group, ranks in without_repeats(summary["mean_reciprocal_rank"], ALL_TASKS).items():
        out.print(
            f"mean reciprocal rank ({group}; the paper's figures, 1 = always first): "
            + ", ".join(f"{PE_LABELS.get(pe, pe)} {value:.2f}" for pe, value in ranks.items())
        )
    for group, ranks in without_repeats(summary["mean_rank"], ALL_TASKS).items():
        out.print(
            f"mean rank ({group}; 1 = best): "
            + ", ".join(f"{PE_LABELS.get(pe, pe)} {rank:.2f}" for pe, rank in ranks.items())
        )
    for run in summary["pretrained"]:
        out.print(
            f"{run['run']}: held-out perplexity {run['heldout_perplexity']:.2f} at its training context",
            highlight=False,
        )
    if summary["pretrained"]:
        out.print("perplexity against context size: probe perplexity --checkpoints " + str(launch.checkpoints))
    if summary["missing"]:
        out.print(
            f"[yellow]{len(summary['missing'])} run(s) not evaluated yet[/yellow]"
            + (f": {', '.join(summary['missing'][:5])}" + (" ..." if len(summary["missing"]) > 5 else ""))
        )
    target = Path(launch.report_out) if launch.report_out else Path(launch.checkpoints) / f"sweep-{name}-report"
    figures = [str(p) for p in report_figures(summary, target)] if summary["aggregate"] else []
    if figures:
        out.print(f"figures: {target}/ ({len(figures)} files)")
    summary["figures"] = figures
    return summary
