"""`probe extrapolate` on language models (code runs, imported runs, ``hf:`` models): the perplexity of
held-out files at multiples of the model's context, the paper's way (:mod:`probe.analysis.perplexity`: each
file's last ``c`` tokens, its last 200/1024 T scored); tuned interventions chosen on 20% of the files, by
SHA-256 of their name."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.analysis.budget import check_fits
from probe.analysis.extrapolation_plan import (
    VALID_SHARE,
    Settings,
    fixed_candidates,
    has_rope,
    interval,
    tuned_candidates,
)
from probe.analysis.extrapolation_report import Outcome, RunExtrapolation
from probe.analysis.perplexity import scored_nll
from probe.analysis.subjects import CodeRun, HfModel, Subject, TextReading
from probe.analysis.tuning import Score, Tuned, validation_split
from probe.errors import ProbeError
from probe.models.attach import attached
from probe.models.hf_attention import logits_of, runs_folded
from probe.models.interventions import Intervention

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

    def nll_at(self, model, chosen: Sequence[Tensor], length: int) -> Tensor:
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
        on,
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
        return Outcome(intervention, family, kind, None, test, buckets, None if tuning is None else tuning.to_json())


def language_model(subject: Subject, settings: Settings, step: Callable[[str], None]) -> RunExtrapolation:
    """One code run or ``hf:`` model untouched and under each candidate (module docstring)."""
    loaded = subject.load(settings.device)
    files, names, context, bos, trained = _lm_files(subject, loaded, settings)
    valid, test = validation_split(list(zip(names, files)), lambda p: p[0], lambda p: 0, VALID_SHARE, settings.n_valid)
    windows = _Windows.of(loaded, context, bos, settings)
    test_files, valid_files = [f for _, f in test], [f for _, f in valid]

    def on_valid(intervention: Intervention) -> Score:
        with attached(loaded.model, intervention):
            nll = torch.stack([windows.nll_at(loaded.model, valid_files, c) for c in windows.unseen])
        return Score(-float(nll.nanmean()))

    def losses(step: int) -> Iterator[Tensor]:
        model, longest = loaded.model, windows.unseen[-1]
        return _window_losses(model, valid_files, longest, windows.scored, bos, settings.device, step)

    step("untouched")
    outcomes = [windows.outcome("none", "none", Intervention(), loaded.model, test_files)]
    fixed, skipped = _fixed_outcomes(subject, loaded, trained, windows, test_files, step)
    outcomes += fixed
    for tuned in tuned_candidates(loaded.model, settings, trained, on_valid, losses, step):
        outcomes.append(windows.outcome(tuned.family, "tuned", tuned.intervention, loaded.model, test_files, tuned))
    validation = (
        f"{len(valid)} held-out files (the first {VALID_SHARE:.0%} by SHA-256 of their name), left out of the "
        f"test's {len(test)}"
    )
    where = "its n_ctx" if isinstance(subject, HfModel) else "its training context"
    info = loaded.info
    return RunExtrapolation(
        info.label, info.pe, info.path, info.seed, trained, validation, outcomes, skipped, f"{where}, in tokens",
        context=context,
    )  # fmt: skip


def _fixed_outcomes(
    subject: Subject, loaded, trained: int, windows: _Windows, files: Sequence[Tensor], step: Callable[[str], None]
) -> tuple[list[Outcome], dict[str, str]]:
    """The fixed rules that apply, each scored; one the model cannot take is said in ``skipped``, the others kept."""
    settings, longest = windows.settings, windows.contexts[-1]
    rotary = loaded.info.pe == "rotary" if isinstance(subject, HfModel) else has_rope(subject)
    pe_kind = None if isinstance(subject, HfModel) else subject.info.pe
    fixed, skipped = fixed_candidates(pe_kind, rotary, trained, longest, settings)
    outcomes = []
    for family, intervention in fixed:
        step(intervention.name)
        on = _with_rope(subject, loaded, intervention, settings.device) if intervention.rope else loaded.model
        try:
            if isinstance(subject, HfModel) and intervention.cap is not None:
                with attached(on, intervention):
                    if not runs_folded(on):  # ReRoPE on the bridge's own [head, query, key] scores
                        check_fits(on.cfg.n_heads, longest, loaded.info.label)
            outcomes.append(windows.outcome(family, "fixed", intervention, on, files))
        except ProbeError as error:
            skipped[intervention.name if family == "given" else family] = str(error)
    return outcomes, skipped


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


def _with_rope(subject: Subject, loaded, intervention: Intervention, device) -> Any:
    if isinstance(subject, HfModel):
        from probe.models.hf import load_external

        return load_external(subject.name, device, rope=dict(intervention.rope)).bridge
    return subject.load(device, pe_options=dict(intervention.rope)).model
