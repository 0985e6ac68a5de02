"""Perplexity against context size on held-out code files (Appendix "Pretraining at 1.3B Scale",
its Figure pretraining:ppl and Tables pretraining:ppl, pretraining:ppl2).

How the paper scores, and how it is scaled to a training context ``T`` (the paper's is 1024):

- context sizes: the paper's 512, 640, 760, 878, 1024, 1200, 1400, 1600, 1800, 2048, 2304, 2560 as
  multiples of its 1024, times ``T`` (0.5x to 2.5x);
- each held-out file is read at each context size ``c`` as its *last* ``c`` tokens (one forward
  pass, no token prepended), and only its last ``S`` tokens are scored, the same tokens at every
  context size (the paper: "a maximum of last 200 tokens", ``S = 200/1024 T``): the scored token at
  window position ``p`` sees ``p`` tokens, so a larger ``c`` gives every scored token more context.
  With ``windows="own"``, each scored token is read from a window of its own, as the authors' released
  evaluation reads it (:func:`own_window_nll`): every one is predicted from ``c`` tokens, at ``S``
  times the forward passes;
- a file's perplexity is exp of its mean NLL over the scored tokens; a bucket's is the mean of its
  files' perplexities ("the average perplexity within each bucket"), with a percentile bootstrap
  interval over files;
- buckets are file lengths in tokens, ``[k w, (k + 1) w)`` with ``w = 250/1024 T`` (the paper's
  250); a bucket is read only at the context sizes every file in it has (``c <= k w``), which is
  why the paper's table has dashes; its buckets end at 4500 (``4.4 T``); the "all" row is every
  file at least ``2.5 T`` long, read at every context size.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from os.path import commonprefix
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from probe.errors import ProbeError
from probe.metrics import bootstrap_ci
from probe.models.hf_attention import logits_of
from probe.models.registry import pe_folder_name
from probe.presets import PERPLEXITY_WINDOWS
from probe.subjects.memory import keep_freed_memory, memory_budget, per_batch
from probe.subjects.readings import Reading
from probe.subjects.resolve import file_stem, home, reading_of, resolve_all
from probe.subjects.settings import ReadSettings
from probe.subjects.subject import Subject

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

PAPER_CONTEXT = 1024
PAPER_CONTEXTS = (512, 640, 760, 878, 1024, 1200, 1400, 1600, 1800, 2048, 2304, 2560)  # its table's columns
PAPER_SCORED = 200  # last tokens scored per file
PAPER_BUCKET = 250  # file-length bucket width
PAPER_LONGEST = 4500  # its table's last bucket ends here; longer files count in the "all" row only
LOGIT_BYTES = 8  # a window's float32 logits per (position, vocabulary entry), and what the softmax makes of them
LONGEST_MULTIPLE = PAPER_CONTEXTS[-1] / PAPER_CONTEXT  # 2.5: its figure reads up to 2.5x the training context
N_RESAMPLES = 1000
BATCH_SIZE = 16  # windows per batch unless the settings say
Progress = Callable[[str, int, int], None]


def check_windows(windows: str) -> None:
    """ProbeError where ``windows`` is not one of PERPLEXITY_WINDOWS."""
    if windows not in PERPLEXITY_WINDOWS:
        raise ProbeError(f"unknown scoring windows {windows!r}; choose from {', '.join(PERPLEXITY_WINDOWS)}")


def windows_read(windows: str) -> str:
    """How a scored token is read at context size c under ``windows`` (one of PERPLEXITY_WINDOWS), in words."""
    if windows == "own":
        return (
            "each read from a window of its own (the model's BOS and the c - 1 tokens before it; with no BOS, "
            "the c tokens before it)"
        )
    return "read with the file's last c tokens"


def context_room(context: int) -> int:
    """The ``n_ctx`` a code model needs to be read at 2.5x its training context (a multiple of 64)."""
    return 64 * math.ceil(LONGEST_MULTIPLE * context / 64)


@dataclass(frozen=True)
class ScoringPlan:
    """The paper's perplexity scoring, scaled to a training context: context sizes, scored tokens, bucket
    width (not the training protocol of :mod:`probe.training.train_config`)."""

    train_context: int
    contexts: tuple[int, ...]
    scored: int
    bucket_width: int
    longest: int  # the last bucket ends here
    windows: str = "shared"  # one of PERPLEXITY_WINDOWS

    @classmethod
    def scaled(cls, train_context: int, windows: str = "shared") -> ScoringPlan:
        check_windows(windows)
        scale = train_context / PAPER_CONTEXT
        contexts = tuple(dict.fromkeys(max(2, round(c * scale)) for c in PAPER_CONTEXTS))
        return cls(
            train_context,
            contexts,
            max(1, round(PAPER_SCORED * scale)),
            max(1, round(PAPER_BUCKET * scale)),
            round(PAPER_LONGEST * scale),
            windows,
        )

    @property
    def reading(self) -> str:
        """How a scored token is read at context size c, in words (a table's caption)."""
        return windows_read(self.windows)

    @property
    def multiples(self) -> list[float]:
        return [c / self.train_context for c in self.contexts]

    def to_json(self) -> dict[str, Any]:
        return {
            "train_context": self.train_context,
            "contexts": list(self.contexts),
            "multiples": self.multiples,
            "scored_tokens": self.scored,
            "bucket_width": self.bucket_width,
            "longest_bucket_end": self.longest,
            "windows": self.windows,
        }


@torch.inference_mode()
def scored_nll(
    model: TransformerLensModel,
    files: Sequence[Tensor],
    context: int,
    scored: int,
    *,
    device: torch.device,
    batch_size: int = 16,
    bos: int | None = None,
) -> Tensor:
    """[file, scored] float64 NLL of each file's last ``scored`` tokens, read as its last ``context``
    tokens (with ``bos``: that token and the last ``context - 1``). Every file must have at least
    ``context`` tokens, and the model must read ``context`` tokens (the caller checks its n_ctx). A batch's
    logits over the whole vocabulary stay within :func:`probe.subjects.memory.memory_budget`."""
    if scored >= context:
        raise ProbeError(f"scoring {scored} tokens needs a context of more than {scored}, got {context}")
    model.eval()
    rows = []
    batch_size = per_batch(context * model.cfg.d_vocab * LOGIT_BYTES, batch_size, memory_budget())
    for start in range(0, len(files), batch_size):
        windows = torch.stack([f[-context:] for f in files[start : start + batch_size]]).to(device)  # [batch, context]
        if bos is not None:
            windows[:, 0] = bos
        logits = logits_of(model, windows, keep=scored + 1)[:, :-1].double()  # [batch, scored, vocab]
        targets = windows[:, -scored:]  # [batch, scored]
        rows.append(F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").cpu())
    return torch.cat(rows) if rows else torch.empty(0, scored, dtype=torch.float64)


@torch.inference_mode()
def own_window_nll(
    model: TransformerLensModel,
    files: Sequence[Tensor],
    context: int,
    scored: int,
    *,
    device: torch.device,
    batch_size: int = 16,
    bos: int | None = None,
) -> Tensor:
    """[file, scored] float64 NLL of each file's last ``scored`` tokens, each read from a window of its own, as
    the authors' released evaluation reads them (``create_prediction_dataset`` in ``inference_llm.py`` of the
    first author's ``len_gen_lm`` repository): ``bos`` and the ``context - 1`` tokens before the scored one
    (without ``bos``: the ``context`` tokens before it), so every scored token is predicted at position
    ``context``. NaN where a token has fewer tokens before it (the authors skip it). ``scored`` forward passes of
    ``context`` tokens per file, where :func:`scored_nll` makes one; ``batch_size`` counts windows."""
    model.eval()
    nll = torch.full((len(files), scored), float("nan"), dtype=torch.float64)
    before = context - (bos is not None)  # the file's tokens in a window, before the scored one
    places = [  # (file, column, the scored token's index in its file)
        (row, column, len(f) - scored + column)
        for row, f in enumerate(files)
        for column in range(scored)
        if len(f) - scored + column >= before
    ]
    batch_size = per_batch(context * model.cfg.d_vocab * LOGIT_BYTES, batch_size, memory_budget())
    for start in range(0, len(places), batch_size):
        chunk = places[start : start + batch_size]
        windows = torch.stack([files[row][i - before : i + 1] for row, _, i in chunk]).to(device)  # [batch, before + 1]
        if bos is not None:
            windows = torch.cat([windows.new_full((len(chunk), 1), bos), windows], 1)  # [batch, context + 1]
        logits = logits_of(model, windows[:, :-1], keep=1)[:, 0].double()  # [batch, vocab]
        rows, columns, _ = zip(*chunk)
        nll[list(rows), list(columns)] = F.cross_entropy(logits, windows[:, -1], reduction="none").cpu()
    return nll


def read_contexts(
    model: TransformerLensModel,
    files: Sequence[Tensor],
    protocol: ScoringPlan,
    *,
    device: torch.device,
    batch_size: int = 16,
    bos: int | None = None,
    max_length: int | None = None,
    progress: Progress | None = None,
    label: str = "",
    step: int = 0,
    steps: int = 1,
) -> Tensor:
    """[file, context] float64 mean NLL of each file's scored tokens at every context size of
    ``protocol``, read from the windows it names; NaN where the file is shorter than the context (or, with its
    own windows, where no scored token has a whole window) or the context is longer than ``max_length`` (the
    longest input the model reads; None: any). ``progress`` hears one step per context size, counted from
    ``step`` of ``steps``."""
    score = own_window_nll if protocol.windows == "own" else scored_nll
    nll = torch.full((len(files), len(protocol.contexts)), float("nan"), dtype=torch.float64)
    for index, context in enumerate(protocol.contexts):
        if progress:
            progress(f"{label} at {context} tokens", step + index, steps)
        long_enough = [i for i, f in enumerate(files) if len(f) >= context]
        if long_enough and (max_length is None or context <= max_length):
            scores = score(
                model,
                [files[i] for i in long_enough],
                context,
                protocol.scored,
                device=device,
                batch_size=batch_size,
                bos=bos,
            )
            nll[long_enough, index] = scores.nanmean(1)
    return nll


def pick_files(lengths: Tensor, protocol: ScoringPlan, max_files: int | None, seed: int) -> Tensor:
    """[picked] indices of the held-out files read (``lengths``: [file] tokens): at most ``max_files``,
    drawn with ``seed``, each at least as long as the smallest context; ProbeError if none is."""
    order = torch.arange(len(lengths))
    if max_files is not None and max_files < len(order):
        order = (
            order[torch.randperm(len(order), generator=torch.Generator().manual_seed(seed))[:max_files]].sort().values
        )
    order = order[lengths[order] >= protocol.contexts[0]]
    if len(order) == 0:
        raise ProbeError(
            f"no held-out file has {protocol.contexts[0]} tokens, the smallest context; use a larger corpus"
        )
    return order


@dataclass
class RunPerplexity:
    """One model's NLL on every held-out file at every context size it was read at."""

    label: str
    pe: str
    path: str
    nll: Tensor  # [file, context] float64 mean NLL of the scored tokens; NaN where the file is shorter than the context
    pe_options: dict[str, Any] = field(default_factory=dict)  # options applied at inference (-p)


@dataclass
class PerplexityReport:
    """Perplexity per run, file-length bucket and context size, with bootstrap intervals over files."""

    protocol: ScoringPlan
    files: list[str]
    lengths: Tensor  # [file] tokens
    runs: list[RunPerplexity]
    seed: int = 0
    folder: Path | None = None  # beside the runs (probe.subjects.resolve.home)
    name: str = "perplexity"  # the outputs' folder: perplexity, perplexity+<options>, perplexity+<hf models>
    _rows: list[tuple[int, dict[str, Any]]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def context(self) -> int:
        """T, the training context the context sizes are multiples of."""
        return self.protocol.train_context

    def buckets(self) -> list[tuple[int, int]]:
        """(low, high) token bounds of every bucket holding a file, from the smallest context up."""
        width = self.protocol.bucket_width
        lows = sorted({int(n) // width * width for n in self.lengths.tolist()})
        return [
            (low, low + width)
            for low in lows
            if self.protocol.contexts[0] <= low and low + width <= self.protocol.longest
        ]

    def cell(self, run: RunPerplexity, files: Tensor, context_index: int) -> dict[str, float] | None:
        """Mean file perplexity over ``files`` (bool [file]) at one context size, and its interval."""
        values = run.nll[files, context_index]
        if values.numel() == 0 or torch.isnan(values).any():
            return None
        per_file = values.exp()  # [file] perplexity of each file
        ci = bootstrap_ci(per_file, N_RESAMPLES, 0.95, self.seed)
        pooled = math.exp(float(values.mean()))  # every file's scored tokens weigh the same
        return {
            "perplexity": float(ci.mean),
            "low": float(ci.low),
            "high": float(ci.high),
            "pooled_perplexity": pooled,
            "files": int(values.numel()),
        }

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per (run, bucket, context size) read; bucket "all" = files of at least 2.5 T tokens.
        Computed once (every cell is a bootstrap over files); JSON and Markdown read the same rows."""
        return [row for _, row in self._indexed_rows()]

    def cells(self, bucket: str) -> dict[tuple[int, int], dict[str, Any]]:
        """(index of the run in :attr:`runs`, context size) -> its row of ``bucket``: a table's cells, by run
        (two runs may share a label)."""
        return {(index, row["context"]): row for index, row in self._indexed_rows() if row["bucket"] == bucket}

    def _indexed_rows(self) -> list[tuple[int, dict[str, Any]]]:
        if self._rows is not None:
            return self._rows
        rows = []
        groups = [("all", self.lengths >= self.protocol.contexts[-1], self.protocol.contexts[-1])]
        groups += [
            (f"[{low}, {high})", (self.lengths >= low) & (self.lengths < high), low) for low, high in self.buckets()
        ]
        for run_index, run in enumerate(self.runs):
            for name, files, longest in groups:
                for index, context in enumerate(self.protocol.contexts):
                    if context > longest or not files.any():
                        continue
                    cell = self.cell(run, files, index)
                    if cell is not None:
                        rows.append(
                            (
                                run_index,
                                {
                                    "run": run.label,
                                    "pe": run.pe,
                                    "bucket": name,
                                    "context": context,
                                    "multiple": round(context / self.protocol.train_context, 3),
                                    **cell,
                                },
                            )
                        )
        self._rows = rows
        return rows

    def to_markdown(self) -> str:
        """The paper's Tables pretraining:ppl layout: a block per bucket, a row per run, a column per
        context size, "-" where the bucket is not read at that size."""
        rows = self.to_rows()
        contexts = self.protocol.contexts
        lines = [
            f"Perplexity of the last {self.protocol.scored} tokens of each held-out file, {self.protocol.reading} "
            f"(training context {self.protocol.train_context}); mean over the bucket's files.",
            "",
        ]
        for bucket in dict.fromkeys(row["bucket"] for row in rows):
            cells = self.cells(bucket)
            files = max(row["files"] for row in cells.values())
            title = "all files of at least 2.5x the context" if bucket == "all" else f"length bucket {bucket}"
            lines += [
                f"**{title}** ({files} files)",
                "",
                "| model | " + " | ".join(map(str, contexts)) + " |",
                "|---|" + "---|" * len(contexts),
            ]
            for index, run in enumerate(self.runs):
                values = [f"{cells[index, c]['perplexity']:.3f}" if (index, c) in cells else "-" for c in contexts]
                lines.append(f"| {run.label} | " + " | ".join(values) + " |")
            lines.append("")
        return "\n".join(lines)

    def write(self, out_dir: str | Path) -> list[str]:
        """JSON, CSV, the paper's table as Markdown and the figure under ``out_dir``, as `probe perplexity`
        writes them; returns the paths written."""
        from probe.analysis.report import write_tables
        from probe.figures import perplexity_figure, write_figure

        out_dir = Path(out_dir)
        rows = self.to_rows()
        written = write_tables(self, out_dir, "perplexity", self.to_markdown())
        context = self.protocol.train_context
        title = f"Held-out perplexity against context size (training context {context})"
        written += write_figure(perplexity_figure(rows, context, title), out_dir / "perplexity")
        return [str(p) for p in written]

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol.to_json(),
            "seed": self.seed,
            "n_files": len(self.files),
            "runs": [{"label": r.label, "pe": r.pe, "path": r.path, "pe_options": r.pe_options} for r in self.runs],
            "rows": self.to_rows(),
        }


def perplexity_report(
    names: Sequence[str | Path],
    settings: ReadSettings | None = None,
    *,
    max_files: int | None = None,
    windows: str = "shared",
    root: str | Path = "checkpoints",
) -> PerplexityReport:
    """Perplexity of held-out files per model, context size and file-length bucket, the paper's way (module docstring).
    Code runs read the corpus they were trained on, at multiples of their training context. Where an ``hf:`` model is
    among them (:mod:`probe.subjects.resolve`), every model reads the same held-out texts with its own tokenizer
    (``settings.options`` name the corpus and T), so all must share the first one's tokenizer, and a context size a
    model cannot read (learned positions) is left out for it. ``max_files``: at most this many held-out files, drawn
    with ``settings.seed``. ``windows``: ``"shared"`` reads a file's scored tokens from one window per context size,
    ``"own"`` each from a window of its own, as the authors' evaluation (:func:`own_window_nll`; outputs in
    ``perplexity+own-windows``). ``settings`` (:class:`~probe.subjects.settings.ReadSettings`; ``batch_size`` default
    16): ``pe_options`` (RoPE ``scaling``, ``factor``, ...) apply at inference to the runs whose PE has them, with
    ``original_length`` the training context unless given; ``dtype`` (``bfloat16``), the models' weights and forward
    passes in that precision (the loss is float64 whatever it is); ``intervention``, every model read under it. The
    paper's context sizes and every file are read: not ``n_per_bucket``, ``lengths`` or ``multiples``."""
    settings = ReadSettings() if settings is None else settings
    settings.refuse("probe perplexity", "n_per_bucket", "lengths", "multiples")
    check_windows(windows)  # before anything loads
    keep_freed_memory()
    if not names:
        raise ProbeError("no runs to read; train some with `probe pretrain`")
    subjects = resolve_all(list(names), intervention=settings.intervention)
    reading = reading_of(subjects, settings.options)
    reading.check_scored_together(subjects)
    report = _read(subjects, reading, settings, max_files, windows)
    if not report.to_rows():
        plan = report.protocol
        raise ProbeError(
            f"no held-out file fills a length bucket (from {plan.contexts[0]} tokens, {plan.bucket_width} wide) or "
            f"reaches 2.5x the context ({plan.contexts[-1]} tokens): nothing to score; use a larger corpus"
        )
    parts = [file_stem(subjects), pe_folder_name("", settings.pe_options).lstrip("+")]
    suffix = "+".join(filter(None, [*parts, "own-windows" if windows == "own" else ""]))
    report.folder = home(subjects, root, settings.options)
    report.name = "perplexity" + (f"+{suffix}" if suffix else "")
    return report


def _read(
    subjects: Sequence[Subject], reading: Reading, settings: ReadSettings, max_files: int | None, windows: str
) -> PerplexityReport:
    """Every model on the held-out files its reading gives, tokenized for the first (a code run's own corpus,
    or the same texts for all: :mod:`probe.subjects.resolve`), at multiples of the reading's T; one model
    held at a time."""
    device, dtype, seed = settings.device, settings.dtype, settings.seed
    applied = [reading.at_inference(s, settings.pe_options) for s in subjects]  # every model's options checked first
    loaded = subjects[0].load(device, pe_options=applied[0], dtype=dtype)
    first = replace(loaded, model=None)  # what the others are checked against, without its weights
    plan = ScoringPlan.scaled(reading.context(first), windows)
    limit = _longest_read(reading, loaded, plan)  # before anything is read
    every = reading.heldout(first)
    lengths = every.heldout_lengths()
    order = pick_files(lengths, plan, max_files, seed)
    files = [every.heldout_file(int(i)) for i in order]
    results = []
    for done, subject in enumerate(subjects):
        if done:
            loaded = subject.load(device, pe_options=applied[done], dtype=dtype)
            reading.check_pair(first, loaded)
            limit = _longest_read(reading, loaded, plan)
        label = reading.label(subject, loaded, applied[done])
        nll = read_contexts(
            loaded.model,
            files,
            plan,
            device=device,
            batch_size=settings.batch_size or BATCH_SIZE,
            bos=loaded.bos_id,
            max_length=limit,
            progress=settings.progress,
            label=label,
            step=done * len(plan.contexts),
            steps=len(subjects) * len(plan.contexts),
        )
        results.append(RunPerplexity(label, loaded.info.pe, loaded.info.path, nll, applied[done]))
        loaded = None
    for run, label in zip(results, distinct_labels([r.label for r in results], [r.path for r in results])):
        run.label = label
    return PerplexityReport(plan, [every.heldout_names[int(i)] for i in order], lengths[order], results, seed)


def _longest_read(reading: Reading, loaded: Any, plan: ScoringPlan) -> int | None:
    """The longest window ``loaded`` reads (None: any); one line where that is shorter than the smallest context
    size of ``plan``, so it would read nothing."""
    limit = reading.max_length(loaded, plan.contexts[-1])
    if limit is not None and limit < plan.contexts[0]:
        fits = next((t for t in range(plan.train_context, 1, -1) if ScoringPlan.scaled(t).contexts[0] <= limit), 2)
        raise ProbeError(
            f"{loaded.info.label} reads at most {limit} tokens (a learned table of positions), fewer than the "
            f"smallest context asked, {plan.contexts[0]} (0.5x the context T = {plan.train_context}); it reads a T "
            f"of at most {fits}"
        )
    return limit


def distinct_labels(labels: Sequence[str], paths: Sequence[str]) -> list[str]:
    """``labels``, one that several runs share followed by the part of each one's folder that tells them apart
    (``nope (ck2)`` beside ``nope (ck)``), else by its place among them (``nope #2``): a table row, a figure's
    legend, a row of the CSV is one run's."""
    out = list(labels)
    for label in [name for name, count in Counter(labels).items() if count > 1]:
        members = [i for i, name in enumerate(labels) if name == label]
        parts = [Path(paths[i]).parts for i in members]
        head = len(commonprefix(parts))
        tail = min(len(commonprefix([p[::-1] for p in parts])), min(map(len, parts)) - head)
        tells = ["/".join(p[head : len(p) - tail]) for p in parts]
        for place, (i, tell) in enumerate(zip(members, tells), 1):
            out[i] = f"{label} ({tell})" if tell and tells.count(tell) == 1 else f"{label} #{place}"
    return out
