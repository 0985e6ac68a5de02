"""`probe extrapolate` on task runs: exact match per unseen length of the task's test split, teacher forced
(greedy decoding's exact match in one pass, :func:`probe.tasks.decoding.teacher_forced_exact_match`), and on
IID examples as a check that a change leaves the seen lengths alone; tuned interventions chosen on the
validation slice of the unseen lengths (per length the first 20% of its examples by SHA-256)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.analysis.examples import TRAINED_FROM, task_of
from probe.analysis.extrapolation_plan import (
    TUNED_STEPS,
    VALID_SHARE,
    RunPlan,
    Settings,
    buckets,
    fixed_candidates,
    has_rope,
    interval,
    tuned_candidates,
)
from probe.analysis.extrapolation_report import Outcome, RunExtrapolation
from probe.analysis.subjects import Subject
from probe.analysis.tuning import (
    HEAD_BATCH,
    HEAD_EVERY,
    HEAD_STEPS,
    Score,
    Tuned,
    temperature_grid,
    validation_split,
    window_grid,
)
from probe.errors import ProbeError
from probe.models.attach import attached
from probe.models.interventions import Intervention
from probe.tasks.batches import EncodedSet, encode


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


def task_sets(subject: Subject, settings: Settings) -> tuple[list, list, list, Any]:
    """(validation, test, IID examples, tokenizer) of a task run: its test split's unseen lengths, per length
    the validation slice first by SHA-256 (at most ``n_valid``), and ``n_iid`` IID validation examples."""
    task, tokenizer = task_of(subject.config)
    unseen = [e for e in task.examples("test") if not task.is_seen(e.length)]
    if not unseen:
        raise ProbeError(f"{subject.info.label}: task {task.name} has no unseen length in its test split")
    valid, test = validation_split(
        unseen, lambda e: f"{e.source}\t{e.target}", lambda e: e.length, VALID_SHARE, settings.n_valid
    )
    return valid, test, task.examples("valid", n=settings.n_iid, seed=0), tokenizer


def task_reads(subject: Subject, settings: Settings, plan: RunPlan) -> int:
    """Examples ``plan`` reads on this run, each step's counted from its data: an outcome reads the test and
    the IID examples; a grid, its validation slice per candidate; the per-head fit, its minibatches forward
    and back (about 3 reads each) and its validation slice per snapshot."""
    valid, test, iid, _ = task_sets(subject, settings)
    tuned = {family for family, step in TUNED_STEPS.items() if step in plan.steps}
    grids = {"temperature": len(temperature_grid()), "window": len(window_grid(subject.trained_length()))}
    reads = len(plan.steps) * (len(test) + len(iid)) + sum(grids.get(family, 0) * len(valid) for family in tuned)
    if "head-temperature" in tuned:
        reads += HEAD_STEPS * HEAD_BATCH * 3 + -(-HEAD_STEPS // HEAD_EVERY) * len(valid)
    return reads


def seconds_per_read(subject: Subject, settings: Settings) -> float:
    """This machine's seconds per example read, timed on one pass over the run's test examples untouched."""
    _, test, _, tokenizer = task_sets(subject, settings)
    model = subject.load(settings.device).model
    began = time.perf_counter()
    score_examples(model, encode(test, tokenizer), settings.device, settings.batch_size)
    return (time.perf_counter() - began) / max(1, len(test))


def task_run(subject: Subject, settings: Settings, step: Callable[[str], None]) -> RunExtrapolation:
    """One task run untouched and under each candidate (module docstring)."""
    valid, test, iid, tokenizer = task_sets(subject, settings)
    data = {"valid": encode(valid, tokenizer), "test": encode(test, tokenizer), "iid": encode(iid, tokenizer)}
    trained = subject.trained_length()
    longest = int(data["test"].lengths.max())
    device, batch = settings.device, settings.batch_size
    lengths = torch.tensor([e.length for e in test])
    model = subject.load(device).model

    def outcome(family: str, kind: str, intervention: Intervention, on, tuning: Tuned | None = None) -> Outcome:
        with attached(on, intervention):
            ok_test, _ = score_examples(on, data["test"], device, batch)
            ok_iid, _ = score_examples(on, data["iid"], device, batch)
        return Outcome(
            intervention,
            family,
            kind,
            float(ok_iid.double().mean()),
            interval(ok_test.double(), settings.seed),
            buckets(ok_test.double(), lengths, settings.seed),
            None if tuning is None else tuning.to_json(),
        )

    def on_valid(intervention: Intervention) -> Score:
        with attached(model, intervention):
            ok, nll = score_examples(model, data["valid"], device, batch)
        return Score(float(ok.double().mean()), -float(nll.mean()))

    step("untouched")
    outcomes = [outcome("none", "none", Intervention(), model)]
    rotary = has_rope(subject)
    fixed, skipped = fixed_candidates(subject.info.pe, rotary, trained, longest, settings)
    for family, intervention in fixed:
        step(intervention.name)
        on = model
        if intervention.rope:
            on = subject.load(device, pe_options=dict(intervention.rope)).model
        outcomes.append(outcome(family, "fixed", intervention, on))
    for tuned in tuned_candidates(
        model, settings, trained, on_valid, lambda step: [example_loss(model, data["valid"], device, step)], step
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
