"""A study's results as small files that outlive its checkpoints: one summary per scenario and seed,
written as soon as that scenario's runs are evaluated, and merged back into eval reports.

A summary holds, per run, what a report needs (IID and OOD exact match, exact match per length with
its counts, the step selected on IID validation, the training seconds, the forward pass's precision, the
code versions that trained it, and where the study asks, the attended-distance histograms), every setting its
runs trained with, and nothing heavy (no weights),
so a study can be run in parts (seeds in separate sittings, scenarios on other machines) and committed
as it lands. :func:`merge` puts the parts back together and names every part the study expects that
is not there, rather than ranking on fewer runs without saying so.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.analysis.distances import read_attended
from probe.analysis.eval_report import EvalReport, read_eval
from probe.atomic import atomic_write_json
from probe.errors import ProbeError
from probe.runs.folders import recorded_precision
from probe.runs.provenance import code_version
from probe.studies.ladder import Ladder
from probe.tasks import get as get_task
from probe.tasks.decoding import decode_positions
from probe.training.train_config import BOOKKEEPING, TrainConfig

FORMAT = 1
RECIPE_KEYS = ("preset", "steps", "batch_size", "lr", "dropout", "protocol", "pack", "pack_width")
RECIPE_LEGACY = {"pack_width": 2}  # what a summary written before a recipe key was recorded trained with
# Every summary written before rows recorded it trained in float32: all on CPUs at preset tiny, where auto is
# float32 (probe.presets.CPU_BF16); no study had run on a GPU.
ROW_LEGACY = {"forward_precision": "float32"}
PART_KEYS = ("task", "pe", "seed", "task_options", "pe_options")  # which run of a part, not how it trained


def recipe(config: TrainConfig) -> dict[str, Any]:
    """The headline recipe a report shows per scenario (preset, steps, batch, learning rate, ...)."""
    return {key: getattr(config, key) for key in RECIPE_KEYS}


def settings(config: TrainConfig) -> dict[str, Any]:
    """Every other setting that decides a run's weights (schedule, weight decay, model overrides, ...): a part
    is reused only by a study that would train it alike. Not the precision asked: the one a run trains in
    (:meth:`~probe.training.train_config.TrainConfig.forward_precision`) is each row's, so ``auto`` and
    ``float32`` on a CPU at ``tiny`` are alike."""
    skip = {*RECIPE_KEYS, *PART_KEYS, *BOOKKEEPING, "precision"}
    return {key: value for key, value in config.to_dict().items() if key not in skip}


def summary_name(scenario: str, seed: int, tag: str = "") -> str:
    """``<scenario><tag>+seed<k>.json``: one file per scenario (a task folder), rung of the recipe rule
    (``tag``: :meth:`~probe.studies.ladder.Ladder.tag`, empty for the first) and seed."""
    return f"{scenario}{tag}+seed{seed}.json"


def scenario_summary(study: str, scenario: str, runs: Sequence[Any], seed: int) -> dict[str, Any] | None:
    """The summary of ``runs`` (a study's :class:`~probe.studies.sweep.SweepRun` of one scenario) at ``seed``,
    or None while one of them has no evaluation yet."""
    members = [r for r in runs if r.config.seed == seed]
    reports = [read_eval(r.path) for r in members]
    if not members or any(report is None for report in reports):
        return None
    rows = []
    for run, report in zip(members, reports):
        stored = json.loads((run.path / "config.json").read_text())
        evaluation = {k: v for k, v in report.to_json().items() if k not in ("path", "written_to")}
        rows.append(
            {
                "pe": run.config.pe,
                "seed": seed,
                "iid": report.iid_accuracy,
                "ood": report.ood_accuracy,
                "selected_step": report.selected_step,
                "train_seconds": stored.get("metrics", {}).get("train_seconds"),
                "forward_precision": recorded_precision(stored),
                "probe_versions": stored.get("metrics", {}).get("probe_versions"),  # None: trained before recorded
                "evaluation": evaluation,
                **({"attended": attended} if (attended := summary_attended(run.path)) is not None else {}),
            }
        )
    first = members[0].config
    return {
        "format": FORMAT,
        "study": study,
        "scenario": scenario,
        "task": first.task,
        "options": reports[0].task_options,
        "seed": seed,
        "recipe": recipe(first),
        "settings": settings(first),
        "machine": machine(),
        "runs": rows,
    }


def machine() -> dict[str, Any]:
    """What trained a summary's runs: its CPU model among them, since one seed trains bit for bit alike on one
    CPU model and not on another (Section 3's seed 3 on a Xeon and on an EPYC: docs/reproducing.md)."""
    import torch

    from probe.device import cpu_model

    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "probe": code_version(),  # the code that evaluated and wrote it (each row's probe_versions trained it)
    }


def summary_attended(path: Path) -> dict[str, Any] | None:
    """A run's attended distances as its summary keeps them: the reading's settings and its one result, whose
    ``run`` names the PE and seed, not the folder (:func:`probe.analysis.results.attended_series` draws it)."""
    data = read_attended(path)
    if data is None:
        return None
    (result,) = data["runs"]
    run = {key: result["run"][key] for key in ("pe", "seed", "label")}
    return {**{k: v for k, v in data.items() if k != "runs"}, **result, "run": run}


def write_summaries(study: str, scenario: str, runs: Sequence[Any], folder: str | Path, tag: str = "") -> list[Path]:
    """Write (or rewrite) the summary of every seed of ``runs`` (one rung, ``tag``) whose runs are all evaluated."""
    written = []
    for seed in sorted({r.config.seed for r in runs}):
        summary = scenario_summary(study, scenario, runs, seed)
        if summary is not None:
            path = Path(folder) / summary_name(scenario, seed, tag)
            atomic_write_json(path, summary)
            written.append(path)
    return written


def read_summary(path: str | Path) -> tuple[dict[str, Any], list[EvalReport]]:
    """One summary file and its runs' evaluations, read once: ProbeError naming the file where it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        if data.get("format") != FORMAT or not isinstance(data.get("runs"), list):
            raise ValueError("not a study summary")
        data["recipe"] = {**RECIPE_LEGACY, **data["recipe"]}
        data["runs"] = [{**row, **{k: v for k, v in ROW_LEGACY.items() if row.get(k) is None}} for row in data["runs"]]
        reports = [EvalReport.from_json(row["evaluation"]) for row in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ProbeError(f"{path}: not a readable study summary ({error})") from None
    part = (data.get("scenario"), data.get("seed"))
    for report in reports:  # a summary edited or copied by hand must not slip another part's runs in
        if (report.task_folder, report.seed) != part:
            raise ProbeError(
                f"{path}: says {part[0]} at seed {part[1]}, but holds a run of {report.task_folder} at seed "
                f"{report.seed} ({report.label}); it is not one part's summary"
            )
    return data, reports


@dataclass(frozen=True)
class Landed:
    """The summaries a study's folder already holds, read as the parts they close: a sitting that starts
    where the checkpoints are gone (a new clone, another machine) trains only the parts with no summary,
    and the recipe rule reads seed 0 from its summary rather than training it again. A part is reused only
    where this sitting, on ``device_type``, would train it alike: same recipe, settings and precision."""

    folder: Path
    study: str
    device_type: str = "cpu"

    def iid(self, scenario: str, seed: int, tag: str, runs: Sequence[Any]) -> list[float] | None:
        """Each run's IID exact match from the summary of ``scenario`` at ``seed`` and rung ``tag``, or None
        where none landed. ``runs`` (that part as planned: :class:`~probe.studies.sweep.SweepRun`) must be the
        summary's own scenario, seed, recipe, settings, precision and PEs; any other part is a ProbeError."""
        path = self.folder / summary_name(scenario, seed, tag)
        if not path.is_file():
            return None
        data, reports = read_summary(path)
        differ = self._differences(data, scenario, seed, [r.config for r in runs if r.config.seed == seed])
        if differ:
            raise ProbeError(
                f"{path} is not this part of the {self.study} study as planned (what differs: "
                f"{', '.join(differ)}); move it aside to train the part again"
            )
        return [e.iid_accuracy for e in reports]

    def _differences(self, data: dict[str, Any], scenario: str, seed: int, planned: list[TrainConfig]) -> list[str]:
        """What of a summary is not the part ``planned`` (its runs' configs): each as a short name."""
        planned_settings = settings(planned[0]) if planned else None
        landed = {row["pe"]: row for row in data["runs"]}
        checks = {
            "study": data.get("study") == self.study,
            "scenario": data.get("scenario") == scenario,
            "seed": data.get("seed") == seed,
            "PEs": set(landed) == {c.pe for c in planned},
            "recipe": bool(planned) and data["recipe"] == recipe(planned[0]),
            # a summary written before settings were recorded is checked on its recipe alone
            "settings": bool(planned) and data.get("settings", planned_settings) == planned_settings,
            "precision": all(
                landed[c.pe]["forward_precision"] == c.forward_precision(self.device_type)
                for c in planned
                if c.pe in landed
            ),
            # a scratchpad's answer read from a prediction decoded as far as the authors decode it
            "scoring": all(
                landed[c.pe]["evaluation"].get("asked", {}).get("decode_positions")
                == decode_positions(get_task(c.task, **c.task_options))
                for c in planned
                if c.pe in landed
            ),
        }
        return [name for name, alike in checks.items() if not alike]


@dataclass(frozen=True)
class Merged:
    """A study's summaries put together: every run's evaluation, per scenario its recipe and seeds, and
    the parts (scenario, seed) expected but not found. Under a recipe rule only each scenario's chosen
    rung is kept, and ``rungs`` says per scenario what the rule read and chose."""

    evaluations: list[EvalReport]
    recipes: dict[str, list[dict[str, Any]]]  # scenario -> the recipes its kept summaries were trained at
    train_seconds: dict[tuple[str, str, int], float | None]  # (scenario, pe, seed) -> seconds
    missing: list[tuple[str, int]]
    rungs: dict[str, dict[str, Any]] = field(default_factory=dict)  # scenario -> medians per steps, chosen
    attended: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)  # runs that kept them

    def seeds(self, scenario: str) -> list[int]:
        return sorted({e.seed for e in self.evaluations if e.task_folder == scenario})


@dataclass(frozen=True)
class _Part:
    path: Path
    data: dict[str, Any]
    reports: list[EvalReport]


def merge(
    paths: Iterable[str | Path],
    *,
    scenarios: Sequence[str] = (),
    seeds: Sequence[int] = (),
    study: str | None = None,
    rule: Ladder | None = None,
) -> Merged:
    """The runs of every summary in ``paths`` (of ``study`` where given); ``scenarios`` x ``seeds`` are the
    parts expected, and those without a summary are listed in ``missing``. Given ``seeds``, the runs of no
    other seed are kept (a ranking of seed 0 counts each scenario once, however many seeds it has landed);
    the rule still reads seed 0. Two summaries of one scenario,
    seed and number of steps are an error (one part run twice), not a silent choice of one. Under a recipe
    ``rule`` each scenario keeps the rung the rule chooses from its seed-0 IID (the last rung trained while
    the rule still needs another); without one, two step counts of one part are an error too."""
    parts: dict[tuple[str, int, int], _Part] = {}
    for path in sorted(Path(p) for p in paths):
        data, reports = read_summary(path)
        if study is not None and data.get("study") != study:
            continue
        key = (data["scenario"], int(data["seed"]), int(data["recipe"]["steps"]))
        if key in parts or (rule is None and any(k[:2] == key[:2] for k in parts)):
            other = next(p.path for k, p in parts.items() if k[:2] == key[:2])
            raise ProbeError(f"{path} and {other} both hold {key[0]} at seed {key[1]}; keep one")
        parts[key] = _Part(path, data, reports)
    rungs = _choose_rungs(parts, rule) if rule is not None else {}
    evaluations: list[EvalReport] = []
    recipes: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[tuple[str, str, int], float | None] = {}
    attended: dict[tuple[str, str, int], dict[str, Any]] = {}
    found: set[tuple[str, int]] = set()
    for (scenario, seed, steps), part in parts.items():
        if (rule is not None and steps != rungs[scenario]["kept"]) or (seeds and seed not in seeds):
            continue
        found.add((scenario, seed))
        if part.data["recipe"] not in recipes.setdefault(scenario, []):
            recipes[scenario].append(part.data["recipe"])
        evaluations += part.reports
        for row in part.data["runs"]:
            seconds[(scenario, row["pe"], int(row["seed"]))] = row.get("train_seconds")
            if "attended" in row:
                attended[(scenario, row["pe"], int(row["seed"]))] = row["attended"]
    missing = [(scenario, seed) for scenario in scenarios for seed in seeds if (scenario, seed) not in found]
    return Merged(evaluations, recipes, seconds, missing, rungs, attended)


def _choose_rungs(parts: dict[tuple[str, int, int], _Part], rule: Ladder) -> dict[str, dict[str, Any]]:
    """Per scenario: the median PE's IID at seed 0 per rung trained, the rung the rule chooses (None while
    it needs one not trained yet), and the rung kept (the chosen one, else the last trained)."""
    out: dict[str, dict[str, Any]] = {}
    for scenario in dict.fromkeys(k[0] for k in parts):
        medians = {
            steps: statistics.median(r.iid_accuracy for r in part.reports)
            for (name, seed, steps), part in parts.items()
            if name == scenario and seed == 0
        }
        chosen = rule.chosen(medians)
        trained = sorted(steps for (name, _, steps) in parts if name == scenario)
        out[scenario] = {"median_iid_seed0": medians, "chosen": chosen, "kept": chosen or trained[-1]}
    return out


@dataclass(frozen=True)
class PartCost:
    """What one landed part (scenario, seed, rung) cost where it ran, from its summary: seconds summed over its
    runs, each on one core (so core-seconds), for training (checkpoint selection included) and for the
    evaluation after it; ``timed`` of its ``runs`` had their evaluation timed (summaries before it was recorded
    have none)."""

    scenario: str
    seed: int
    steps: int
    runs: int
    train_seconds: float
    evaluation_seconds: float
    timed: int


def part_costs(paths: Iterable[str | Path], study: str | None = None) -> list[PartCost]:
    """Every part's cost in ``paths`` (of ``study`` where given), every rung a scenario trained at included:
    what the study cost, not only the rung a rule keeps (:func:`merge`)."""
    out = []
    for path in sorted(Path(p) for p in paths):
        data, reports = read_summary(path)
        if study is not None and data.get("study") != study:
            continue
        timed = [r.seconds for r in reports if r.seconds is not None]
        out.append(
            PartCost(
                scenario=data["scenario"],
                seed=int(data["seed"]),
                steps=int(data["recipe"]["steps"]),
                runs=len(reports),
                train_seconds=sum(row.get("train_seconds") or 0.0 for row in data["runs"]),
                evaluation_seconds=sum(timed),
                timed=len(timed),
            )
        )
    return out
