"""What a code model reads in the paper's attention analyses (Sections 5.2 and 6.1): windows of held-out code.

A code run has no length buckets: its inputs are windows of the held-out files of the corpus it
was trained on (prepared beside its runs), at multiples of its training context ``T`` (1x: seen,
2x: unseen). A file contributes its *last* ``c`` tokens as one window of ``c`` tokens, as the
paper reads its files for perplexity, so a window at 2x holds the 1x window as its second half.
Windows have no padding and no token prepended (training windows are cut from a stream). The
analyses read them as groups of inputs (:class:`probe.subjects.inputs.WindowGroup`), a context size standing
for a length bucket.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from probe.corpus.prepared import PreparedCorpus, run_corpus
from probe.errors import ProbeError
from probe.models.checkpoint import window_bos
from probe.subjects.run_info import Lengths, training_context

MULTIPLES = (1.0, 2.0)  # of the training context: seen, then twice as long
SPLIT = "heldout"  # where the windows come from (a bucket's ``split``)


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
