"""`probe extrapolate`'s scorer of language models (code runs, imported runs, ``hf:`` models): the perplexity of
held-out files at multiples of the model's context, the paper's way (:mod:`probe.analysis.perplexity`: each
file's last ``c`` tokens, its last 200/1024 T scored); tuned interventions chosen on 20% of the files, by
SHA-256 of their name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.analysis.perplexity import scored_nll
from probe.errors import ProbeError
from probe.extrapolation.plan import VALID_SHARE, RunPlan, Settings, interval
from probe.extrapolation.report import Outcome
from probe.extrapolation.tuning import Score, Tuned, validation_split
from probe.models.attach import attached
from probe.models.hf_attention import logits_of
from probe.models.interventions import Intervention
from probe.subjects.readings import Reading
from probe.subjects.subject import Loaded, Subject

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel, TransformerLensModelWithWeights

LM_FIT_FILES = 4  # validation windows per step of a language model's per-head fit


@dataclass(frozen=True)
class _Windows:
    """How a language model is read here: each held-out file's last ``c`` tokens at every context ``c`` of
    the multiples, its last ``scored`` tokens scored (the paper's 200 of 1024), ``bos`` in front."""

    contexts: list[int]  # ascending, in tokens
    context: int  # T, the multiples' unit
    scored: int
    bos: int | None
    max_length: int | None  # the longest the model reads; None: any
    settings: Settings

    @classmethod
    def of(cls, loaded, context: int, bos: int | None, settings: Settings) -> _Windows:
        contexts = sorted({max(2, round(m * context)) for m in settings.multiples})
        scored = max(1, round(context * 200 / 1024))
        return cls(contexts, context, scored, bos, loaded.max_length, settings)

    @property
    def unseen(self) -> list[int]:
        """The contexts past T (the longest where none is): what tuning reads."""
        return [c for c in self.contexts if c > self.context] or [self.contexts[-1]]

    def nll_at(self, model: TransformerLensModel, chosen: Sequence[Tensor], length: int) -> Tensor:
        """[file] mean NLL of the scored tokens at ``length`` (NaN where a file is shorter)."""
        out = torch.full((len(chosen),), float("nan"), dtype=torch.float64)
        keep = [i for i, f in enumerate(chosen) if len(f) >= length]
        if keep and (self.max_length is None or length <= self.max_length):
            files = [chosen[i] for i in keep]
            batch = self.settings.batch_size
            rows = scored_nll(
                model, files, length, self.scored, device=self.settings.device, batch_size=batch, bos=self.bos
            )
            out[keep] = rows.mean(1)
        return out

    def outcome(
        self,
        family: str,
        kind: str,
        intervention: Intervention,
        on: TransformerLensModelWithWeights,
        files: Sequence[Tensor],
        tuning: Tuned | None = None,
    ) -> Outcome:
        """``on`` under ``intervention``: each file's perplexity per context, the longest past T the headline."""
        with attached(on, intervention):
            per = torch.stack([self.nll_at(on, files, c) for c in self.contexts], 1)  # [file, context]
        buckets = []
        for index, c in enumerate(self.contexts):
            values = per[:, index]
            values = values[~values.isnan()].exp()  # each file's perplexity
            if values.numel():
                buckets.append({"at": round(c / self.context, 3), "context": c, **interval(values, self.settings.seed)})
        unseen = [b for b in buckets if b["at"] > 1]
        headline = unseen[-1] if unseen else buckets[-1]
        test = {k: headline[k] for k in ("mean", "low", "high", "n")}
        seen = [b["mean"] for b in buckets if b["at"] <= 1]  # within the context: the check that it is kept
        iid = seen[-1] if seen else None
        return Outcome(intervention, family, kind, iid, test, buckets, None if tuning is None else tuning.to_json())


class LanguageModelScorer:
    """How extrapolation scores a language model (a code run or an ``hf:`` model): the perplexity of the
    held-out files its reading gives, tuned on 20% of them by SHA-256 of their name (module docstring)."""

    def __init__(self, subject: Subject, loaded: Loaded, reading: Reading, settings: Settings):
        files, names, context = _heldout(subject, loaded, reading, settings)
        pairs = list(zip(names, files))
        valid, test = validation_split(pairs, lambda p: p[0], lambda p: 0, VALID_SHARE, settings.n_valid)
        self.bos = loaded.bos_id
        self.windows = _Windows.of(loaded, context, self.bos, settings)
        self.test, self.valid = [f for _, f in test], [f for _, f in valid]
        self.settings, self.model = settings, loaded.model
        self.trained, self.context, self.longest = int(loaded.context), context, self.windows.contexts[-1]
        self.validation = (
            f"{len(valid)} held-out files (the first {VALID_SHARE:.0%} by SHA-256 of their name), left out of the "
            f"test's {len(test)}"
        )

    @staticmethod
    def estimate(subjects: Sequence[Subject], settings: Settings, plans: Sequence[RunPlan]) -> None:
        """None: a language model's reads are not counted ahead."""
        return None

    def outcome(
        self,
        family: str,
        kind: str,
        intervention: Intervention,
        on: TransformerLensModelWithWeights,
        tuning: Tuned | None = None,
    ) -> Outcome:
        return self.windows.outcome(family, kind, intervention, on, self.test, tuning)

    def on_valid(self, intervention: Intervention) -> Score:
        windows = self.windows
        with attached(self.model, intervention):
            nll = torch.stack([windows.nll_at(self.model, self.valid, c) for c in windows.unseen])
        return Score(-float(nll.nanmean()))

    def losses(self, step: int) -> Iterator[Tensor]:
        longest, scored = self.windows.unseen[-1], self.windows.scored
        return _window_losses(self.model, self.valid, longest, scored, self.bos, self.settings.device, step)


def _heldout(subject: Subject, loaded: Loaded, reading: Reading, settings: Settings) -> tuple[list, list, int]:
    """(held-out files in the model's ids, their names, T the contexts are multiples of), at most ``max_files``
    files long enough for the smallest context."""
    every = reading.heldout(loaded)
    names = list(every.heldout_names)
    files = [every.heldout_file(i) for i in range(len(names))]
    context = reading.context(loaded)
    smallest = max(2, round(min(settings.multiples) * context))
    kept = [(n, f) for n, f in zip(names, files) if len(f) >= smallest]
    if not kept:
        raise ProbeError(f"{subject.info.label}: no held-out file has {smallest} tokens, the smallest context read")
    if settings.max_files is not None and len(kept) > settings.max_files:
        order = torch.randperm(len(kept), generator=torch.Generator().manual_seed(settings.seed))[: settings.max_files]
        kept = [kept[i] for i in sorted(order.tolist())]
    return [f for _, f in kept], [n for n, _ in kept], context


def _window_losses(
    model, files: Sequence[Tensor], context: int, scored: int, bos: int | None, device, step: int
) -> Iterator[Tensor]:
    """The mean NLL of the scored tokens of a few of ``files`` (drawn with the step as seed) read at ``context``,
    with gradients, in parts of one window each (one window's activations held at a time)."""
    long_enough = [f[-context:] for f in files if len(f) >= context]
    if not long_enough:
        raise ProbeError(f"no validation file has {context} tokens to fit temperatures on")
    index = torch.randperm(len(long_enough), generator=torch.Generator().manual_seed(step))[:LM_FIT_FILES]
    for i in index.tolist():
        window = long_enough[i][None].to(device)  # [1, context]
        if bos is not None:
            window[:, 0] = bos
        logits = logits_of(model, window, keep=scored + 1)[:, :-1].float()  # [1, scored, vocab]
        yield F.cross_entropy(logits.transpose(1, 2), window[:, -scored:]) / len(index)
