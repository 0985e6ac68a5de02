"""Length-generalization reports: a run's accuracy per bucket (eval.json), and PE ranks across tasks."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.decoding import evaluate_examples
from probe.errors import ProbeError
from probe.files import atomic_write_json
from probe.locks import run_lock
from probe.models.registry import PE_KINDS
from probe.runs import LAST, Run, load_run
from probe.tasks import Tokenizer
from probe.tasks import get as get_task

EVAL = "eval.json"


def eval_file(pe_options: dict[str, Any] | None = None) -> str:
    """``eval.json``, or ``eval+factor=4+scaling=yarn.json`` for PE options applied at inference."""
    from probe.models.registry import pe_folder_name

    return EVAL if not pe_options else pe_folder_name("eval", pe_options) + ".json"


def evaluate_run(
    run: Run,
    *,
    n_test: int | None = None,
    n_valid: int = 500,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    write: bool = True,
    wait: bool = False,
    on_wait: Callable[[dict], None] | None = None,
    pe_options: dict[str, Any] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Exact match per length bucket on held-out IID examples plus the test split; writes eval.json
    (with ``pe_options`` applied at inference, ``eval+<option>=<value>.json`` beside it), holding the
    run folder's lock (:func:`probe.locks.run_lock`) meanwhile. An evaluation on fewer examples than the
    one already there (a quick ``--n 100`` look after the full one) never replaces it unless ``force``:
    it goes beside it, ``eval+n=<examples>.json``, and the report's ``written_to`` says where."""
    if n_test is not None and n_test < 1:
        raise ProbeError(f"--n must be at least 1 test example, got {n_test} (leave it out for the whole test split)")
    if not write:
        return _evaluate(run, n_test, n_valid, device, batch_size, pe_options)
    with run_lock(run.path, wait=wait, command="probe eval", on_wait=on_wait):
        report = _evaluate(run, n_test, n_valid, device, batch_size, pe_options)
        target = run.path / eval_file(report["pe_options_at_inference"])
        kept = _examples_in(target)
        if kept is not None and kept > report["n_examples"] and not force:
            target = target.with_name(f"{target.stem}+n={report['n_examples']}.json")
        report["written_to"] = str(target)
        atomic_write_json(target, report)
    return report


def _examples_in(path: Path) -> int | None:
    """How many examples the evaluation in ``path`` scored (None: no readable evaluation there)."""
    try:
        report = json.loads(path.read_text())
        return int(report["n_examples"]) if isinstance(report, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _evaluate(
    run: Run,
    n_test: int | None,
    n_valid: int,
    device: torch.device | str,
    batch_size: int,
    pe_options: dict[str, Any] | None,
) -> dict[str, Any]:
    from probe.models.positional import format_option
    from probe.models.registry import parse_pe_options

    at_inference = parse_pe_options(run.pe, pe_options or {})
    model = load_run(run.path, device=device, pe_options=at_inference)
    meta = model.metadata
    training = meta.get("training", {})
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    examples = task.examples("valid", n=n_valid, seed=0) + task.examples("test", n=n_test, seed=0)
    answer_only = bool(task.options.get("scratchpad"))
    result = evaluate_examples(
        model, tokenizer, examples, device=device, batch_size=batch_size, answer_only=answer_only
    )
    buckets = [
        {"length": length, "n": n, "correct": k, "accuracy": k / n, "seen": task.is_seen(length)}
        for length, (n, k) in result.by_length().items()
    ]
    iid, ood = split_accuracy(task, result)
    label = run.label + "".join(f" {k}={format_option(v)}" for k, v in sorted(at_inference.items()))
    report = {
        "label": label,
        "path": str(run.path),
        "pe_options_at_inference": at_inference,
        "task": task.name,
        "task_folder": run.task_folder,
        "task_options": task.options,
        "pe": meta["pe"],
        "seed": meta["model"]["seed"],
        "n_examples": len(examples),
        "iid_accuracy": iid,
        "ood_accuracy": ood,
        "buckets": buckets,
    }
    if "selected_step" in training:  # selected on IID validation: the last step's numbers beside it
        report["selected_step"] = training["selected_step"]
        last_step = training.get("selection", {}).get("last_step", training["selected_step"])
        if (run.path / LAST / "config.json").is_file():
            last = load_run(run.path / LAST, device=device, pe_options=at_inference)
            result = evaluate_examples(
                last, tokenizer, examples, device=device, batch_size=batch_size, answer_only=answer_only
            )
            iid, ood = split_accuracy(task, result)
        report["last"] = {"step": last_step, "iid_accuracy": iid, "ood_accuracy": ood}
    return report


def split_accuracy(task, result) -> tuple[float, float | None]:
    """Exact match on the training lengths and on the unseen ones (None where there are none)."""
    seen = [ok for length, ok in zip(result.lengths, result.correct) if task.is_seen(length)]
    unseen = [ok for length, ok in zip(result.lengths, result.correct) if not task.is_seen(length)]
    return sum(seen) / len(seen) if seen else float("nan"), sum(unseen) / len(unseen) if unseen else None


def read_eval(folder: str | Path) -> dict[str, Any] | None:
    """A run folder's eval.json as :func:`evaluate_run` wrote it, or None when it is missing,
    unreadable or not such a report (then ``probe eval`` rewrites it)."""
    try:
        report = json.loads((Path(folder) / EVAL).read_text())
        ok = (
            isinstance(report, dict)
            and {"task", "task_folder", "pe", "seed", "iid_accuracy", "ood_accuracy"} <= report.keys()
        )
        ok = ok and all(
            isinstance(b["length"], (int, float))
            and isinstance(b["accuracy"], (int, float))
            and isinstance(b["seen"], bool)
            for b in report["buckets"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return report if ok else None


def mean_ranks(reports: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean rank of each PE over tasks (scenarios), by OOD accuracy averaged over seeds; ties share
    the average rank (Figure teaser). Empty unless at least two PEs were evaluated on some task."""
    from probe.metrics import mean_rank

    table: dict[str, dict[str, list[float]]] = {}
    for r in reports:
        if r["ood_accuracy"] is not None:
            table.setdefault(r["task_folder"], {}).setdefault(r["pe"], []).append(r["ood_accuracy"])
    pes = sorted({pe for scores in table.values() for pe in scores})
    tasks = [t for t, scores in table.items() if set(scores) == set(pes)]
    if len(pes) < 2 or not tasks:
        return {}
    scores = torch.tensor([[sum(table[t][pe]) / len(table[t][pe]) for pe in pes] for t in tasks])  # [task, pe]
    ranks = mean_rank(scores, higher_is_better=True)
    return dict(sorted(zip(pes, ranks.tolist()), key=lambda item: item[1]))


TIE_ORDER = (*(pe for pe in PE_KINDS if pe != "nope"), "nope")
"""Who wins a tie in :func:`mean_reciprocal_ranks`: the authors rank with pandas' ``method="first"``
in their rows' order, where NoPE comes last, so a tie goes against NoPE."""


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


def mean_reciprocal_ranks(reports: Sequence[dict[str, Any]]) -> dict[str, float]:
    """:func:`reciprocal_rank_scores` of eval reports, one query per (task folder, seed)."""
    queries: dict[tuple[str, int], dict[str, float]] = {}
    for r in reports:
        if r["ood_accuracy"] is not None:
            queries.setdefault((r["task_folder"], r["seed"]), {})[r["pe"]] = r["ood_accuracy"]
    return reciprocal_rank_scores(queries)
