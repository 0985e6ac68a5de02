"""Length generalization (Section 3): a run evaluated into an :class:`~probe.analysis.eval_report.EvalReport`
(``eval.json``), and PE ranks across tasks."""

from __future__ import annotations

import glob
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from probe.analysis.eval_report import EVAL, Bucket, EvalReport, LastStep, pe_keys, read_eval
from probe.errors import ProbeError
from probe.models.interventions import Intervention
from probe.models.registry import PE_KINDS
from probe.runs.folders import LAST, Run, recorded_precision
from probe.runs.locks import run_lock
from probe.subjects.examples import task_of, trained_length
from probe.subjects.resolve import resolve
from probe.subjects.run_info import is_code_run
from probe.subjects.settings import ReadSettings
from probe.tasks import Task, Tokenizer
from probe.tasks import get as get_task
from probe.tasks.decoding import EvalResult, decode_positions, evaluate_examples, teacher_forced_examples

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from transformer_lens.model_protocol import TransformerLensModel

BATCH_SIZE = 256  # examples decoded at once: greedy decoding of short task sequences is cheap per example


def eval_file(pe_options: dict[str, Any] | None = None, intervention: Intervention | None = None) -> str:
    """``eval.json``; ``eval+factor=4+scaling=yarn.json`` for PE options applied at inference;
    ``eval+log-length=34.json`` under an intervention on the attention."""
    from probe.models.registry import pe_folder_name

    if not pe_options and (intervention is None or intervention.is_identity):
        return EVAL
    name = pe_folder_name("eval", pe_options)
    if intervention is not None and not intervention.is_identity:
        name += "+" + intervention.name
    return name + ".json"


def evaluate_run(
    run: str | Path | Run,
    settings: ReadSettings | None = None,
    *,
    n_test: int | None = None,
    n_valid: int = 500,
    write: bool = True,
    wait: bool = False,
    on_wait: Callable[[dict], None] | None = None,
    force: bool = False,
    out: str | Path | None = None,
    last_step: bool = True,
) -> EvalReport:
    """Exact match per length bucket on held-out IID examples plus the test split of ``run`` (a run folder or
    its :class:`~probe.runs.folders.Run`); writes eval.json
    and eval.csv (one row per length bucket; with ``settings.pe_options`` applied at inference,
    ``eval+<option>=<value>.json`` beside them), holding the run folder's lock
    (:func:`probe.runs.locks.run_lock`) meanwhile. With ``out``, the run folder is only read (no lock: locks
    belong to writers; a shared read-only run can be evaluated): the files go to :func:`eval_folder` under
    ``out``. An evaluation on fewer examples than the
    one already there (a quick ``--n 100`` look after the full one) never replaces it unless ``force``:
    it goes beside it, ``eval+n=<examples>.json``, and the report's ``written_to`` says where.

    ``settings`` (:class:`~probe.subjects.settings.ReadSettings`): ``device``, ``batch_size`` (default 256),
    ``pe_options`` and ``intervention`` (the run read under it, :mod:`probe.models.interventions`, the results
    in ``eval+<intervention>.json``). The run's own task draws the examples, the first ``n_valid`` IID (all
    of them where there are fewer) and ``n_test`` test ones at seed 0, at the weights' dtype: not ``options``,
    ``n_per_bucket``, ``lengths``, ``multiples``, ``seed`` or ``dtype``; ``progress`` hears ``("scoring", done,
    total)`` as the examples are scored (``"scoring the last step"`` for a selected run's last step). A run whose
    checkpoint was selected is scored again at its last step, to show beside it, unless not ``last_step`` (a
    decoded evaluation's cost, doubled for a diagnostic)."""
    run = Run.of(run)
    settings = ReadSettings() if settings is None else settings
    settings.refuse("probe eval", "options", "n_per_bucket", "lengths", "multiples", "seed", "dtype")
    if settings.intervention is not None and not settings.intervention.is_identity:
        settings = replace(settings, intervention=settings.intervention.resolved(trained_length(run.config)))
    if n_test is not None and n_test < 1:
        raise ProbeError(f"--n must be at least 1 test example, got {n_test} (leave it out for the whole test split)")
    asked = {"n_test": n_test, "n_valid": n_valid} | ({} if last_step else {"last_step": False}) | _decoding(run)
    evaluate = partial(_evaluate, run, settings, n_test, n_valid, last_step)
    if not write:
        return evaluate()
    if out is not None:
        folder = eval_folder(run, out)
        if (kept := _kept(run, folder, asked, settings, force)) is not None:
            return kept
        report = evaluate()
        _write(report, folder / eval_file(report.pe_options_at_inference, settings.intervention), force, asked)
        return report
    with run_lock(run.path, wait=wait, command="probe eval", on_wait=on_wait):
        if (kept := _kept(run, run.path, asked, settings, force)) is not None:
            return kept
        report = evaluate()
        _write(report, run.path / eval_file(report.pe_options_at_inference, settings.intervention), force, asked)
    return report


def _decoding(run: Run) -> dict[str, Any]:
    """How far a prediction scored by its answer (a scratchpad's) was decoded: recorded with what was asked, so an
    evaluation decoded otherwise (before decoding ran on to the authors' budget) is not reused, nor its summary."""
    positions = None if is_code_run(run.config) else decode_positions(task_of(run.config)[0])
    return {} if positions is None else {"decode_positions": positions}


def _kept(run: Run, folder: Path, asked: dict[str, Any], settings: ReadSettings, force: bool) -> EvalReport | None:
    """The evaluation already in ``folder`` of these same examples, written after the run's weights were, or
    None (then it is computed again): a rerun of `probe eval` reads what it wrote instead of recomputing it."""
    if force or settings.pe_options:
        return None
    target = folder / eval_file({}, settings.intervention)
    try:
        published = (run.path / "model.safetensors").stat().st_mtime
    except OSError:
        return None
    beside = sorted(folder.glob(f"{glob.escape(target.stem)}+n=*.json"))  # beside a larger one: +n=<examples>
    for path in [target, *beside]:
        kept = read_eval(path.parent, path.name)
        if kept is not None and kept.asked == asked and path.stat().st_mtime >= published:
            kept.written_to = str(path)
            return kept
    return None


def eval_folder(run: Run, out: str | Path) -> Path:
    """Where ``probe eval --out DIR`` puts a run's evaluation: ``DIR/<task folder>/<pe>/seed<k>``, the run's
    own place in the layout (a run outside it: ``DIR/<its folder's name>``)."""
    return Path(out) / (f"{run.task_folder}/{run.pe_name}/seed{run.seed}" if run.in_layout else run.path.name)


def _write(report: EvalReport, target: Path, force: bool, asked: dict[str, Any]) -> None:
    """``report`` (of the examples ``asked``) as ``target`` (JSON) and the CSV beside it, unless an evaluation on
    more examples is there and not ``force``: then beside it, ``<name>+n=<examples>``; ``report.written_to`` says
    where."""
    report.asked = asked
    kept = read_eval(target.parent, target.name)
    if kept is not None and kept.n_examples > report.n_examples and not force:
        target = target.with_name(f"{target.stem}+n={report.n_examples}.json")
    report.written_to = str(target)
    report.write(target.parent)


@dataclass
class RunScorer:
    """A run loaded to be scored: its model (under the settings' PE options and intervention), its task and
    tokenizer, and how :func:`score_examples` scores it (device, batch, answer reader, decoding budget)."""

    model: Any
    task: Task
    tokenizer: Tokenizer
    intervention: Intervention  # on its attention at inference (the identity: none)
    given: dict[str, Any]  # the PE options asked for, parsed for the run's PE
    at_inference: dict[str, Any]  # those the model runs under (with an intervention's RoPE scaling)
    how: dict[str, Any]

    def model_at(self, path: Path) -> TransformerLensModel:
        """The same run's weights in ``path`` (its last step beside a selected one), loaded as its own were."""
        return resolve(path).under(self.intervention).load(self.how["device"], pe_options=self.given).model

    def score(
        self, model: TransformerLensModel, examples: Sequence, on_scored: Callable[[int], None] | None = None
    ) -> EvalResult:
        """``model``'s verdicts on ``examples`` (this run's weights or another step's), as fast as they are exact;
        ``on_scored`` hears how many are scored as they are."""
        return score_examples(model, self.tokenizer, examples, on_scored=on_scored, **self.how)

    def decode(self, examples: Sequence) -> EvalResult:
        """The verdicts with the predictions behind them: every example decoded greedily, token by token."""
        how = self.how
        return evaluate_examples(
            self.model,
            self.tokenizer,
            examples,
            device=how["device"],
            batch_size=how["batch_size"],
            use_cache=how["cached"],
            keep_predictions=True,
            answer_of=how["answer_of"],
            decode_to=how["decode_to"],
            precision=how["precision"],
        )


def run_scorer(run: Run, settings: ReadSettings) -> RunScorer:
    """``run`` loaded as ``probe eval`` scores it: on ``settings.device`` at its batch size (default
    :data:`BATCH_SIZE`), under its PE options and intervention, its predictions read as its task reads them and
    in the numerics it trained in."""
    from probe.models.attach import with_rope
    from probe.models.registry import parse_pe_options

    if settings.batch_size is not None and settings.batch_size < 1:  # 0 is no batch, not the default
        raise ProbeError(f"batch_size must be at least 1, got {settings.batch_size}")
    intervention = settings.intervention or Intervention()
    given = parse_pe_options(run.pe, dict(settings.pe_options or {}))
    at_inference = parse_pe_options(run.pe, with_rope(given, intervention))  # the RoPE scaling attach() applies
    model = resolve(run).under(intervention).load(settings.device, pe_options=given).model
    meta = model.metadata
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    how = {
        "device": settings.device,
        "batch_size": BATCH_SIZE if settings.batch_size is None else settings.batch_size,
        "answer_of": task.answer_reader(),
        "decode_to": decode_positions(task),
        "cached": not intervention.needs_whole_pass(model),
        "precision": recorded_precision(meta),  # scored as it trained
    }
    return RunScorer(model, task, Tokenizer.from_dict(meta["tokenizer"]), intervention, given, at_inference, how)


def _evaluate(run: Run, settings: ReadSettings, n_test: int | None, n_valid: int, last_step: bool) -> EvalReport:
    from probe.models.positional import format_option

    started = time.perf_counter()
    scorer = run_scorer(run, settings)
    model, task, intervention, at_inference = scorer.model, scorer.task, scorer.intervention, scorer.at_inference
    meta = model.metadata
    training = meta.get("training", {})
    examples = task.held_out(n_valid) + task.examples("test", n=n_test, seed=0)

    def score(model: TransformerLensModel, what: str = "scoring") -> EvalResult:
        hears = settings.progress
        return scorer.score(model, examples, None if hears is None else lambda done: hears(what, done, len(examples)))

    result = score(model)
    buckets = [Bucket(length, n, k, k / n, task.is_seen(length)) for length, (n, k) in result.by_length().items()]
    iid, ood = split_accuracy(task, result)
    label = run.label + "".join(f" {k}={format_option(v)}" for k, v in sorted(at_inference.items()))
    label += "" if intervention.is_identity else f" under {intervention.name}"
    report = EvalReport(
        label=label,
        path=str(run.path),
        pe_options_at_inference=at_inference,
        task=task.name,
        task_folder=run.task_folder,
        task_options=task.options,
        pe=meta["pe"],
        seed=meta["model"]["seed"],
        n_examples=len(examples),
        iid_accuracy=iid,
        ood_accuracy=ood,
        buckets=buckets,
        intervention={} if intervention.is_identity else intervention.to_json(),
    )
    if "selected_step" in training:  # selected on IID validation: the last step's numbers beside it
        report.selected_step = training["selected_step"]
        if last_step:
            step = training.get("selection", {}).get("last_step", training["selected_step"])
            if (run.path / LAST / "config.json").is_file():
                iid, ood = split_accuracy(task, score(scorer.model_at(run.path / LAST), "scoring the last step"))
            report.last = LastStep(step, iid, ood)
    report.seconds = time.perf_counter() - started  # a study's cost beside its training's (train_seconds)
    return report


def score_examples(
    model: TransformerLensModel,
    tokenizer: Tokenizer,
    examples: Sequence,
    *,
    device: torch.device | str,
    batch_size: int,
    answer_of: Callable[[str], Hashable | None] | None,
    decode_to: int | None = None,
    cached: bool = True,
    precision: str | None = None,
    on_scored: Callable[[int], None] | None = None,
) -> EvalResult:
    """Greedy decoding's exact match of ``model`` on ``examples``: in one teacher-forced pass per batch
    where that is the same number (:func:`~probe.tasks.decoding.teacher_forced_exact_match`), decoding
    token by token where it is not: a prediction scored on its answer alone (decoded on to ``decode_to``
    positions, :func:`~probe.tasks.decoding.decode_positions`), and positions drawn at random, which decoding
    draws once for the whole sequence. ``precision``: the model's training precision
    (:func:`~probe.tasks.decoding.scoring_precision`). ``on_scored`` hears how many examples are scored, after
    each batch decoded (once, at the end, in one pass)."""
    common = {"device": device, "batch_size": batch_size, "precision": precision}
    if answer_of or model.config.random_positions:
        return evaluate_examples(
            model,
            tokenizer,
            examples,
            answer_of=answer_of,
            decode_to=decode_to,
            use_cache=cached,
            on_scored=on_scored,
            **common,
        )
    result = teacher_forced_examples(model, tokenizer, examples, **common)
    if on_scored is not None:
        on_scored(len(examples))
    return result


def inference_options(
    runs: Sequence[Run], given: dict[str, Any]
) -> tuple[dict[Path, dict[str, Any]], list[tuple[Run, str]]]:
    """Which runs take the PE options ``given`` at inference (those whose PE has one of them, as in
    `probe compare`), each with the options it takes, checked; and the runs left out, with what they lack.
    ProbeError when options were given and no run takes any."""
    from probe.models.registry import options_for, pe_class

    taking = {r.path: options_for(r.pe, given) for r in runs if not given or options_for(r.pe, given)}
    if given and not taking:
        raise ProbeError(f"no run here has the option(s) {', '.join(sorted(given))}; see `probe pes`")
    for r in runs:
        if r.path in taking:
            pe_class(r.pe).parse_inference_options(taking[r.path])  # every run's, before any is evaluated
    skipped = [(r, ", ".join(sorted(given))) for r in runs if r.path not in taking]
    return taking, skipped


def accuracy_figures(
    reports: Sequence[EvalReport],
    runs: Sequence[Run],
    out: str | Path | None,
    given: dict[str, Any],
    intervention: Intervention | None = None,
) -> list[Path]:
    """Exact match against length, one figure per task folder (seed 0 solid, other seeds dashed), written to
    ``out`` or beside the runs (``eval_accuracy[+options]``): the figure `probe eval` writes."""
    from probe.figures import write_figure
    from probe.runs.folders import beside

    by_task: dict[str, list[tuple[EvalReport, Run]]] = {}
    for report, run in zip(reports, runs):
        by_task.setdefault(report.task_folder, []).append((report, run))
    written: list[Path] = []
    for task_folder, pairs in by_task.items():
        target = Path(out) if out else beside([run for _, run in pairs])
        name = eval_file(given, intervention).replace("eval", "eval_accuracy", 1).removesuffix(".json")
        written += write_figure(accuracy_figure([r for r, _ in pairs], task_folder), target / name)
    return written


def accuracy_figure(reports: Sequence[EvalReport], task_folder: str) -> go.Figure:
    """Exact match against length of one task folder's runs, the training lengths shaded: a line per run,
    seed 0 solid and other seeds dashed, PE options applied at inference in the legend."""
    from probe.figures import accuracy_by_length
    from probe.models.positional import format_option
    from probe.models.registry import PE_LABELS

    curves = []
    for r in reports:
        options = " ".join(f"{k}={format_option(v)}" for k, v in sorted(r.pe_options_at_inference.items()))
        label = f"{PE_LABELS.get(r.pe, r.pe)} (seed {r.seed})" + (f" [{options}]" if options else "")
        curves.append({**r.curve(), "label": label, "dashed": r.seed != 0})
    seen = [b.length for r in reports for b in r.buckets if b.seen]
    return accuracy_by_length(curves, (min(seen), max(seen)) if seen else None, f"{task_folder}: exact match by length")


def split_accuracy(task: Task, result: EvalResult) -> tuple[float, float | None]:
    """Exact match on the training lengths and on the unseen ones (None where there are none)."""
    seen = [ok for length, ok in zip(result.lengths, result.correct) if task.is_seen(length)]
    unseen = [ok for length, ok in zip(result.lengths, result.correct) if not task.is_seen(length)]
    return sum(seen) / len(seen) if seen else float("nan"), sum(unseen) / len(unseen) if unseen else None


def mean_ranks(reports: Sequence[EvalReport]) -> dict[str, float]:
    """Mean rank of each PE over tasks (scenarios), by OOD accuracy averaged over seeds, one query per task;
    ties share the average rank (1 = first). The paper's Figure teaser is the mean reciprocal rank
    (:func:`mean_reciprocal_ranks`: a query per task and seed, ties broken in its notebook's order); this
    is the plainer reading beside it. Empty unless at least two PEs were evaluated on some task."""
    from probe.metrics import mean_rank

    table: dict[str, dict[str, list[float]]] = {}
    for r, key in zip(reports, pe_keys(reports)):
        if r.ood_accuracy is not None:
            table.setdefault(r.task_folder, {}).setdefault(key, []).append(r.ood_accuracy)
    pes = sorted({pe for scores in table.values() for pe in scores})
    tasks = [t for t, scores in table.items() if set(scores) == set(pes)]
    if len(pes) < 2 or not tasks:
        return {}
    scores = torch.tensor([[sum(table[t][pe]) / len(table[t][pe]) for pe in pes] for t in tasks])  # [task, pe]
    ranks = mean_rank(scores, higher_is_better=True)
    return dict(sorted(zip(pes, ranks.tolist()), key=lambda item: item[1]))


NOTEBOOK_ROWS = ("rotary", "alibi", "t5", "ape", "nope")
"""The authors' PEs in the order of their notebook's rows (``plot_aggregate_final.ipynb``, the stored output of
its mean-reciprocal-rank tables: Rotary, ALiBi, T5's Relative Bias, Absolute Sinusoid, No PE)."""
TIE_ORDER = (*NOTEBOOK_ROWS[:-1], *(pe for pe in PE_KINDS if pe not in NOTEBOOK_ROWS), "nope")
"""Who wins a tie in :func:`reciprocal_rank_scores`, first to last: the authors rank with pandas'
``method="first"``, which breaks a tie by row order, so a tie goes to Rotary before ALiBi, T5's bias and APE,
and against NoPE; PEs the paper did not train fall between APE and NoPE."""


def reciprocal_rank_scores(queries: dict[Any, dict[str, float]]) -> dict[str, float]:
    """Mean reciprocal rank per PE over ``queries`` ({query: {pe: OOD accuracy}}), the figures'
    "mean rank" (Figures teaser and mrr-per-category): in each query PEs are ranked by accuracy,
    1 = best, ties broken by :data:`TIE_ORDER`; a PE scores 1/rank, averaged over queries (higher
    is better). Only queries holding every PE count. Empty unless two PEs and one query remain."""
    from probe.metrics import mean_reciprocal_rank_reference_code

    pes = sorted(
        {pe for scores in queries.values() for pe in scores},
        key=lambda pe: (TIE_ORDER.index(pe) if pe in TIE_ORDER else -1, pe),
    )
    complete = [scores for scores in queries.values() if set(scores) == set(pes)]
    if len(pes) < 2 or not complete:
        return {}
    scores = torch.tensor([[q[pe] for pe in pes] for q in complete], dtype=torch.float64)  # [query, pe]
    mrr = mean_reciprocal_rank_reference_code(scores, higher_is_better=True)
    return dict(sorted(zip(pes, mrr.tolist()), key=lambda item: -item[1]))


@dataclass(frozen=True)
class Ranking:
    """PEs ranked by OOD exact match the way the paper's figures rank them, said with what it counts: the mean
    reciprocal rank (:func:`reciprocal_rank_scores`) over ``queries``, one per (task folder, seed) that every
    PE ranked has; ``left_out``: the runs of the other queries (NoPE's second seed, NoPE')."""

    scores: dict[str, float]  # PE -> mean reciprocal rank, best first
    queries: list[tuple[str, int]]
    left_out: list[str]
    tied: int = 0  # queries where two PEs score alike: their places are the tie order's (TIE_ORDER)

    def describe(self) -> str:
        """``over 1 query (scan seed 0); left out: scan/nope/seed1 (no other PE has its seed)``, and how many
        queries hold a tie, which the authors' order decides (NoPE's places there are the last)."""
        named = ", ".join(f"{folder} seed {seed}" for folder, seed in self.queries)
        text = f"over {len(self.queries)} quer{'y' if len(self.queries) == 1 else 'ies'} ({named})"
        if self.left_out:
            text += f"; left out: {', '.join(self.left_out)} (not every PE has that task and seed)"
        if self.tied:
            text += (
                f"; ties in {self.tied} of them, broken as the authors' notebook breaks them (Rotary, ALiBi, "
                "T5's bias, APE, the PEs since the paper, NoPE last)"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "measure": "mean reciprocal rank of OOD exact match",
            "queries": [{"task_folder": folder, "seed": seed} for folder, seed in self.queries],
            "left_out": self.left_out,
            "tied_queries": self.tied,
            "scores": self.scores,
        }


def pe_ranking(reports: Sequence[EvalReport]) -> Ranking:
    """The one ranking `probe eval` prints: :func:`mean_reciprocal_ranks` of ``reports``, with the queries it
    counted and the runs it left out."""
    queries = _ood_queries(reports)
    pes = {pe for scores in queries.values() for pe in scores}
    counted = [key for key, scores in queries.items() if set(scores) == pes]
    left_out = [r.label for r in reports if r.ood_accuracy is not None and (r.task_folder, r.seed) not in counted]
    scores = reciprocal_rank_scores(queries)
    if not scores:
        return Ranking(scores, [], [])
    tied = sum(len(set(queries[key].values())) < len(queries[key]) for key in counted)
    return Ranking(scores, counted, left_out, tied)


def mean_reciprocal_ranks(reports: Sequence[EvalReport]) -> dict[str, float]:
    """:func:`reciprocal_rank_scores` of eval reports, one query per (task folder, seed)."""
    return reciprocal_rank_scores(_ood_queries(reports))


def _ood_queries(reports: Sequence[EvalReport]) -> dict[tuple[str, int], dict[str, float]]:
    """{(task folder, seed): {pe: OOD exact match}} of the reports that have an OOD accuracy."""
    queries: dict[tuple[str, int], dict[str, float]] = {}
    for r, key in zip(reports, pe_keys(reports)):
        if r.ood_accuracy is not None:
            queries.setdefault((r.task_folder, r.seed), {})[key] = r.ood_accuracy
    return queries
