"""The paper's attention analyses on pretrained code models: D(NoPE, ·) per layer (Section 4.2, Eq.
similarity) and the attended-distance histograms (Section 5.1), on windows of held-out code.

A code run has no length buckets: its inputs are windows of the held-out files of the corpus it
was trained on (prepared beside its runs), at multiples of its training context ``T`` (1x: seen,
2x: unseen). A file contributes its *last* ``c`` tokens as one window of ``c`` tokens, as the
paper reads its files for perplexity, so a window at 2x holds the 1x window as its second half.
Windows have no padding and no token prepended (training windows are cut from a stream). The
results reuse :mod:`probe.analysis.results`' types, so tables, JSON, CSV and figures are the same:
a context size is a "length bucket" there.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from probe.analysis.layerwise import MapPair, timed_layer_distances
from probe.analysis.patterns import run_patterns
from probe.analysis.results import AttendedResult, CompareResult, attended_stats, distance_stats, query_key_weights
from probe.analysis.run_info import Lengths, RunInfo, check_comparable, paired_layers, training_context
from probe.corpus import CODE_TASK
from probe.corpus.prepared import PreparedCorpus, run_corpus
from probe.errors import ProbeError
from probe.models.checkpoint import window_bos

MULTIPLES = (1.0, 2.0)  # of the training context: seen, then twice as long
SPLIT = "heldout"  # where the windows come from (a bucket's ``split``)
MAX_BATCH_BYTES = 2**30  # attention maps of one batch of windows, as probe.analysis.patterns.collect_patterns


class HeldoutFiles(Protocol):
    """Held-out files in one tokenizer's ids: a prepared corpus, or files read with a model's own tokenizer."""

    folder: Any  # where they come from, for messages

    @property
    def heldout_names(self) -> list[str]: ...

    def heldout_file(self, index: int) -> Tensor: ...  # [tokens] long

    def heldout_lengths(self) -> Tensor: ...  # [file] tokens


@dataclass(frozen=True, eq=False)
class ContextWindows:
    """The windows read at one context size: one per held-out file, its last ``context`` tokens."""

    context: int  # c: tokens per window
    multiple: float  # c / T
    seen: bool  # c <= T
    files: tuple[str, ...]  # [window]: the held-out file it is cut from
    tokens: Tensor  # [window, context] long

    @property
    def label(self) -> str:
        return f"{self.multiple:g}x"


def context_sizes(
    train_context: int, multiples: Sequence[float] | None = MULTIPLES, lengths: Lengths = "all"
) -> list[tuple[float, int]]:
    """(multiple, tokens) of each context size, shortest first; ``lengths``: all, seen (c <= T) or
    unseen; ``multiples`` None: :data:`MULTIPLES`."""
    multiples = MULTIPLES if multiples is None else multiples
    if lengths not in ("all", "seen", "unseen"):
        raise ProbeError(f"unknown lengths {lengths!r}; accepted: all, seen, unseen")
    sizes = {}
    for multiple in multiples:
        if not isinstance(multiple, (int, float)) or multiple <= 0:
            raise ProbeError(f"context multiples must be positive numbers, got {multiple!r}")
        tokens = round(multiple * train_context)
        if tokens < 2:
            raise ProbeError(
                f"{multiple:g}x a training context of {train_context} is {tokens} token(s); at least 2 are needed"
            )
        sizes.setdefault(tokens, float(multiple))
    chosen = [
        (m, c) for c, m in sorted(sizes.items()) if lengths == "all" or (lengths == "seen") == (c <= train_context)
    ]
    if not chosen:
        raise ProbeError(
            f"no {lengths} context among {', '.join(f'{m:g}x' for m in multiples)} of the training "
            f"context {train_context} (seen: at most 1x; unseen: longer)"
        )
    return chosen


def choose_windows(
    corpus: HeldoutFiles | PreparedCorpus,
    train_context: int,
    *,
    multiples: Sequence[float] | None = MULTIPLES,
    n_per_bucket: int = 10,
    seed: int = 0,
    lengths: Lengths = "all",
    bos: int | None = None,
) -> list[ContextWindows]:
    """Per context size ``c``: up to ``n_per_bucket`` held-out files with at least ``c`` tokens, each
    read as its last ``c`` tokens; with ``bos`` (a model trained with a beginning-of-sequence token
    in front), as that token and the file's last ``c - 1``.

    The files are the first long enough in one order of all held-out files drawn from ``seed``, so
    the longer contexts read (mostly) the same files as the shorter ones. A context that no
    held-out file is long enough for raises ProbeError.
    """
    if n_per_bucket < 1:
        raise ProbeError(f"--n-per-bucket must be at least 1, got {n_per_bucket}")
    sizes = context_sizes(train_context, multiples, lengths)
    names = corpus.heldout_names
    file_lengths = corpus.heldout_lengths().tolist()
    order = list(range(len(names)))
    random.Random(f"code-windows/{seed}").shuffle(order)
    chosen = []
    for multiple, context in sizes:
        picked = [i for i in order if file_lengths[i] >= context][:n_per_bucket]
        if not picked:
            raise ProbeError(
                f"no held-out file of the corpus in {corpus.folder} has {context} tokens ({multiple:g}x "
                "the "
                f"training context; the longest has {max(file_lengths, default=0)}): use a larger corpus "
                "or smaller multiples"
            )
        tokens = torch.stack([corpus.heldout_file(i)[-context:] for i in picked])  # [window, context]
        if bos is not None:
            tokens[:, 0] = bos
        chosen.append(
            ContextWindows(context, multiple, context <= train_context, tuple(names[i] for i in picked), tokens)
        )
    return chosen


def run_windows(
    path: str | Path,
    config: Mapping[str, Any],
    *,
    multiples: Sequence[float] | None = MULTIPLES,
    n_per_bucket: int = 10,
    seed: int = 0,
    lengths: Lengths = "all",
) -> list[ContextWindows]:
    """:func:`choose_windows` from the corpus a code run was trained on, at its training context, each
    window starting with the run's beginning-of-sequence token where it was trained with one."""
    return choose_windows(
        run_corpus(path, config),
        training_context(config),
        multiples=multiples,
        n_per_bucket=n_per_bucket,
        seed=seed,
        lengths=lengths,
        bos=window_bos(config),
    )


def fitting_windows(windows: list[ContextWindows], n_ctx: int, who: str) -> tuple[list[ContextWindows], int]:
    """The context sizes a model accepts (``n_ctx``), and how many windows the others held."""
    kept = [w for w in windows if w.context <= n_ctx]
    if not kept:
        raise ProbeError(f"no context size fits {who} (n_ctx={n_ctx}; the shortest asked for is {windows[0].context})")
    return kept, sum(len(w.files) for w in windows if w.context > n_ctx)


def _batches(tokens: Tensor, model, batch_size: int) -> list[Tensor]:
    """[window, context] in batches whose float32 maps ([batch, layer, head, c, c]) stay under MAX_BATCH_BYTES."""
    if batch_size < 1:
        raise ProbeError(f"batch size must be positive, got {batch_size}")
    context = tokens.shape[1]
    per_window = model.cfg.n_layers * model.cfg.n_heads * context * context * 4
    return list(tokens.split(max(1, min(batch_size, MAX_BATCH_BYTES // per_window))))


def _window_pairs(model_a, model_b, tokens: Tensor, device: torch.device, batch_size: int) -> Iterator[MapPair]:
    """Both models' attention maps on the same batches of windows (no padding: no lengths)."""
    for batch in _batches(tokens, model_a, batch_size):
        batch = batch.to(device)
        yield run_patterns(model_a, batch), run_patterns(model_b, batch), None  # [batch, layer, head, c, c]


def compare_windows(
    model_a,
    a: RunInfo,
    model_b,
    b: RunInfo,
    *,
    n_per_bucket: int,
    metric: str,
    seed: int,
    device: torch.device,
    batch_size: int,
    lengths: Lengths,
    timings: dict[str, float],
    multiples: Sequence[float] | None = MULTIPLES,
) -> CompareResult:
    """D^(l)(A, B) on the same held-out windows, one "bucket" per context size (its ``length``: c
    tokens; ``seen``: c <= T). Context sizes longer than either model's n_ctx are left out and
    their windows counted in ``skipped``."""
    check_comparable(a, model_a.metadata, b, model_b.metadata)
    windows = run_windows(
        a.path, model_a.metadata, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
    )
    windows, skipped = fitting_windows(
        windows, min(model_a.cfg.n_ctx, model_b.cfg.n_ctx), f"both {a.label} and {b.label}"
    )
    return compare_on_windows(
        model_a,
        a,
        model_b,
        b,
        windows,
        skipped=skipped,
        task_options=dict(model_a.metadata["task"]["options"]),
        n_per_bucket=n_per_bucket,
        metric=metric,
        seed=seed,
        device=device,
        batch_size=batch_size,
        timings=timings,
    )


def compare_on_windows(
    model_a,
    a: RunInfo,
    model_b,
    b: RunInfo,
    windows: list[ContextWindows],
    *,
    skipped: int,
    task_options: dict[str, Any],
    n_per_bucket: int,
    metric: str,
    seed: int,
    device: torch.device,
    batch_size: int,
    timings: dict[str, float],
) -> CompareResult:
    """D^(l)(A, B) on windows both models read, one "bucket" per context size; each layer of A
    against the layer of B at its relative depth (:func:`probe.analysis.run_info.paired_layers`)."""
    layers_b = paired_layers(model_a.cfg.n_layers, model_b.cfg.n_layers)
    parts = [
        timed_layer_distances(
            _window_pairs(model_a, model_b, w.tokens, device, batch_size),
            layers_b,
            metric,
            device,
            timings,
            one_layer_at_a_time=True,
        )
        for w in windows
    ]
    start = time.perf_counter()
    stats = [
        distance_stats(values, pairwise, metric, seed, w.context, w.seen, SPLIT)
        for w, (values, pairwise) in zip(windows, parts)
    ]
    values, pairwise = torch.cat([v for v, _ in parts]), torch.cat([p for _, p in parts])
    overall = distance_stats(values, pairwise, metric, seed)
    timings["bootstrap"] = timings.get("bootstrap", 0.0) + time.perf_counter() - start
    return CompareResult(
        a,
        b,
        CODE_TASK,
        task_options,
        metric,
        seed,
        n_per_bucket,
        stats,
        overall,
        values,
        [w.context for w in windows for _ in w.files],
        skipped,
        timings=timings,
        layers_b=layers_b,
    )


def attended_windows(
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
    multiples: Sequence[float] | None = MULTIPLES,
) -> list[AttendedResult]:
    """One attended-distance result per context size, labelled ``<run> @1x``, ``<run> @2x``: every
    query of every window counts (a window is all "output"). Context sizes longer than the model's
    n_ctx are left out; their windows are counted in the first result's ``skipped``."""
    windows = run_windows(
        info.path, model.metadata, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
    )
    windows, skipped = fitting_windows(windows, model.cfg.n_ctx, info.label)
    return attended_on_windows(
        model,
        info,
        windows,
        skipped=skipped,
        task_options=dict(model.metadata["task"]["options"]),
        weightings=weightings,
        normalization=normalization,
        bins=bins,
        device=device,
        batch_size=batch_size,
    )


def attended_on_windows(
    model,
    info: RunInfo,
    windows: list[ContextWindows],
    *,
    skipped: int,
    task_options: dict[str, Any],
    weightings: Sequence[str],
    normalization: str,
    bins: int,
    device: torch.device,
    batch_size: int,
) -> list[AttendedResult]:
    """One attended-distance result per context size of ``windows`` (``skipped``: windows left out
    before, counted in the first result)."""
    results = []
    for w in windows:
        grids = {name: torch.zeros(w.context, w.context, dtype=torch.float64, device=device) for name in weightings}
        for batch in _batches(w.tokens, model, batch_size):
            maps = run_patterns(model, batch.to(device))  # [batch, layer, head, c, c]
            starts = torch.zeros(len(batch), dtype=torch.long, device=device)
            ends = torch.full((len(batch),), w.context, device=device)
            for name in weightings:
                for layer in range(maps.shape[1]):
                    grids[name] += query_key_weights(maps[:, layer : layer + 1], starts, ends, name)
        stats = {name: attended_stats(grid, name, normalization, bins) for name, grid in grids.items()}
        n_queries = len(w.files) * w.context * model.cfg.n_layers * model.cfg.n_heads
        results.append(
            AttendedResult(
                dataclasses.replace(info, label=f"{info.label} @{w.label}"),
                CODE_TASK,
                task_options,
                len(w.files),
                n_queries,
                skipped if not results else 0,
                [w.context],
                stats,
            )
        )
    return results
