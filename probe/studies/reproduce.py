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

import functools
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.analysis.eval_report import read_eval
from probe.errors import ProbeError, did_you_mean
from probe.studies.ladder import Ladder
from probe.studies.plans import seed_baseline_blocks
from probe.studies.reproduce_report import RANKING_ONLY
from probe.studies.summaries import Landed, Merged
from probe.studies.sweep import SweepRun, expand_grid, load_grid, run_state
from probe.training.steps import Engine

STUDIES = {"reduced": "reproduce", "section3": "section3", "section6": "section6", "paper": "paper"}
"""``--scale`` -> the grid it trains: the reduced study that fits a 2-core CPU (SCAN, copy, reverse at
``small``), the paper's Section 3 at ``tiny`` (its 17 scenarios, grids/section3.toml), its Section 6 at
``tiny`` (scratchpad formats, grids/section6.toml), or the paper's grid."""
SUMMARIES = "summaries"
Progress = Callable[[str], None]
OnScenario = Callable[[str, list[SweepRun], str], None]  # (scenario, its runs at one rung, the rung's tag)
Finished = Callable[[SweepRun], None]  # told in the study's process that a run has ended, trained or failed
Train = Callable[[list[SweepRun], Finished], list[Any]]
"""Trains the unfinished of the runs given (results, failures), telling ``Finished`` of each run as it ends (at
once of one already trained) so that a scenario is evaluated and lands while others train; what it does not
tell of lands when it returns."""


def ladder(scale: str) -> Ladder | None:
    """The study's recipe rule (its grid's ``[ladder]``), or None where it trains one recipe."""
    if scale not in STUDIES:
        raise ProbeError(f"unknown scale {scale!r}; choose one of {', '.join(STUDIES)}")
    return Ladder.from_grid(load_grid(STUDIES[scale]).get("ladder"))


def plan(
    scale: str, root: str | Path, *, seeds: int = 1, tasks: Sequence[str] = (), steps: int | None = None
) -> list[SweepRun]:
    """Every run of the study: each PE at seeds 0..seeds-1 and NoPE' (NoPE at seed ``seeds``);
    ``steps`` overrides the study's (a quick look, not the study). A study with a recipe rule lists its
    first rung here; :func:`train_and_evaluate` climbs it."""
    if scale not in STUDIES:
        raise ProbeError(f"unknown scale {scale!r}; choose one of {', '.join(STUDIES)}")
    if seeds < 1:
        raise ProbeError(f"--seeds must be at least 1, got {seeds}")
    grid = load_grid(STUDIES[scale]) | ({"steps": steps} if steps else {})
    blocks = [{"seed": list(range(seeds))}] if scale in RANKING_ONLY else seed_baseline_blocks(range(seeds))
    runs = [run for block in blocks for run in expand_grid({**grid, **block}, root)]
    unknown = sorted(set(tasks) - {run.config.task for run in runs})
    if unknown:
        known = list(dict.fromkeys(run.config.task for run in runs))
        raise ProbeError(
            f"the {scale} study has no task {unknown[0]!r}{did_you_mean(unknown[0], known)}; its tasks: "
            f"{', '.join(known)}"
        )
    return [run for run in runs if not tasks or run.config.task in tasks]


def default_task(scale: str) -> str:
    """The task `probe reproduce --scale SCALE` trains when none is named: SCAN where the study has it (the task
    of the paper's headline figure), else the study's first (Section 6: addition)."""
    tasks = list(dict.fromkeys(run.config.task for run in plan(scale, "checkpoints")))
    return "scan" if "scan" in tasks else tasks[0]


def scenarios(runs: Sequence[SweepRun]) -> dict[str, list[SweepRun]]:
    """The runs of each scenario (a task folder: one task with its options), in the study's order."""
    out: dict[str, list[SweepRun]] = {}
    for run in runs:
        out.setdefault(run.path.parent.parent.name, []).append(run)
    return out


def local_trainer(
    device: torch.device,
    *,
    jobs: int,
    stack: bool = False,
    engine: Engine | None = None,
    on_event: Callable[..., None] | None = None,
) -> Train:
    """``probe train``'s local runners as a study's ``train``: the unfinished of the runs given, side by
    side on ``jobs`` workers, or with ``stack`` the runs of one batch stream as one program; ``engine``:
    how steps run, the device's default if None."""
    from probe.training.parallel import train_by_stack, train_parallel

    engine = engine or Engine.for_device(device)

    def train(runs: list[SweepRun], finished: Finished) -> list[Any]:
        ended_before = [run_state(r) in ("done", "evaluate") for r in runs]
        todo = [r for r, before in zip(runs, ended_before) if not before]
        # runs a sitting before trained: their scenarios land (are evaluated) while the workers train the others
        trained = [functools.partial(finished, r) for r, before in zip(runs, ended_before) if before]
        pairs = [(r.config, r.path) for r in todo]
        if not pairs or stack:  # one program: its scenarios land when it returns
            for land in trained:
                land()
            return train_by_stack(pairs, device, engine=engine, on_event=on_event) if pairs else []

        def ended(i: int) -> None:
            finished(todo[i])

        jobs_here = min(jobs, len(pairs))
        return train_parallel(
            pairs, str(device), jobs=jobs_here, on_event=on_event, engine=engine, on_done=ended, beside=trained
        )

    return train


def train_and_evaluate(
    runs: Sequence[SweepRun],
    device: torch.device,
    train: Train,
    *,
    rule: Ladder | None = None,
    rung: Callable[[int], Sequence[SweepRun]] | None = None,
    on_scenario: OnScenario | None = None,
    landed: Landed | None = None,
    evaluating: Callable[[str], None] | None = None,
) -> list[Any]:
    """Train the study in phases, each part (a scenario's runs of one seed) evaluated and handed to
    ``on_scenario(scenario, its runs, rung tag)`` as soon as they have all ended, while the phase's other runs
    train on. Without a recipe ``rule``, one phase: every run. With one: seed 0 of every scenario at the first
    rung, then again at the next rung where the rule sends it on, until none is; then every other seed at its
    scenario's rung (``rung(steps)``: :func:`rung_plan`), so every recipe is fixed on IID validation first. A
    phase trains seed by seed, each seed's scenarios in the study's order, so a second seed of every scenario
    lands before a third of any (what a claim over seeds waits for, when a sitting ends half-way). ``train``
    trains the unfinished of a phase's runs in that order (:func:`local_trainer`, or a cluster's). A part whose
    summary ``landed`` already is not trained again; the rule reads seed 0 from it. ``evaluating(scenario)`` is
    told as a scenario's evaluation starts (a scratchpad's takes minutes)."""
    results: list[Any] = []
    reading = functools.partial(seed0_reading, landed)

    def phase(everything: dict[str, tuple[list[SweepRun], str]]) -> None:
        parts = [
            (scenario, runs, tag)
            for seed in sorted({r.config.seed for group, _ in everything.values() for r in group})
            for scenario, (group, tag) in everything.items()
            if (runs := still_open(landed, scenario, [r for r in group if r.config.seed == seed], tag))
        ]
        results.extend(train_phase(parts, device, train, on_scenario, evaluating))

    by_scenario = scenarios(runs)
    if rule is None or rung is None:
        phase({scenario: (group, "") for scenario, group in by_scenario.items()})
        return results
    planned = functools.cache(lambda steps: list(rung(steps)))
    steps = {scenario: group[0].config.steps for scenario, group in by_scenario.items()}
    seed0 = {scenario: [r for r in group if r.config.seed == 0] for scenario, group in by_scenario.items()}
    climbing = {scenario: group for scenario, group in seed0.items() if group}
    while climbing:
        phase({scenario: (group, rule.tag(steps[scenario])) for scenario, group in climbing.items()})
        rung_done, climbing = climbing, {}
        for scenario, group in rung_done.items():
            iid = reading(scenario, group, rule.tag(steps[scenario]))
            higher = rule.climbs(iid, steps[scenario]) if iid is not None else None
            if higher is not None:
                steps[scenario] = higher
                climbing[scenario] = seed0[scenario] = same_runs(group, planned(higher))
    phase(
        {
            scenario: (same_runs(others, planned(steps[scenario])), rule.tag(steps[scenario]))
            for scenario, group in by_scenario.items()
            if (others := [r for r in group if r.config.seed != 0])
            and reading(scenario, seed0[scenario], rule.tag(steps[scenario])) is not None
        }
    )
    return results


Part = tuple[str, list[SweepRun], str]  # (scenario, its runs that land together, the rung's tag)


def train_phase(
    parts: Sequence[Part],
    device: torch.device,
    train: Train,
    on_scenario: OnScenario | None,
    evaluating: Callable[[str], None] | None = None,
) -> list[Any]:
    """Train the runs of ``parts`` as one queue in their order, and land each part (evaluate it, then
    ``on_scenario``) as its last run ends: the next part's runs keep the workers busy meanwhile. A part the
    trainer did not report lands when it returns."""
    waiting = {i: {r.path for r in runs} for i, (_, runs, _) in enumerate(parts)}
    owner = {r.path: i for i, (_, runs, _) in enumerate(parts) for r in runs}

    def land(i: int) -> None:
        del waiting[i]
        scenario, runs, tag = parts[i]
        if evaluating is not None:
            evaluating(scenario)
        evaluate(runs, device)
        if on_scenario is not None:
            on_scenario(scenario, runs, tag)

    def finished(run: SweepRun) -> None:
        i = owner[run.path]
        if i in waiting:
            waiting[i].discard(run.path)
            if not waiting[i]:
                land(i)

    queue = [r for _, runs, _ in parts for r in runs]
    results = train(queue, finished) if queue else []
    for i in list(waiting):
        land(i)
    return results


def chosen_runs(
    runs: Sequence[SweepRun],
    rule: Ladder,
    rung: Callable[[int], Sequence[SweepRun]],
    landed: Landed | None = None,
) -> list[SweepRun]:
    """``runs`` (the study at its first rung) at each scenario's rung as the rule reads it from seed 0's
    evaluations or ``landed`` summaries (the last rung read while the rule still needs another)."""
    return _at_rungs(
        runs, rule, rung, landed, lambda medians: rule.chosen(medians) or max(medians, default=rule.steps[0])
    )


def due_runs(
    runs: Sequence[SweepRun],
    rule: Ladder,
    rung: Callable[[int], Sequence[SweepRun]],
    landed: Landed | None = None,
) -> list[SweepRun]:
    """``runs`` at the rung each scenario trains at next (:meth:`Ladder.due`): its chosen rung, or where the
    rule still needs another, that rung for seed 0 and, at the least they can cost, for the other seeds."""
    return _at_rungs(runs, rule, rung, landed, rule.due)


def _at_rungs(
    runs: Sequence[SweepRun],
    rule: Ladder,
    rung: Callable[[int], Sequence[SweepRun]],
    landed: Landed | None,
    pick: Callable[[dict[int, float]], int],
) -> list[SweepRun]:
    """Each scenario of ``runs`` at the rung ``pick`` takes from the median PE's seed-0 IID per rung read."""
    planned = functools.cache(lambda steps: list(rung(steps)))
    out: list[SweepRun] = []
    for scenario, group in scenarios(runs).items():
        seed0 = [r for r in group if r.config.seed == 0]
        medians: dict[int, float] = {}
        for steps in rule.steps:
            iid = seed0_reading(landed, scenario, same_runs(seed0, planned(steps)), rule.tag(steps))
            if iid is None:
                break
            medians[steps] = statistics.median(iid)
        out += same_runs(group, planned(pick(medians)))
    return out


def pending(
    runs: Sequence[SweepRun],
    rule: Ladder | None = None,
    rung: Callable[[int], Sequence[SweepRun]] | None = None,
    landed: Landed | None = None,
) -> list[SweepRun]:
    """What is left to train or evaluate: each scenario at the rung it trains at next (:func:`due_runs`),
    less the finished runs and the parts whose summary ``landed``."""
    chosen = due_runs(runs, rule, rung, landed) if rule is not None and rung is not None else list(runs)
    out: list[SweepRun] = []
    for scenario, group in scenarios(chosen).items():
        tag = rule.tag(group[0].config.steps) if rule is not None else ""
        out += [r for r in still_open(landed, scenario, group, tag) if run_state(r) != "done"]
    return out


def study_prices(
    todo: Sequence[SweepRun],
    seconds: Sequence[float],
    jobs: int,
    *,
    seed0_first: bool,
    evaluation: Sequence[float] | None = None,
) -> tuple[dict[str, float], float]:
    """(each scenario's share of the wall: its runs' ``seconds`` and ``evaluation`` over the ``jobs`` that
    train them, the wall) from the runs' prices (in ``todo``'s order), as :func:`train_and_evaluate` trains
    them: a phase at a time (with ``seed0_first``, a recipe rule, seed 0 before the other seeds), each phase's
    runs one queue, scenario by scenario, that ``jobs`` workers take from as each becomes free. A scenario's
    evaluation runs on one thread beside the next one's training, so it adds its time over the ``jobs`` cores."""
    from probe.studies.sweep import queued_wall_seconds

    evaluation = evaluation or [0.0] * len(todo)
    cost = {run.path: (s, e) for run, s, e in zip(todo, seconds, evaluation, strict=True)}
    by_scenario = scenarios(todo)
    first = [seed0_first and run.config.seed == 0 for group in by_scenario.values() for run in group]
    queue = [run for group in by_scenario.values() for run in group]
    order = sorted(range(len(queue)), key=lambda i: not first[i])  # stable: the study's order within a phase
    wall = queued_wall_seconds([cost[queue[i].path][0] for i in order], [first[i] for i in order], jobs)
    shares = {scenario: sum(sum(cost[r.path]) for r in group) / jobs for scenario, group in by_scenario.items()}
    return shares, wall + sum(evaluation) / jobs


def summaries_report(
    runs: Sequence[SweepRun], folder: str | Path, *, scale: str, seeds: int, rule: Ladder | None
) -> dict[str, Any]:
    """A ranking study's report from the summaries in ``folder``, this sitting's and earlier ones' alike:
    each scenario of ``runs`` at the rung the ``rule`` keeps, seeds 0 to ``seeds`` - 1, and every part
    expected and not there named as missing."""
    return merged_report(folder, list(scenarios(runs)), list(range(seeds)), study=scale, rule=rule)[0]


def merged_report(
    folder: str | Path, expected: Sequence[str], seeds: Sequence[int], *, study: str, rule: Ladder | None
) -> tuple[dict[str, Any], Merged]:
    """The report of the ``expected`` scenarios at ``seeds`` merged from the summaries in ``folder``
    (:func:`~probe.studies.summaries.merge`), with the merge it was made from."""
    from probe.studies.reproduce_report import report_of
    from probe.studies.summaries import merge

    merged = merge(sorted(Path(folder).glob("*.json")), scenarios=expected, seeds=seeds, study=study, rule=rule)
    kept = [e for e in merged.evaluations if e.task_folder in expected]
    missing = [f"{scenario} seed {seed}" for scenario, seed in merged.missing]
    return report_of(kept, {}, scale=study, missing=missing), merged


def still_open(landed: Landed | None, scenario: str, group: list[SweepRun], tag: str) -> list[SweepRun]:
    """The runs of ``group`` (a scenario at rung ``tag``) whose seed has no summary ``landed`` yet."""
    if landed is None:
        return group
    seeds = {r.config.seed for r in group}
    closed = {seed for seed in seeds if landed.iid(scenario, seed, tag, group) is not None}
    return [r for r in group if r.config.seed not in closed]


def seed0_reading(landed: Landed | None, scenario: str, group: list[SweepRun], tag: str) -> list[float] | None:
    """Seed 0's IID at a rung, one per run of ``group``: its summary where one landed, else the runs'
    evaluations (None while one has none)."""
    summarised = landed.iid(scenario, 0, tag, group) if landed is not None else None
    return summarised if summarised is not None else seed0_iid(group)


def seed0_iid(runs: Sequence[SweepRun]) -> list[float] | None:
    """Each run's IID exact match, or None while one of them has no evaluation (the rule cannot read it)."""
    reports = [read_eval(r.path) for r in runs]
    if any(report is None for report in reports):
        return None
    return [report.iid_accuracy for report in reports]


def same_runs(runs: Sequence[SweepRun], rung: Sequence[SweepRun]) -> list[SweepRun]:
    """The runs of ``rung`` (a study planned at another rung) that are ``runs``' scenario, PE and seed."""
    by_label = {r.label: r for r in rung}
    return [by_label[r.label] for r in runs]


def rung_plan(
    scale: str, root: str | Path, rule: Ladder, *, seeds: int, tasks: Sequence[str] = ()
) -> Callable[[int], list[SweepRun]]:
    """The study planned at a rung's steps, its runs in that rung's folder (:meth:`Ladder.root`)."""
    return lambda steps: plan(scale, rule.root(Path(root), steps), seeds=seeds, tasks=tasks, steps=steps)


def evaluate(runs: Sequence[SweepRun], device: torch.device) -> None:
    """Evaluate every trained run of ``runs`` whose eval.json is not this evaluation (none yet, or one asked
    otherwise: other examples, or a scratchpad decoded less far; :func:`~probe.analysis.evaluation.evaluate_run`
    reads a matching one back), and read the attended distances of those that ask (``attended``) and have none,
    on a CPU with the one thread a run trains with: it runs beside the runs still training, and its numbers do
    not depend on what else ran."""
    from probe.analysis.distances import ATTENDED, attend_run
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run
    from probe.subjects.settings import ReadSettings
    from probe.training.bookkeeping import training_threads

    settings = ReadSettings(device=device)
    for run in runs:
        if not (run.path / "model.safetensors").is_file():
            continue
        with training_threads(device):
            evaluate_run(
                Run(run.path, read_checkpoint_config(run.path)),
                settings,
                n_test=run.eval_n,
                n_valid=run.eval_valid,
                last_step=run.eval_last,
            )
            if run.attended and not (run.path / ATTENDED).is_file():
                attend_run(run.path, settings)


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
    from probe.subjects.settings import ReadSettings

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
                settings = ReadSettings(options=options, n_per_bucket=n_per_bucket, device=device)
                report = compare_report("nope", (), settings, root=root, task=task, metric=metric)
                entry["compare"][metric] = {"report": report.to_json(), "curves": report.curves()}
        if progress:
            progress(f"{folder}: attended distances")
        settings = ReadSettings(n_per_bucket=n_per_bucket, device=device)
        distances = attended_distance_report([r.path for r in group], settings)
        entry["distances"] = {"report": distances.to_json(), "series": distances.series()}
        out[folder] = entry
    return out
