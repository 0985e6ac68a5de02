"""`probe extrapolate`: each run under each inference-time intervention, beside itself untouched.

Task runs are scored by exact match per length bucket on their task's unseen test lengths (teacher forced:
greedy decoding's exact match in one pass, :func:`probe.tasks.decoding.teacher_forced_exact_match`), and on
IID examples as a check that a change leaves the seen lengths alone. Code runs, imported runs and ``hf:``
models are scored by the perplexity of held-out files at multiples of their context (the paper's way:
:mod:`probe.analysis.perplexity`). Intervals are percentile bootstraps over examples (files).

The interventions (:mod:`probe.models.interventions`) come in two kinds, reported apart:

- **fixed rules**, nothing tuned: ``log-length`` with L the longest sequence trained on; ``cap`` at L - 1
  (bias and rotating PEs); ``rope``, YaRN stretched by the longest test length over L (Rotary, and hf:
  models with RoPE), and any intervention given with ``--intervention``;
- **tuned** on a validation slice that the test numbers leave out (:mod:`probe.analysis.tuning`): per unseen
  length, the first 20% of its test examples by SHA-256 of the example (at most ``n_valid``); for language
  models, 20% of the held-out files by SHA-256 of their name. A global ``temperature`` and a ``window`` with
  sinks by grid search, a ``head-temperature`` per head fitted by gradient descent on the validation loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.analysis.examples import TRAINED_FROM, task_of
from probe.analysis.extrapolation_report import ExtrapolationReport, Outcome, RunExtrapolation
from probe.analysis.perplexity import scored_nll
from probe.analysis.subjects import CodeRun, HfModel, Subject, TaskRun, TextReading, home, resolve_all
from probe.analysis.tuning import (
    HEAD_BATCH,
    Score,
    Tuned,
    fit_head_temperatures,
    grid_search,
    temperature_grid,
    validation_split,
    window_grid,
)
from probe.errors import ProbeError
from probe.metrics import bootstrap_ci
from probe.models.intervention_hooks import intervened
from probe.models.interventions import Intervention
from probe.tasks.batches import EncodedSet, encode

FIXED = ("log-length", "cap", "rope")
TUNED = ("temperature", "window", "head-temperature")
FAMILIES = FIXED + TUNED
VALID_SHARE = 0.2
MULTIPLES = (0.5, 1.0, 1.5, 2.0, 2.5)
N_RESAMPLES = 1000
LM_FIT_FILES = 4  # validation windows per step of a language model's per-head fit
Progress = Callable[[str, int, int], None]


@dataclass
class Settings:
    families: Sequence[str] = FAMILIES
    given: Sequence[Intervention] = ()  # fixed interventions as the user spelled them
    n_valid: int = 50  # validation examples per unseen length at most (files: in all)
    n_iid: int = 200
    multiples: Sequence[float] = MULTIPLES
    max_files: int | None = 40
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    batch_size: int = 128
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)  # corpus and context for hf: models
    progress: Progress | None = None


def extrapolate(
    names: Sequence[str | Path], settings: Settings, root: str | Path = "checkpoints"
) -> ExtrapolationReport:
    """Every run of ``names`` under each intervention of ``settings`` (module docstring)."""
    unknown = [f for f in settings.families if f not in FAMILIES]
    if unknown:
        raise ProbeError(f"unknown intervention family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    subjects = resolve_all(list(names))
    kinds = {isinstance(s, TaskRun) for s in subjects}
    if len(kinds) > 1:
        raise ProbeError("extrapolate task runs and language models (code runs, hf: models) separately")
    runs = []
    for index, subject in enumerate(subjects):
        step = _stepper(settings.progress, subject.info.label, index, len(subjects))
        evaluate = _task_run if isinstance(subject, TaskRun) else _language_model
        runs.append(evaluate(subject, settings, step))
    measure = "exact match" if isinstance(subjects[0], TaskRun) else "perplexity"
    folder = home(subjects, root, settings.options)
    return ExtrapolationReport(runs, measure, folder, settings.seed)


def _stepper(progress: Progress | None, label: str, index: int, total: int) -> Callable[[str], None]:
    def step(what: str) -> None:
        if progress:
            progress(f"{label}: {what}", index, total)

    return step


# -- what each candidate is --------------------------------------------------------------------------------
def fixed_candidates(
    pe_kind: str | None, rotary: bool, trained: int, longest: int, settings: Settings
) -> tuple[list[tuple[str, Intervention]], dict[str, str]]:
    """(family, intervention) of the fixed rules this model takes, and why it takes none of the others."""
    from probe.models.registry import pe_class

    chosen, skipped = [], {}
    cls = pe_class(pe_kind) if pe_kind else None
    if "log-length" in settings.families:
        chosen.append(("log-length", Intervention(log_length=trained)))
    if "cap" in settings.families:
        if cls is not None and (cls.adds_bias or cls.rotates):
            chosen.append(("cap", Intervention(cap=trained - 1)))
        else:
            skipped["cap"] = "no relative distance to cap" if cls is not None else "positions inside transformers"
    if "rope" in settings.families:
        if rotary:
            factor = max(1.0, round(longest / trained, 2))
            rope = {"scaling": "yarn", "factor": factor, "original_length": trained}
            chosen.append(("rope", Intervention(rope=rope)))
        else:
            skipped["rope"] = "no rotary positions"
    for given in settings.given:
        why = _not_applicable(given, cls, rotary)
        if why:
            skipped[given.name] = why
        else:
            chosen.append(("given", given.resolved(trained)))
    return chosen, skipped


def _not_applicable(intervention: Intervention, cls, rotary: bool) -> str | None:
    """Why a run cannot take ``intervention`` as given (``cls``: its PE class, None for an hf: model), or None."""
    if intervention.rope and not rotary:
        return "no rotary positions to scale"
    if intervention.cap is not None and not (cls is not None and (cls.adds_bias or cls.rotates)):
        return "no relative distance to cap" if cls is not None else "positions inside transformers"
    return None


# -- task runs --------------------------------------------------------------------------------------------
@torch.no_grad()
def score_examples(model, data: EncodedSet, device: torch.device, batch_size: int) -> tuple[Tensor, Tensor]:
    """([example] bool greedy exact match, [example] float64 mean target NLL) of ``model`` on ``data``,
    teacher forced, batches of similar lengths."""
    model.eval()
    correct = torch.zeros(len(data), dtype=torch.bool)
    nll = torch.zeros(len(data), dtype=torch.float64)
    for index in data.lengths.argsort().split(batch_size):
        tokens, mask = data.batch(index)  # [batch, pos], [batch, pos - 1]
        tokens, mask = tokens.to(device), mask.to(device)
        logits = model(tokens)[:, :-1].float()  # [batch, pos - 1, vocab]
        hits = (logits.argmax(-1) == tokens[:, 1:]) | ~mask
        losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * mask
        correct[index] = hits.all(1).cpu()
        nll[index] = (losses.sum(1) / mask.sum(1)).double().cpu()
    return correct, nll


def example_loss(model, data: EncodedSet, device: torch.device, step: int) -> Tensor:
    """Mean target-token NLL over the ``step``-th minibatch of ``data`` (:data:`HEAD_BATCH` examples, drawn
    with the step as seed), with gradients: what a per-head temperature lowers."""
    index = torch.randperm(len(data), generator=torch.Generator().manual_seed(step))[:HEAD_BATCH]
    tokens, mask = data.batch(index)
    tokens, mask = tokens.to(device), mask.to(device)
    logits = model(tokens)[:, :-1].float()
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    return (losses * mask).sum() / mask.sum()


def _task_run(subject: Subject, settings: Settings, step: Callable[[str], None]) -> RunExtrapolation:
    task, tokenizer = task_of(subject.config)
    unseen = [e for e in task.examples("test") if not task.is_seen(e.length)]
    if not unseen:
        raise ProbeError(f"{subject.info.label}: task {task.name} has no unseen length in its test split")
    valid, test = validation_split(
        unseen, lambda e: f"{e.source}\t{e.target}", lambda e: e.length, VALID_SHARE, settings.n_valid
    )
    iid = task.examples("valid", n=settings.n_iid, seed=0)
    data = {"valid": encode(valid, tokenizer), "test": encode(test, tokenizer), "iid": encode(iid, tokenizer)}
    trained = subject.trained_length()
    longest = int(data["test"].lengths.max())
    device, batch = settings.device, settings.batch_size
    lengths = torch.tensor([e.length for e in test])
    model = subject.load(device).model

    def outcome(family: str, kind: str, intervention: Intervention, on, tuning: Tuned | None = None) -> Outcome:
        with intervened(on, intervention):
            ok_test, _ = score_examples(on, data["test"], device, batch)
            ok_iid, _ = score_examples(on, data["iid"], device, batch)
        return Outcome(
            intervention,
            family,
            kind,
            float(ok_iid.double().mean()),
            _interval(ok_test.double(), settings.seed),
            _buckets(ok_test.double(), lengths, settings.seed),
            None if tuning is None else tuning.to_json(),
        )

    def on_valid(intervention: Intervention) -> Score:
        with intervened(model, intervention):
            ok, nll = score_examples(model, data["valid"], device, batch)
        return Score(float(ok.double().mean()), -float(nll.mean()))

    step("untouched")
    outcomes = [outcome("none", "none", Intervention(), model)]
    rotary = _has_rope(subject)
    fixed, skipped = fixed_candidates(subject.info.pe, rotary, trained, longest, settings)
    for family, intervention in fixed:
        step(intervention.name)
        on = model
        if intervention.rope:
            on = subject.load(device, pe_options=dict(intervention.rope)).model
        outcomes.append(outcome(family, "fixed", intervention, on))
    for tuned in _tuned(
        model, settings, trained, on_valid, lambda step: example_loss(model, data["valid"], device, step), step
    ):
        outcomes.append(outcome(tuned.family, "tuned", tuned.intervention, model, tuned))
    validation = (
        f"{len(valid)} unseen-length test examples (per length the first {VALID_SHARE:.0%} by SHA-256 of "
        f"source and target, at most {settings.n_valid}), left out of the test's {len(test)}"
    )
    return RunExtrapolation(
        subject.info.label,
        subject.info.pe,
        subject.info.path,
        subject.info.seed,
        trained,
        validation,
        outcomes,
        skipped,
        f"the longest of {TRAINED_FROM} IID validation sequences, in tokens",
    )


def _has_rope(subject: Subject) -> bool:
    """Whether a run's PE takes a RoPE scaling (Rotary: its ``scaling`` option)."""
    from probe.models.registry import pe_class

    return "scaling" in pe_class(subject.info.pe).options


def _tuned(
    model,
    settings: Settings,
    trained: int,
    score: Callable[[Intervention], Score],
    loss: Callable[[], Tensor],
    step: Callable[[str], None],
) -> list[Tuned]:
    found = []
    if "temperature" in settings.families:
        step("tuning a temperature")
        found.append(grid_search("temperature", temperature_grid(), score))
    if "window" in settings.families:
        step("tuning a window")
        found.append(grid_search("window", window_grid(trained), score))
    if "head-temperature" in settings.families:
        step("fitting a temperature per head")
        snapshots = fit_head_temperatures(model, loss)
        grid = [Intervention(head_temperatures=h, head_source=f"fitted@{step}") for step, h in snapshots]
        found.append(grid_search("head-temperature", grid, score))
    return found


def _interval(values: Tensor, seed: int) -> dict[str, float]:
    ci = bootstrap_ci(values, N_RESAMPLES, 0.95, seed)
    return {"mean": float(ci.mean), "low": float(ci.low), "high": float(ci.high), "n": int(values.numel())}


def _buckets(values: Tensor, keys: Tensor, seed: int) -> list[dict[str, Any]]:
    """Per distinct key (a length, a context multiple): the mean of ``values`` there and its interval."""
    return [
        {"at": int(k) if float(k).is_integer() else float(k), **_interval(values[keys == k], seed)}
        for k in keys.unique().tolist()
    ]


# -- language models --------------------------------------------------------------------------------------
def _language_model(subject: Subject, settings: Settings, step: Callable[[str], None]) -> RunExtrapolation:
    device = settings.device
    loaded = subject.load(device)
    files, names, context, bos, trained = _lm_files(subject, loaded, settings)
    pairs = list(zip(names, files))
    valid, test = validation_split(pairs, lambda p: p[0], lambda p: 0, VALID_SHARE, settings.n_valid)
    contexts = sorted({max(2, round(m * context)) for m in settings.multiples})
    scored = max(1, round(context * 200 / 1024))  # the paper's last 200 of 1024 tokens
    test_files = [f for _, f in test]
    valid_files = [f for _, f in valid]
    longest = contexts[-1]
    max_length = loaded.max_length

    def nll_at(model, chosen: Sequence[Tensor], length: int) -> Tensor:
        """[file] mean NLL of the scored tokens at ``length`` (NaN where a file is shorter)."""
        out = torch.full((len(chosen),), float("nan"), dtype=torch.float64)
        keep = [i for i, f in enumerate(chosen) if len(f) >= length]
        if keep and (max_length is None or length <= max_length):
            rows = scored_nll(
                model, [chosen[i] for i in keep], length, scored, device=device, batch_size=settings.batch_size, bos=bos
            )
            out[keep] = rows.mean(1)
        return out

    def outcome(family: str, kind: str, intervention: Intervention, on, tuning: Tuned | None = None) -> Outcome:
        with intervened(on, intervention):
            per = torch.stack([nll_at(on, test_files, c) for c in contexts], 1)  # [file, context]
        buckets = []
        for index, c in enumerate(contexts):
            values = per[:, index]
            values = values[~values.isnan()].exp()  # each file's perplexity
            if values.numel():
                buckets.append({"at": round(c / context, 3), "context": c, **_interval(values, settings.seed)})
        unseen = [b for b in buckets if b["at"] > 1]
        headline = unseen[-1] if unseen else buckets[-1]
        return Outcome(
            intervention,
            family,
            kind,
            None,
            {k: headline[k] for k in ("mean", "low", "high", "n")},
            buckets,
            None if tuning is None else tuning.to_json(),
        )

    unseen_contexts = [c for c in contexts if c > context] or [longest]

    def on_valid(intervention: Intervention) -> Score:
        with intervened(loaded.model, intervention):
            nll = torch.stack([nll_at(loaded.model, valid_files, c) for c in unseen_contexts])
        return Score(-float(nll.nanmean()))

    def loss(step: int) -> Tensor:
        return _window_loss(loaded.model, valid_files, unseen_contexts[-1], scored, bos, device, step)

    step("untouched")
    outcomes = [outcome("none", "none", Intervention(), loaded.model)]
    rotary = loaded.info.pe == "rotary" if isinstance(subject, HfModel) else _has_rope(subject)
    pe_kind = None if isinstance(subject, HfModel) else subject.info.pe
    fixed, skipped = fixed_candidates(pe_kind, rotary, trained, longest, settings)
    for family, intervention in fixed:
        step(intervention.name)
        on = loaded.model
        if intervention.rope:
            on = _with_rope(subject, loaded, intervention, device)
        outcomes.append(outcome(family, "fixed", intervention, on))
    for tuned in _tuned(loaded.model, settings, trained, on_valid, loss, step):
        outcomes.append(outcome(tuned.family, "tuned", tuned.intervention, loaded.model, tuned))
    validation = (
        f"{len(valid)} held-out files (the first {VALID_SHARE:.0%} by SHA-256 of their name), left out of the "
        f"test's {len(test)}"
    )
    where = "its n_ctx" if isinstance(subject, HfModel) else "its training context"
    return RunExtrapolation(
        loaded.info.label,
        loaded.info.pe,
        loaded.info.path,
        loaded.info.seed,
        trained,
        validation,
        outcomes,
        skipped,
        f"{where}, in tokens",
        context=context,
    )


def _lm_files(subject: Subject, loaded, settings: Settings) -> tuple[list[Tensor], list[str], int, int | None, int]:
    """(held-out files in the model's ids, their names, T the contexts are multiples of, the token windows
    start with, L the length trained on), at most ``max_files`` files long enough for the smallest context."""
    from probe.corpus.prepared import run_corpus
    from probe.models.checkpoint import window_bos

    if isinstance(subject, CodeRun):
        corpus = run_corpus(subject.path, subject.config)
        names = list(corpus.heldout_names)
        files = [corpus.heldout_file(i) for i in range(len(names))]
        context = trained = int(subject.config["task"]["options"]["context"])
        bos = window_bos(subject.config)
    elif isinstance(subject, HfModel):
        reading = TextReading(
            [subject], {**settings.options, "context": settings.options.get("context") or loaded.context}
        )
        tokenized = reading.tokenized(loaded)
        names, files = list(tokenized.heldout_names), list(tokenized.tokens)
        context, trained, bos = reading.context(loaded), int(loaded.context), loaded.bos_id
    else:
        raise ProbeError(f"{subject.name} is neither a code run nor an hf: model")
    smallest = max(2, round(min(settings.multiples) * context))
    kept = [(n, f) for n, f in zip(names, files) if len(f) >= smallest]
    if not kept:
        raise ProbeError(f"{subject.info.label}: no held-out file has {smallest} tokens, the smallest context read")
    if settings.max_files is not None and len(kept) > settings.max_files:
        order = torch.randperm(len(kept), generator=torch.Generator().manual_seed(settings.seed))[: settings.max_files]
        kept = [kept[i] for i in sorted(order.tolist())]
    return [f for _, f in kept], [n for n, _ in kept], context, bos, trained


def _window_loss(
    model, files: Sequence[Tensor], context: int, scored: int, bos: int | None, device, step: int
) -> Tensor:
    """Mean NLL of the scored tokens of a few of ``files`` (drawn with the step as seed) read at ``context``,
    with gradients."""
    long_enough = [f[-context:] for f in files if len(f) >= context]
    if not long_enough:
        raise ProbeError(f"no validation file has {context} tokens to fit temperatures on")
    index = torch.randperm(len(long_enough), generator=torch.Generator().manual_seed(step))[:LM_FIT_FILES]
    windows = torch.stack([long_enough[i] for i in index.tolist()]).to(device)
    if bos is not None:
        windows[:, 0] = bos
    logits = model(windows)[:, -scored - 1 : -1].float()
    return F.cross_entropy(logits.transpose(1, 2), windows[:, -scored:])


def _with_rope(subject: Subject, loaded, intervention: Intervention, device) -> Any:
    if isinstance(subject, HfModel):
        from probe.models.hf import load_external

        return load_external(subject.name, device, rope=dict(intervention.rope)).bridge
    return subject.load(device, pe_options=dict(intervention.rope)).model
