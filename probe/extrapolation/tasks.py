"""`probe extrapolate`'s scorer of task runs: exact match per unseen length of the task's test split, teacher
forced (greedy decoding's exact match in one pass, :func:`probe.tasks.decoding.teacher_forced_exact_match`), and
on IID examples as a check that a change leaves the seen lengths alone; tuned interventions chosen on the
validation slice of the unseen lengths (per length the first 20% of its examples by SHA-256)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.errors import ProbeError
from probe.extrapolation.plan import TUNED_STEPS, VALID_SHARE, RunPlan, Settings, buckets, interval
from probe.extrapolation.report import Outcome
from probe.extrapolation.tuning import (
    HEAD_BATCH,
    HEAD_EVERY,
    HEAD_STEPS,
    Score,
    Tuned,
    temperature_grid,
    validation_split,
    window_grid,
)
from probe.models.attach import attached
from probe.models.interventions import Intervention
from probe.subjects.examples import task_of
from probe.subjects.readings import Reading
from probe.subjects.subject import Loaded, Subject
from probe.tasks.batches import EncodedSet, encode

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel, TransformerLensModelWithWeights


@torch.no_grad()
def score_examples(
    model: TransformerLensModel, data: EncodedSet, device: torch.device, batch_size: int
) -> tuple[Tensor, Tensor]:
    """([example] bool greedy exact match, [example] float64 mean target NLL) of ``model`` on ``data``,
    teacher forced, batches of similar lengths; of one length where the PE reads the pass's length (dynamic
    NTK: a padded batch would rotate an example as its longest neighbour's length says)."""
    model.eval()
    correct = torch.zeros(len(data), dtype=torch.bool)
    nll = torch.zeros(len(data), dtype=torch.float64)
    for index in _batches(data.lengths, batch_size, getattr(getattr(model, "pe", None), "depends_on_length", False)):
        tokens, mask = data.batch(index)  # [batch, pos], [batch, pos - 1]
        tokens, mask = tokens.to(device), mask.to(device)
        logits = model(tokens)[:, :-1].float()  # [batch, pos - 1, vocab]
        hits = (logits.argmax(-1) == tokens[:, 1:]) | ~mask
        losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * mask
        correct[index] = hits.all(1).cpu()
        nll[index] = (losses.sum(1) / mask.sum(1)).double().cpu()
    return correct, nll


def _batches(lengths: Tensor, batch_size: int, one_length: bool) -> list[Tensor]:
    """Indices of ``lengths`` [example] in batches of at most ``batch_size``, by length; each of one length
    with ``one_length``."""
    order = lengths.argsort()
    if not one_length:
        return list(order.split(batch_size))
    _, counts = lengths[order].unique_consecutive(return_counts=True)
    return [part for group in order.split(counts.tolist()) for part in group.split(batch_size)]


def example_loss(model: TransformerLensModel, data: EncodedSet, device: torch.device, step: int) -> Tensor:
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


def check_task_lengths_fit(subject: Subject, settings: Settings) -> None:
    """ProbeError, before anything is read, where a task run's examples (test, validation, IID) are longer than
    the n_ctx its model reads, naming the longest: the model itself sees one batch at a time."""
    n_ctx = (subject.config or {}).get("model", {}).get("n_ctx")
    if n_ctx is None:
        return
    valid, test, iid, tokenizer = task_sets(subject, settings)
    longest = max(int(encode(examples, tokenizer).lengths.max()) for examples in (valid, test, iid) if examples)
    if longest > n_ctx:
        raise ProbeError(
            f"{subject.info.label} reads at most {n_ctx} positions (n_ctx={n_ctx}), and its task's examples reach "
            f"{longest} tokens: extrapolate a run built with n_ctx={longest} or more"
        )


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


class TaskScorer:
    """How extrapolation scores a task run: exact match on its unseen test lengths (teacher forced), IID
    examples beside as a check, tuned on the validation slice (module docstring)."""

    def __init__(self, subject: Subject, loaded: Loaded, reading: Reading, settings: Settings):
        valid, test, iid, tokenizer = task_sets(subject, settings)
        self.data = {"valid": encode(valid, tokenizer), "test": encode(test, tokenizer), "iid": encode(iid, tokenizer)}
        self.settings = settings
        self.trained = subject.trained_length()
        self.longest = int(self.data["test"].lengths.max())
        self.lengths = torch.tensor([e.length for e in test])
        self.context = None
        self.skipped: dict[str, str] = {}  # a task run's scorer leaves nothing out
        self.validation = (
            f"{len(valid)} unseen-length test examples (per length the first {VALID_SHARE:.0%} by SHA-256 of "
            f"source and target, at most {settings.n_valid}), left out of the test's {len(test)}"
        )
        self.model = loaded.model

    @staticmethod
    def estimate(subjects: Sequence[Subject], settings: Settings, plans: Sequence[RunPlan]) -> float:
        """Seconds here: every run's reads at the rate one pass over the first run's test examples takes now."""
        rate = seconds_per_read(subjects[0], settings)
        return rate * sum(task_reads(subject, settings, p) for subject, p in zip(subjects, plans))

    def outcome(
        self,
        family: str,
        kind: str,
        intervention: Intervention,
        on: TransformerLensModelWithWeights,
        tuning: Tuned | None = None,
    ) -> Outcome:
        device, batch, seed = self.settings.device, self.settings.batch_size, self.settings.seed
        with attached(on, intervention):
            ok_test, _ = score_examples(on, self.data["test"], device, batch)
            ok_iid, _ = score_examples(on, self.data["iid"], device, batch)
        test = ok_test.double()
        tuned = None if tuning is None else tuning.to_json()
        return Outcome(
            intervention, family, kind, float(ok_iid.double().mean()), interval(test, seed),
            buckets(test, self.lengths, seed), tuned,
        )  # fmt: skip

    def on_valid(self, intervention: Intervention) -> Score:
        with attached(self.model, intervention):
            ok, nll = score_examples(self.model, self.data["valid"], self.settings.device, self.settings.batch_size)
        return Score(float(ok.double().mean()), -float(nll.mean()))

    def losses(self, step: int) -> list[Tensor]:
        return [example_loss(self.model, self.data["valid"], self.settings.device, step)]
