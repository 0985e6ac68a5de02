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
NOT_TUNABLE = "not tunable: no validation file reaches a context past T"


@dataclass(frozen=True)
class _Windows:
    """How a language model is read here: each held-out file's last ``c`` tokens at every context ``c`` of
    the multiples it can read, its last ``scored`` tokens scored (the paper's 200 of 1024), ``bos`` in front."""

    contexts: list[int]  # ascending, in tokens; at least one past T
    context: int  # T, the multiples' unit
    scored: int
    bos: int | None
    settings: Settings

    @property
    def unseen(self) -> list[int]:
        """The contexts past T: what the headline and tuning read."""
        return [c for c in self.contexts if c > self.context]

    def nll_at(self, model: TransformerLensModel, chosen: Sequence[Tensor], length: int) -> Tensor:
        """[file] mean NLL of the scored tokens at ``length`` (NaN where a file is shorter)."""
        out = torch.full((len(chosen),), float("nan"), dtype=torch.float64)
        keep = [i for i, f in enumerate(chosen) if len(f) >= length]
        if keep:
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
        unseen = [b for b in buckets if b["context"] > self.context]
        if not unseen:  # every file's NLL past T is NaN: the headline is never a context within T
            raise ProbeError(f"{intervention.name}: no perplexity past T (every file's is NaN)")
        test = {k: unseen[-1][k] for k in ("mean", "low", "high", "n")}
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
        self.test, self.valid = [f for _, f in test], [f for _, f in valid]
        scored = max(1, round(context * 200 / 1024))
        contexts, self.skipped = _readable(subject.info.label, settings, context, scored, loaded.max_length, self.test)
        self.windows = _Windows(contexts, context, scored, self.bos, settings)
        self.tuned_at = [c for c in self.windows.unseen if any(len(f) >= c for f in self.valid)]
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
        """Minus the mean NLL of the validation files at the contexts past T they reach; ProbeError where they
        reach none (:data:`NOT_TUNABLE`): a mean of nothing is no score."""
        if not self.tuned_at:
            raise ProbeError(NOT_TUNABLE)
        with attached(self.model, intervention):
            nll = torch.stack([self.windows.nll_at(self.model, self.valid, c) for c in self.tuned_at])
        return Score(-float(nll.nanmean()))

    def losses(self, step: int) -> Iterator[Tensor]:
        """The per-head fit's loss: the validation files at the longest context past T they reach."""
        if not self.tuned_at:
            raise ProbeError(NOT_TUNABLE)
        longest, scored = self.tuned_at[-1], self.windows.scored
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


def _readable(
    label: str, settings: Settings, context: int, scored: int, max_length: int | None, files: Sequence[Tensor]
) -> tuple[list[int], dict[str, str]]:
    """(the contexts of ``settings.multiples`` that can be read, ascending; each one left out, as ``2.5 x T``,
    with why): a context the model reads (at most ``max_length`` tokens), longer than the ``scored`` tokens, and
    that some test file of ``files`` reaches. ProbeError where none past T = ``context`` is left: the perplexity
    past T would otherwise be read within T."""
    kept, left_out = [], {}
    for c in sorted({max(2, round(m * context)) for m in settings.multiples}):
        if max_length is not None and c > max_length:
            left_out[c] = f"{c} tokens, past the {max_length} it reads"
        elif c <= scored:
            left_out[c] = f"{c} tokens, too few to score the last {scored}"
        elif not any(len(f) >= c for f in files):
            left_out[c] = f"no held-out test file has {c} tokens"
        else:
            kept.append(c)
    named = {c: f"{round(c / context, 3):g} x T" for c in left_out}
    if not any(c > context for c in kept):
        past = "; ".join(f"{named[c]}: {why}" for c, why in left_out.items() if c > context) or "none is above 1"
        within = f"; it reads up to {max_length / context:.3g} x T" if max_length is not None else ""
        given = " ".join(f"{m:g}" for m in settings.multiples)
        raise ProbeError(
            f"{label}: no context past T = {context} tokens can be read at --multiples {given} ({past}{within})"
        )
    return kept, {named[c]: f"left out: {why}" for c, why in left_out.items()}


def _window_losses(
    model, files: Sequence[Tensor], context: int, scored: int, bos: int | None, device, step: int
) -> Iterator[Tensor]:
    """The mean NLL of the scored tokens of a few of ``files`` (drawn with the step as seed) read at ``context``,
    with gradients, in parts of one window each (one window's activations held at a time)."""
    long_enough = [f[-context:] for f in files if len(f) >= context]  # one at least: the caller's context
    index = torch.randperm(len(long_enough), generator=torch.Generator().manual_seed(step))[:LM_FIT_FILES]
    for i in index.tolist():
        window = long_enough[i][None].to(device, copy=True)  # [1, context]: BOS goes in the copy, not the file
        if bos is not None:
            window[:, 0] = bos
        logits = logits_of(model, window, keep=scored + 1)[:, :-1].float()  # [1, scored, vocab]
        yield F.cross_entropy(logits.transpose(1, 2), window[:, -scored:]) / len(index)
