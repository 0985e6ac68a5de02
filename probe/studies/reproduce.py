"""`probe reproduce`: train a study on the paper's splits, evaluate it, analyse its attention, and
report it beside the paper's own released numbers.

A study is a grid (``probe/studies/grids/<name>.toml``): tasks, options, preset and recipe. Every PE trains
at every seed, plus NoPE' (NoPE at the next seed), the baseline of Figure similarity_per_layer.
The report holds, per task, accuracy against length (Figure showcase) with the paper's curve;
the mean reciprocal rank per category and overall (Figures teaser and mrr-per-category), ours
and the paper's; D(NoPE, ·) per layer with the NoPE' baseline, in the exact JSD and in the
released code's metric (Figure similarity_per_layer); and the attended-distance histograms
(Figure attended_distance). Where ours disagrees with the paper, a sentence says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.analysis.eval_report import read_eval
from probe.errors import ProbeError
from probe.studies.plans import seed_baseline_blocks
from probe.studies.reproduce_report import RANKING_ONLY
from probe.studies.sweep import SweepRun, expand_grid, load_grid, run_state
from probe.training.engine import Engine

STUDIES = {"reduced": "reproduce", "section3": "section3", "paper": "paper"}
"""``--scale`` -> the grid it trains: the reduced study that fits a 2-core CPU (SCAN, copy, reverse at
``small``), the paper's Section 3 at ``tiny`` (its 17 scenarios, grids/section3.toml), or the paper's grid."""
SUMMARIES = "summaries"
Progress = Callable[[str], None]


def plan(
    scale: str, root: str | Path, *, seeds: int = 1, tasks: Sequence[str] = (), steps: int | None = None
) -> list[SweepRun]:
    """Every run of the study: each PE at seeds 0..seeds-1 and NoPE' (NoPE at seed ``seeds``);
    ``steps`` overrides the study's (a quick look, not the study)."""
    if scale not in STUDIES:
        raise ProbeError(f"unknown scale {scale!r}; choose one of {', '.join(STUDIES)}")
    if seeds < 1:
        raise ProbeError(f"--seeds must be at least 1, got {seeds}")
    grid = load_grid(STUDIES[scale]) | ({"steps": steps} if steps else {})
    blocks = [{"seed": list(range(seeds))}] if scale in RANKING_ONLY else seed_baseline_blocks(range(seeds))
    runs = [run for block in blocks for run in expand_grid({**grid, **block}, root)]
    unknown = sorted(set(tasks) - {run.config.task for run in runs})
    if unknown:
        raise ProbeError(
            f"the {scale} study has no task {unknown[0]!r}; its tasks: "
            f"{', '.join(dict.fromkeys(run.config.task for run in runs))}"
        )
    return [run for run in runs if not tasks or run.config.task in tasks]


def scenarios(runs: Sequence[SweepRun]) -> dict[str, list[SweepRun]]:
    """The runs of each scenario (a task folder: one task with its options), in the study's order."""
    out: dict[str, list[SweepRun]] = {}
    for run in runs:
        out.setdefault(run.path.parent.parent.name, []).append(run)
    return out


def train_and_evaluate(
    runs: Sequence[SweepRun],
    device: torch.device,
    *,
    jobs: int,
    stack: bool = False,
    engine: Engine | None = None,
    on_event: Callable[..., None] | None = None,
    on_scenario: Callable[[str, list[SweepRun]], None] | None = None,
) -> list[Any]:
    """Train the unfinished runs scenario by scenario (``probe train``'s local runners: side by side, or
    with ``stack`` the runs of one batch stream as one program), evaluating each scenario's runs that have
    no eval.json before the next scenario starts, then ``on_scenario(scenario, its runs)``, so a study
    stopped half-way keeps every scenario it finished; ``engine``: how steps run, the device's default if None.
    Returns the training results and failures."""
    from probe.training.parallel import train_parallel, train_stacked

    engine = engine or Engine.for_device(device)
    results: list[Any] = []
    for scenario, group in scenarios(runs).items():
        pairs = [(r.config, r.path) for r in group if run_state(r) not in ("done", "evaluate")]
        if pairs and stack:
            results += train_stacked(pairs, device, engine=engine, on_event=on_event)
        elif pairs:
            results += train_parallel(pairs, str(device), jobs=min(jobs, len(pairs)), on_event=on_event, engine=engine)
        evaluate(group, device)
        if on_scenario is not None:
            on_scenario(scenario, group)
    return results


def evaluate(runs: Sequence[SweepRun], device: torch.device) -> None:
    """Evaluate every trained run of ``runs`` that has no eval.json yet."""
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run

    for run in runs:
        if (run.path / "model.safetensors").is_file() and read_eval(run.path) is None:
            evaluate_run(
                Run(run.path, read_checkpoint_config(run.path)),
                n_test=run.eval_n,
                n_valid=run.eval_valid,
                device=device,
            )


def analyse(
    runs: Sequence[SweepRun],
    root: str | Path,
    device: torch.device,
    *,
    n_per_bucket: int = 10,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """D(NoPE, ·) per layer (both metrics, NoPE' baseline) and attended distances, per task folder,
    on the seed-0 runs (the paper's analyses use one model per PE)."""
    from probe.analysis import attended_distance_report, compare_report

    folders: dict[str, list[SweepRun]] = {}
    for run in runs:
        if run.config.seed == 0 and (run.path / "model.safetensors").is_file():
            folders.setdefault(run.path.parent.parent.name, []).append(run)
    out: dict[str, Any] = {}
    for folder, group in folders.items():
        task, options = group[0].config.task, group[0].config.task_options
        entry: dict[str, Any] = {"compare": {}, "distances": None}
        if "nope" in {r.config.pe for r in group} and len(group) > 1:
            for metric in ("jsd", "reference-code"):
                if progress:
                    progress(f"{folder}: D(NoPE, ·), {metric}")
                report = compare_report(
                    "nope",
                    root=root,
                    task=task,
                    options=options,
                    seed=0,
                    metric=metric,
                    n_per_bucket=n_per_bucket,
                    device=device,
                )
                entry["compare"][metric] = {"report": report.to_json(), "curves": report.curves()}
        if progress:
            progress(f"{folder}: attended distances")
        distances = attended_distance_report([r.path for r in group], n_per_bucket=n_per_bucket, device=device)
        entry["distances"] = {"report": distances.to_json(), "series": distances.series()}
        out[folder] = entry
    return out
