"""`probe distances`: the normalized attended distance d̄ of output queries, pooled over layers,
heads and examples into one histogram per run (Section 5.1, Figure attended_distance).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from probe.analysis.examples import fitting_examples, sample_buckets, task_of
from probe.analysis.patterns import collect_patterns
from probe.analysis.results import AttendedReport, AttendedResult, attended_stats, query_key_weights
from probe.analysis.run_info import Lengths, Progress, RunInfo, is_code_run, load_run_model
from probe.analysis.subjects import external_attended_report
from probe.analysis.windows import attended_windows
from probe.errors import ProbeError
from probe.metrics.attended import Normalization, Weighting
from probe.models.hf import is_external
from probe.runs.folders import Run


def _attended_buckets(
    model,
    info: RunInfo,
    *,
    n_per_bucket: int,
    weightings: Sequence[str],
    normalization: str,
    lengths: Lengths,
    bins: int,
    seed: int,
    device: torch.device,
    batch_size: int,
) -> AttendedResult:
    """One task run's distribution over the output queries of its sampled length buckets."""
    task, tokenizer = task_of(model.metadata)
    buckets, skipped = fitting_examples(sample_buckets(task, n_per_bucket, seed, lengths), tokenizer, model.cfg.n_ctx)
    examples = [e for bucket in buckets for e in bucket.examples]
    size = max(len(tokenizer.encode_example(e)[0]) for e in examples)
    grids = {w: torch.zeros(size, size, dtype=torch.float64, device=device) for w in weightings}
    for batch in collect_patterns(
        model, tokenizer, examples, batch_size=batch_size, device=device, to_cpu=device.type == "cpu"
    ):
        starts, true_lengths = batch.output_start.to(device), batch.lengths.to(device)
        width = batch.patterns.shape[-1]
        for w in weightings:
            grids[w][:width, :width] += query_key_weights(batch.patterns, starts, true_lengths, w)
    stats = {w: attended_stats(grid, w, normalization, bins) for w, grid in grids.items()}
    n_queries = sum(len(tokenizer.encode_example(e)[0]) - tokenizer.encode_example(e)[1] for e in examples)
    n_queries *= model.cfg.n_layers * model.cfg.n_heads
    return AttendedResult(
        info, task.name, dict(task.options), len(examples), n_queries, skipped, [b.length for b in buckets], stats
    )


def attended_distance_report(
    runs: Sequence[str | Path | Run],
    *,
    n_per_bucket: int = 10,
    weighting: Weighting | Sequence[Weighting] = ("argmax", "attention"),
    normalization: Normalization = "text",
    lengths: Lengths | None = None,
    bins: int = 20,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 16,
    multiples: Sequence[float] | None = None,
    options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> AttendedReport:
    """Normalized attended distance d̄ of every output query over all layers and heads (Section 5.1).

    Per run: up to ``n_per_bucket`` examples per length bucket (``lengths`` default "unseen", as
    the released notebook; "all" or "seen" too), gold input + output; d̄ pooled into one
    distribution per weighting ("argmax": the attended key, as the paper; "attention": every
    key weighted by its probability), with its histogram and Sarle's bimodality coefficient.
    Examples longer than a model's context are left out and counted in ``skipped``.
    A code run gives one result per context size (``multiples`` of its training context, default
    1x and 2x; ``lengths`` default "all"; seen: 1x, unseen: 2x), every query of a window counted.
    Where a model is ``hf:ID`` or ``hf:FOLDER``, every model is read as a code model and ``options``
    name the corpus (:func:`probe.analysis.subjects.external_attended_report`).
    """
    weightings = [weighting] if isinstance(weighting, str) else list(weighting)
    for w in weightings:
        if w not in ("argmax", "attention"):
            raise ProbeError(f"unknown weighting {w!r}; accepted: argmax, attention")
    if normalization not in ("text", "reference-code"):
        raise ProbeError(f"unknown normalization {normalization!r}; accepted: text, reference-code")
    if bins < 1:
        raise ProbeError(f"--bins must be at least 1, got {bins}")
    device = torch.device(device)
    names = [str(run.path) if isinstance(run, Run) else str(run) for run in runs]
    if any(is_external(name) for name in names):
        return external_attended_report(
            names,
            options=options,
            n_per_bucket=n_per_bucket,
            weightings=weightings,
            normalization=normalization,
            lengths=lengths,
            bins=bins,
            seed=seed,
            device=device,
            batch_size=batch_size,
            multiples=multiples,
            progress=progress,
        )
    settings = dict(
        n_per_bucket=n_per_bucket,
        weightings=weightings,
        normalization=normalization,
        bins=bins,
        seed=seed,
        device=device,
        batch_size=batch_size,
    )
    results, chosen = [], []
    for done, run in enumerate(runs):
        model, info = load_run_model(run, device)
        if progress:
            progress(info.label, done, len(runs))
        if is_code_run(model.metadata):
            chosen.append(lengths or "all")
            results += attended_windows(model, info, lengths=chosen[-1], multiples=multiples, **settings)
        else:
            chosen.append(lengths or "unseen")
            results.append(_attended_buckets(model, info, lengths=chosen[-1], **settings))
        del model
    return AttendedReport(
        results, normalization, ", ".join(dict.fromkeys(chosen)) or lengths or "unseen", n_per_bucket, seed, bins
    )
