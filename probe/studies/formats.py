"""Section 6's measures: how scratchpad formats rank per task, and whether a scratchpad helps, per PE.

Figure scratchpad_formats_per_ds ranks the formats of each task "aggregated across all models": in the
released notebook (plot_aggregate_final.ipynb, ``get_mrr_df``) a query is one PE at one seed, the items
ranked in it are the task's formats with no scratchpad among them, scored by test exact match, and each
format's mean reciprocal rank is its 1/rank averaged over the queries. probe scores unseen lengths (OOD),
as its Section 3 ranking does, and splits ties (:func:`probe.metrics.reciprocal_ranks_shared`) where the
notebook's ``method="first"`` ranks tied formats by their order in its table: at a CPU's scale many
formats tie at 0%, and an order would decide them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import torch

from probe.analysis.chance import no_better
from probe.analysis.eval_report import EvalReport
from probe.metrics import bootstrap_ci, mean_reciprocal_rank_over_seeds
from probe.models.registry import PE_LABELS
from probe.studies.ranks import PAPER_LEADERS, PAPER_TRAILERS

NONE = "none"  # the format name of a run without a scratchpad
Queries = dict[tuple[str, int], dict[str, float]]  # (pe, seed) -> {format: OOD exact match}
COMMON_FORMATS = (NONE, "C", "full")  # the formats every task of the Section 6 study trains


def task_key(report: EvalReport) -> str:
    """The task a format varies on: its name and options bar the scratchpad and L (``sorting+variant=...``)."""
    return task_key_of(report.task, report.task_options)


def task_key_of(task: str, options: Mapping[str, Any]) -> str:
    """:func:`task_key` of a task and its options, as a run asks them or as its evaluation records them (every
    option, defaults included): an option at the task's default is left out, so both read alike."""
    defaults = _default_options(task)
    kept = {
        k: v
        for k, v in options.items()
        if k not in ("scratchpad", "train_length", "template") and (k not in defaults or defaults[k] != v)
    }
    return "+".join([task, *(f"{k}={v}" for k, v in sorted(kept.items()))])


def task_label(key: str) -> str:
    """A task key (:func:`task_key_of`) as figures and tables name it: the task, its options' values in brackets,
    the default variant named where the task has variants, so sorting's two read as two variants (``sorting``:
    ``sorting (single-token)``; ``sorting+variant=multi-digit``: ``sorting (multi-digit)``)."""
    task, *options = key.split("+")
    values = [option.partition("=")[2] for option in options]
    variant = _default_options(task).get("variant")
    if variant is not None and not any(option.startswith("variant=") for option in options):
        values.insert(0, variant)
    return f"{task} ({', '.join(values)})" if values else task


@cache
def _default_options(task: str) -> dict[str, Any]:
    from probe.tasks import get

    return dict(get(task).options)


def format_of(report: EvalReport) -> str:
    """A run's scratchpad format, :data:`NONE` without one."""
    return report.task_options.get("scratchpad") or NONE


def format_queries(reports: Iterable[EvalReport]) -> dict[str, Queries]:
    """Per task: {(pe, seed): {format: OOD exact match}} from every run's evaluation."""
    out: dict[str, Queries] = {}
    for r in reports:
        if r.ood_accuracy is not None:
            out.setdefault(task_key(r), {}).setdefault((r.pe, r.seed), {})[format_of(r)] = r.ood_accuracy
    return out


def format_ranks(queries: Mapping[str, Queries], n_resamples: int = 1000) -> dict[str, dict[str, Any]]:
    """Per task: each format's mean reciprocal rank over the (PE, seed) queries holding every format, with
    a 95% bootstrap interval over seeds (each resample redraws the seeds, every PE of a drawn seed kept);
    the seeds, PEs and formats it rests on. Formats best first."""
    out: dict[str, dict[str, Any]] = {}
    for task, by_query in queries.items():
        formats = sorted({f for q in by_query.values() for f in q}, key=lambda f: (f == NONE, f))
        complete = {key: q for key, q in by_query.items() if set(q) == set(formats)}
        seeds = sorted({seed for _, seed in complete})
        pes = sorted({pe for pe, _ in complete if all((pe, seed) in complete for seed in seeds)})
        if len(formats) < 2 or not pes:
            continue
        scores = torch.tensor(
            [[[complete[(pe, seed)][f] for f in formats] for pe in pes] for seed in seeds], dtype=torch.float64
        )  # [seed, pe, format]
        out[task] = {"seeds": seeds, "pes": pes, "formats": _ranked(scores, formats, n_resamples)}
    return out


def _ranked(scores: torch.Tensor, formats: Sequence[str], n_resamples: int) -> dict[str, dict[str, float]]:
    """Each format's mean reciprocal rank with its 95% bootstrap interval over seeds, ties shared, best first.

    scores: [seed, query, format]."""
    ci = mean_reciprocal_rank_over_seeds(scores, n_resamples=n_resamples, ties="shared")
    ranked = sorted(zip(formats, ci.mean.tolist(), ci.low.tolist(), ci.high.tolist()), key=lambda r: -r[1])
    return {f: {"mrr": mean, "low": low, "high": high} for f, mean, low, high in ranked}


def scratchpad_gain(
    queries: Mapping[str, Queries], fmt: str = "full", n_resamples: int = 1000
) -> dict[str, dict[str, Any]]:
    """Per task: OOD exact match with format ``fmt`` minus without a scratchpad, per PE (mean over seeds and
    the seeds' range) and over PEs (mean, with a 95% bootstrap interval over seeds). Sorting and LEGO have
    no variable updates: their ``full`` is I+C+O+R, read where ``full`` is absent."""
    out: dict[str, dict[str, Any]] = {}
    for task, by_query in queries.items():
        with_fmt = _as_trained(fmt, by_query)
        pairs = {key: q[with_fmt] - q[NONE] for key, q in by_query.items() if with_fmt in q and NONE in q}
        seeds = sorted({seed for _, seed in pairs})
        pes = sorted({pe for pe, _ in pairs if all((pe, seed) in pairs for seed in seeds)})
        if not pes:
            continue
        per_pe = {pe: [pairs[(pe, seed)] for seed in seeds] for pe in pes}
        per_seed = torch.tensor([[pairs[(pe, seed)] for pe in pes] for seed in seeds], dtype=torch.float64)
        ci = bootstrap_ci(per_seed.mean(1, keepdim=True), n_resamples=n_resamples)  # over seeds
        out[task] = {
            "format": with_fmt,
            "seeds": seeds,
            "pes": {pe: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)} for pe, v in per_pe.items()},
            "mean": ci.mean.item(),
            "low": ci.low.item(),
            "high": ci.high.item(),
        }
    return out


def format_accuracy(queries: Mapping[str, Queries]) -> dict[str, dict[str, Any]]:
    """Per task, each PE's OOD exact match per format: the mean over the seeds it was measured at, their range
    and those seeds. What the appendix's Figures scratchpad_formats_per_model:<task> draw ("Generalization of
    various scratchpad formats for each model", averaged over the unseen lengths), which the ranks above fold
    into one number per format. ``formats``: the task's formats, no scratchpad first and the full format last."""
    out: dict[str, dict[str, Any]] = {}
    for task, by_query in queries.items():
        measured: dict[str, dict[str, dict[int, float]]] = {}
        for (pe, seed), q in by_query.items():
            for fmt, value in q.items():
                measured.setdefault(pe, {}).setdefault(fmt, {})[seed] = value
        formats = sorted({f for q in by_query.values() for f in q}, key=lambda f: (f != NONE, f == "full", f))
        out[task] = {
            "formats": formats,
            "pes": {
                pe: {
                    fmt: {
                        "mean": statistics.fmean(by_format[fmt].values()),
                        "min": min(by_format[fmt].values()),
                        "max": max(by_format[fmt].values()),
                        "seeds": sorted(by_format[fmt]),
                    }
                    for fmt in formats
                    if fmt in by_format
                }
                for pe, by_format in measured.items()
            },
        }
    return out


def _as_trained(fmt: str, by_query: Queries) -> str:
    """:func:`as_trained` of ``fmt`` among the formats a task's queries hold."""
    return as_trained(fmt, {f for q in by_query.values() for f in q})


def as_trained(fmt: str, trained: Collection[str]) -> str:
    """The format a task that trains ``trained`` trains for ``fmt``: sorting's and LEGO's full, which have no
    variable updates, is I+C+O+R."""
    if fmt != "full" or fmt in trained:
        return fmt
    return "I+C+O+R" if "I+C+O+R" in trained else fmt


def format_ranks_per_pe(
    queries: Mapping[str, Queries], formats: Sequence[str] = COMMON_FORMATS, n_resamples: int = 1000
) -> dict[str, dict[str, Any]]:
    """Per PE: each format's mean reciprocal rank over the (task, seed) queries, with a 95% bootstrap interval
    over seeds; the tasks and seeds it rests on. Formats best first.

    The appendix's Figure scratchpad_formats_per_model ranks the formats "aggregated across all datasets per
    each model"; the released notebook keeps the queries holding every format, no scratchpad one of them. This
    study trains addition's other formats alone, so a PE's formats are those every task trains (``formats``,
    each task's full read as :func:`_as_trained`), over the seeds at which every task measured has them all:
    a seed half landed would rank its first tasks alone."""
    by_pe: dict[str, dict[str, dict[int, list[float]]]] = {}  # pe -> task -> seed -> OOD per format
    for task, by_query in queries.items():
        trained = [_as_trained(f, by_query) for f in formats]
        for (pe, seed), q in by_query.items():
            if all(f in q for f in trained):
                by_pe.setdefault(pe, {}).setdefault(task, {})[seed] = [q[f] for f in trained]
    out: dict[str, dict[str, Any]] = {}
    for pe, rows in sorted(by_pe.items()):
        tasks = sorted(rows)
        seeds = sorted(set.intersection(*(set(by_seed) for by_seed in rows.values())))
        if not seeds:
            continue
        scores = torch.tensor([[rows[t][s] for t in tasks] for s in seeds], dtype=torch.float64)  # [seed, task, format]
        out[pe] = {"seeds": seeds, "tasks": tasks, "formats": _ranked(scores, formats, n_resamples)}
    return out


def helps(gain: Mapping[str, Any]) -> bool | None:
    """Whether a scratchpad helps on a task "across all PEs" (Section 6; Section 6.1 reads addition's full
    format as "the case in which scratchpad is helpful across all PEs"): every PE's gain, its mean over seeds,
    above 0, and the gain over PEs above 0 with its interval over seeds clear of 0, so that neither one PE's
    large gain nor a mean of noise reads as help. None with one seed (an interval of no width says nothing)."""
    if len(gain["seeds"]) < 2:
        return None
    return gain["low"] > 0 and all(pe["mean"] > 0 for pe in gain["pes"].values())


def claim_only_addition(
    gains: Mapping[str, Mapping[str, Mapping[str, Any]]],
    planned: Mapping[str, Iterable[str]],
    addition: str = "addition",
) -> str:
    """The paper's first Section 6 claim: "across all PEs and regardless of the format, scratchpad is beneficial
    solely for the addition task". ``gains``: per format, per task, :func:`scratchpad_gain`'s entry (keyed by
    the format a task trains: sorting's and LEGO's full one is I+C+O+R); ``planned``: per task of the study,
    the formats it trains. The claim holds where every format of addition helps (:func:`helps`) and no format
    of any other task does; it is a claim about every task and format, so it waits for each to have its gain
    at two seeds or more. One line: holds, holds in part, does not, or cannot be told yet and for which tasks."""
    if addition not in planned:
        raise ValueError(f"the study has no {addition!r} task to read the claim on")
    verdicts = _verdicts(gains, planned)
    waiting = sorted({task for (task, _), verdict in verdicts.items() if verdict is None})
    if waiting:
        return (
            "cannot be told yet: it needs at least two seeds of every format on every task "
            f"({', '.join(map(task_label, waiting))} not yet)"
        )
    on_addition = [fmt for (task, fmt), verdict in verdicts.items() if task == addition and verdict]
    missed = [fmt for (task, fmt), verdict in verdicts.items() if task == addition and not verdict]
    elsewhere: dict[str, list[str]] = {}
    for (task, fmt), verdict in verdicts.items():
        if task != addition and verdict:
            elsewhere.setdefault(task, []).append(fmt)
    total = len(on_addition) + len(missed)
    if not missed and not elsewhere:
        return f"holds: every format helps on addition ({total} of {total}), and none on any other task"
    verdict = "does not hold" if not on_addition else "holds in part"
    detail = f"{len(on_addition)} of {total} formats help on addition"
    if missed:
        detail += f" (not {', '.join(missed)})"
    if elsewhere:
        also = (f"{', '.join(fmts)} on {task_label(task)}" for task, fmts in sorted(elsewhere.items()))
        detail += "; also " + "; ".join(also)
    else:
        detail += ", none on any other task"
    return f"{verdict}: {detail}"


def helps_per_format(
    gains: Mapping[str, Mapping[str, Mapping[str, Any]]], planned: Mapping[str, Iterable[str]]
) -> dict[str, dict[str, list[str]]]:
    """The first claim read a format at a time, while it waits for the rest: per format whose every task (of
    ``planned``, as :func:`claim_only_addition` takes it) has its gain at two seeds or more, the tasks it was
    read on and those where it helps (:func:`helps`), in ``planned``'s order. A format still waiting on a task
    is left out."""
    by_format: dict[str, dict[str, bool | None]] = {}
    for (task, fmt), verdict in _verdicts(gains, planned).items():
        by_format.setdefault(fmt, {})[task] = verdict
    return {
        fmt: {"read": list(verdicts), "helps": [task for task, verdict in verdicts.items() if verdict]}
        for fmt, verdicts in by_format.items()
        if None not in verdicts.values()
    }


def _verdicts(
    gains: Mapping[str, Mapping[str, Mapping[str, Any]]], planned: Mapping[str, Iterable[str]]
) -> dict[tuple[str, str], bool | None]:
    """Per (task, format) of ``planned``, in its order: :func:`helps` of its gain, None while it has none."""
    return {
        (task, fmt): helps(gains[fmt][task]) if task in gains.get(fmt, {}) else None
        for task, formats in planned.items()
        for fmt in formats
    }


def claim_best_differs(per_pe: Mapping[str, Mapping[str, Any]]) -> str:
    """The appendix's Figure scratchpad_formats_per_model: "The optimal scratchpad format is different for each
    model". ``per_pe``: :func:`format_ranks_per_pe`. Each PE's best format is its highest mean reciprocal rank
    (formats level with it share the place), clear where its interval over seeds lies above its runner-up's.
    Holds where two PEs' best formats differ, both clear; does not hold where every PE's best is the same one;
    waits for two seeds, since one seed's interval has no width. One line, each PE's best named."""
    if not per_pe:
        return "cannot be told yet: no PE has every format measured on every task"
    best = {pe: _best(entry["formats"]) for pe, entry in per_pe.items()}
    named = ", ".join(f"{PE_LABELS.get(pe, pe)} {' = '.join(b)}" for pe, b in best.items())
    if min(len(entry["seeds"]) for entry in per_pe.values()) < 2:
        seeds = sorted({s for entry in per_pe.values() for s in entry["seeds"]})
        at = f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"
        return f"cannot be told yet: it needs two seeds (best at {at}: {named})"
    if len(set(best.values())) == 1:
        return f"does not hold: every PE's best format is the same ({named})"
    clear = {pe for pe, entry in per_pe.items() if _clear(entry["formats"], best[pe])}
    cleared = ", ".join(PE_LABELS.get(pe, pe) for pe in per_pe if pe in clear) or "none"
    if any(best[a] != best[b] for a in clear for b in clear):
        return f"holds: best {named}; clear of its runner-up: {cleared}"
    return (
        "not clear: the best formats differ, but no two that differ are clear of their runners-up "
        f"(best {named}; clear: {cleared})"
    )


def _best(formats: Mapping[str, Mapping[str, float]]) -> tuple[str, ...]:
    top = max(r["mrr"] for r in formats.values())
    return tuple(f for f, r in formats.items() if r["mrr"] >= top - 1e-12)


def _clear(formats: Mapping[str, Mapping[str, float]], best: tuple[str, ...]) -> bool:
    """Whether the best format's interval lies above every other format's (never so beside one level with it)."""
    return all(formats[best[0]]["low"] > r["high"] for f, r in formats.items() if f != best[0])


def pe_queries(
    reports: Iterable[EvalReport], formats: Sequence[str] | None = None, scenarios: Sequence[str] | None = None
) -> dict[tuple[str, int], dict]:
    """{(scenario, seed): {pe: OOD}} over scratchpad runs (of ``formats``, in ``scenarios``, where given): the
    PEs ranked with a scratchpad, for the paper's second claim (a PE that generalizes is still needed)."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for r in reports:
        fmt = format_of(r)
        wanted = (formats is None or fmt in formats) and (scenarios is None or r.task_folder in scenarios)
        if fmt != NONE and wanted and r.ood_accuracy is not None:
            out.setdefault((r.task_folder, r.seed), {})[r.pe] = r.ood_accuracy
    return out


def seed_means(reports: Iterable[EvalReport], measure: str) -> dict[str, dict[str, Any]]:
    """Per scenario (run folder): the seeds measured and each PE's ``measure`` (``"iid_accuracy"`` or
    ``"ood_accuracy"``), the mean over them."""
    by_scenario: dict[str, list[EvalReport]] = {}
    for r in reports:
        if getattr(r, measure) is not None:
            by_scenario.setdefault(r.task_folder, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for scenario, runs in by_scenario.items():
        by_pe: dict[str, list[float]] = {}
        for r in runs:
            by_pe.setdefault(r.pe, []).append(getattr(r, measure))
        out[scenario] = {
            "seeds": sorted({r.seed for r in runs}),
            "pes": {pe: statistics.fmean(values) for pe, values in by_pe.items()},
        }
    return out


def _short(
    reports: Iterable[EvalReport], measure: str, falls_short: Callable[[str, float], bool]
) -> dict[str, dict[str, Any]]:
    """Per PE, the scratchpad scenarios where its mean over seeds of ``measure`` falls short (``falls_short``
    of the scenario and that mean), with how many it was measured on."""
    out: dict[str, dict[str, Any]] = {}
    for scenario, row in sorted(seed_means((r for r in reports if format_of(r) != NONE), measure).items()):
        for pe, mean in row["pes"].items():
            entry = out.setdefault(pe, {"under": [], "of": 0})
            entry["of"] += 1
            if falls_short(scenario, mean):
                entry["under"].append(scenario)
    return out


def unfitted(reports: Iterable[EvalReport], bar: float) -> dict[str, dict[str, Any]]:
    """Per PE, the scratchpad scenarios where it has not fit the lengths it trained on: its IID exact match, the
    mean over the seeds measured (:func:`seed_means`), under ``bar`` (the recipe rule's), with how many it was
    measured on. The second claim ranks PEs on unseen lengths, where a PE that has not learnt the task at its
    training lengths ranks low for that, not for how it generalizes: the report says how often each PE stands
    there."""
    return _short(reports, "iid_accuracy", lambda _, iid: iid < bar)


def guessing(reports: Iterable[EvalReport], chance: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Per PE, the scratchpad scenarios where it does no better on unseen lengths than a constant guess: its OOD
    exact match, the mean over the seeds measured, :func:`~probe.analysis.chance.no_better` than ``chance`` of the
    scenario (what the commonest training answer scores there, :func:`probe.analysis.chance.constant_guess`).
    There two PEs differ by chance, and a ranking of them reads no length generalization."""
    return _short(reports, "ood_accuracy", lambda scenario, ood: no_better(ood, chance[scenario]))


def fitted(reports: Iterable[EvalReport], bar: float, pes: Sequence[str]) -> list[str]:
    """The scratchpad scenarios where every one of ``pes`` has fit the lengths it trained on: each measured, its
    IID exact match (the mean over the seeds measured, :func:`seed_means`) at ``bar`` or over. On these alone, a
    PE's place on unseen lengths reads how it generalizes, not whether it learnt the task; the choice reads IID
    only, never the unseen lengths it ranks."""
    table = seed_means((r for r in reports if format_of(r) != NONE), "iid_accuracy")
    return [
        scenario
        for scenario, row in sorted(table.items())
        if all(pe in row["pes"] and row["pes"][pe] >= bar for pe in pes)
    ]


def claim_pe_needed(
    ranking: Mapping[str, Any] | None, waiting: int, every: int, scope: str = "every scratchpad scenario"
) -> str:
    """The paper's second Section 6 claim: "having a positional encoding with robust length generalization is
    crucial since scratchpad/CoT alone may not enhance the generalization", read as NoPE and T5 still ranked
    ahead of ALiBi, Rotary and APE on the scratchpad runs, every pair's intervals over seeds apart.
    ``ranking``: :func:`~probe.studies.ranks.ranked_over_seeds` of :func:`pe_queries`, ties split
    (at this scale most scratchpad scenarios tie PEs at 0% on unseen lengths, and a tie broken by table order
    would rank them by that order). It waits until every one of the ``every`` scratchpad scenarios has two
    seeds (``waiting``: how many have not), since a ranking over the first to land would move; ``scope`` names
    those scenarios in that line. One line: holds, holds in part (the pairs not ahead, or not apart), does not
    hold, or cannot be told yet."""
    pes = ranking["pes"] if ranking else {}
    pairs = [(a, b) for a in PAPER_LEADERS for b in PAPER_TRAILERS if a in pes and b in pes]
    if waiting or not pairs or len(ranking["seeds"]) < 2:
        ready = every - waiting
        have = "has" if ready == 1 else "have"
        return f"cannot be told yet: it needs at least two seeds of {scope} ({ready} of {every} {have} them)"
    ahead = [(a, b) for a, b in pairs if pes[a]["mrr"] > pes[b]["mrr"]]
    apart = [(a, b) for a, b in ahead if pes[a]["low"] > pes[b]["high"]]
    if len(apart) == len(pairs):
        return "holds: with a scratchpad, NoPE and T5 still rank ahead of ALiBi, Rotary and APE, intervals apart"
    if not ahead:
        return "does not hold: with a scratchpad, neither NoPE nor T5 ranks ahead of ALiBi, Rotary or APE"
    name = PE_LABELS.get
    behind = [f"{name(b, b)} ≥ {name(a, a)}" for a, b in pairs if (a, b) not in ahead]
    close = [f"{name(a, a)} and {name(b, b)}" for a, b in ahead if (a, b) not in apart]
    detail = []
    if behind:
        detail.append(f"not ahead: {', '.join(behind)}")
    if close:
        detail.append(f"intervals overlap: {', '.join(close)}")
    return (
        f"holds in part: with a scratchpad, NoPE or T5 ranks ahead of ALiBi, Rotary or APE in {len(ahead)} of "
        f"{len(pairs)} pairs, {len(apart)} with intervals apart ({'; '.join(detail)})"
    )
