"""The sweep report: the paper's aggregate over the runs' eval.json files (accuracy by length,
mean ranks per category of tasks), pretraining runs' held-out perplexity, and its figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.reference import category
from probe.studies.ranks import without_repeats
from probe.studies.sweep.grid import SweepRun
from probe.studies.sweep.manifest import read_manifest

ALL_TASKS = "all tasks"
"""The report's key for the ranks over every task without a scratchpad, beside one per category."""


def report(runs: Sequence[SweepRun]) -> dict[str, Any]:
    """The paper's aggregate over the runs' eval.json files: accuracy against length per task and
    PE (mean over seeds; Figure showcase) and each PE's mean rank overall and per category of
    tasks (Figures teaser and mrr-per-category). A run folder trained with other settings than the
    grid's (the grid edited since) counts as missing: its numbers are not this grid's."""
    return aggregate({run.label: run.path for run in runs}, stale=[run.label for run in runs if not _current(run)])


def _current(run: SweepRun) -> bool:
    """Whether ``run``'s folder holds a run trained with the grid's settings (a damaged one does not)."""
    from probe.studies.sweep.cost import run_state

    return run_state(run) in ("done", "evaluate")


def manifest_report(path: str | Path) -> dict[str, Any]:
    """:func:`report` of the runs a manifest lists, with the manifest's run counts by state
    (``states``). Run folders are found from the labels, relative to the manifest's folder (the
    checkpoints root), so a sweep's folder can be moved or copied from a cluster and still be read."""
    path = Path(path)
    manifest = read_manifest(path)
    summary = aggregate({e["label"]: path.parent / e["label"] for e in manifest["runs"]})
    return {**summary, "states": manifest.get("counts", {})}


def aggregate(runs: dict[str, Path], stale: Sequence[str] = ()) -> dict[str, Any]:
    """:func:`report` of run folders by label; a run without a readable eval.json, or ``stale`` (its folder
    holds another run's results), counts as missing."""
    from probe.analysis.eval_report import mean_over_seeds, read_eval
    from probe.analysis.evaluation import mean_ranks, mean_reciprocal_ranks

    evaluated, missing, pretrained = [], [], []
    for label, folder in runs.items():
        if label in stale:
            missing.append(label)
            continue
        result = read_eval(folder)
        if result is not None:
            evaluated.append(result)
        elif (code := _pretrained(folder)) is not None:
            pretrained.append(code)
        else:
            missing.append(label)
    rows = [
        {
            "task_folder": m.task_folder,
            "pe": m.pe,
            "seeds": m.seeds,
            "iid_accuracy": m.iid_accuracy,
            "ood_accuracy": m.ood_accuracy,
            "lengths": m.lengths,
            "accuracy": m.accuracy,
            "seen": m.seen,
        }
        for m in mean_over_seeds(evaluated)
    ]
    groups: dict[str, list] = {}
    for r in evaluated:
        groups.setdefault(category(r.task, r.task_options), []).append(r)
    plain = [r for r in evaluated if not r.task_options.get("scratchpad")]
    ranks = {ALL_TASKS: mean_ranks(plain), **{name: mean_ranks(group) for name, group in groups.items()}}
    reciprocal = {
        ALL_TASKS: mean_reciprocal_ranks(plain),
        **{name: mean_reciprocal_ranks(group) for name, group in groups.items()},
    }
    return {
        "runs": len(runs),
        "evaluated": len(evaluated),
        "missing": missing,
        "aggregate": rows,
        "pretrained": pretrained,
        "mean_rank": {name: value for name, value in ranks.items() if value},
        "mean_reciprocal_rank": {name: value for name, value in reciprocal.items() if value},
    }


def _pretrained(folder: Path) -> dict[str, Any] | None:
    """A finished code run's held-out perplexity at its training context, or None."""
    from probe.models.checkpoint import read_checkpoint_config
    from probe.subjects.resolve import is_language_model

    try:
        config = read_checkpoint_config(folder)
    except ProbeError:
        return None
    metrics = config.get("metrics", {})
    if not is_language_model(config) or "heldout_perplexity" not in metrics:
        return None
    return {
        "run": str(folder),
        "pe": config["pe"],
        "seed": config.get("training", {}).get("seed", 0),
        "heldout_perplexity": metrics["heldout_perplexity"],
    }


def report_figures(summary: dict[str, Any], out: str | Path) -> list[Path]:
    """Write :func:`report_figure_objects` under ``out`` (HTML, and PNG where kaleido can)."""
    from probe.figures import write_figure

    written: list[Path] = []
    for name, figure in report_figure_objects(summary).items():
        written += write_figure(figure, Path(out) / name)
    return written


def report_figure_objects(summary: dict[str, Any]) -> dict[str, Any]:
    """{file stem: plotly figure}: accuracy against length per task (one line per PE, mean over
    seeds) as ``accuracy_<task folder>``, and the bars per category of the mean reciprocal rank
    (``mean_reciprocal_rank``, the paper's figures) and of the plain mean rank (``mean_rank``)."""

    from probe.figures import accuracy_by_length, rank_figure
    from probe.models.registry import PE_LABELS

    figures: dict[str, Any] = {}
    by_folder: dict[str, list[dict[str, Any]]] = {}
    for row in summary["aggregate"]:
        by_folder.setdefault(row["task_folder"], []).append(row)
    for folder, rows in by_folder.items():
        curves = [
            {
                "label": f"{PE_LABELS.get(r['pe'], r['pe'])} ({len(r['seeds'])} seed{'s' * (len(r['seeds']) > 1)})",
                "pe": r["pe"],
                "lengths": r["lengths"],
                "accuracy": r["accuracy"],
            }
            for r in rows
        ]
        seen = [n for r in rows for n, s in zip(r["lengths"], r["seen"]) if s]
        figures[f"accuracy_{folder}"] = accuracy_by_length(
            curves, (min(seen), max(seen)) if seen else None, f"{folder}: exact match by length (mean over seeds)"
        )
    for key, title, axis in (
        (
            "mean_reciprocal_rank",
            "mean reciprocal rank by OOD accuracy (the paper's figures; higher is better)",
            "mean reciprocal rank (1 = always first)",
        ),
        ("mean_rank", "mean rank by OOD accuracy (1 = best; ties share)", "mean rank (lower is better)"),
    ):
        ranks = without_repeats(summary.get(key) or {}, ALL_TASKS)
        if not ranks:
            continue
        figures[key] = rank_figure(ranks, title, axis)
    return figures
