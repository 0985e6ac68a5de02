"""probe's code analyses on models TransformerLens loads from Hugging Face files (``hf:ID``,
``hf:FOLDER``: :mod:`probe.models.hf`), alone or beside probe's code runs: held-out perplexity
against context size, D^(l)(A, B) and attended distances on windows of held-out code.

- **Files.** Every model reads the same held-out files, each with its own tokenizer: those of the
  code runs' prepared corpus when a ``probe pretrain`` run is among the models (decoded: the BPE
  round-trips byte for byte), else those of the corpus the options name (``corpus``, ``heldout``:
  the split by file name ``probe pretrain`` makes, read from the source).
- **Tokens.** Models compared, or scored in one perplexity table, must share a tokenizer (equal
  vocabularies), so they read the same tokens; a window has the first model's beginning-of-sequence
  token in front where its tokenizer adds one (:func:`probe.analysis.windows.choose_windows`).
- **Context.** T, of which the context sizes are multiples (0.5x ... 2.5x for perplexity, 1x and 2x
  for attention), is the ``context`` option, else the code runs' training context, else the context
  the first model declares (n_ctx; for `probe distances`, each model's own). A model with a learned
  table of positions reads at most its n_ctx: longer context sizes are left out for it. Rotary and
  ALiBi models read any length.
- **Depth.** D^(l)(A, B) of models of different depth compares each layer of A with the layer of B
  at the same relative depth (:func:`probe.analysis.run_info.paired_layers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.analysis.perplexity import PerplexityReport, Protocol, RunPerplexity, pick_files, read_contexts
from probe.analysis.results import AttendedReport, AttendedResult, CompareReport
from probe.analysis.run_info import (
    Lengths,
    Progress,
    RunInfo,
    check_same_corpus,
    is_code_run,
    load_run_model,
    run_info,
    training_context,
)
from probe.analysis.windows import (
    ContextWindows,
    attended_on_windows,
    choose_windows,
    compare_on_windows,
    fitting_windows,
)
from probe.corpus import CODE_TASK, CorpusSpec, SourceFile, find_sources, split_files
from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import run_corpus, run_tokenizer_json
from probe.errors import ProbeError
from probe.metrics.jsd import check_metric
from probe.models.checkpoint import read_checkpoint_config
from probe.models.hf import file_name, is_external, load_external, model_folder
from probe.runs.folders import Run, beside, resolve_run, task_folder_name

# TransformerLens' positional_embedding_type -> the probe PE whose colour an hf: model gets in figures
POSITIONS_PE = {"standard": "learned", "shortformer": "learned", "rotary": "rotary", "alibi": "alibi"}


@dataclass(eq=False)
class Subject:
    """A model that reads held-out code with its own tokenizer: an ``hf:`` model or a probe code run."""

    model: Any  # TransformerLens-hooked: [batch, pos] ids -> logits; blocks.{l}.attn.hook_pattern
    info: RunInfo
    encode: Callable[[Sequence[str]], list[list[int]]]  # texts -> ids, no special tokens
    vocabulary: dict[str, int]
    bos_id: int | None  # in front of every window
    context: int  # the context it was trained at
    max_length: int | None  # the longest input it reads; None: any


@dataclass(frozen=True, eq=False)
class TokenizedFiles:
    """Held-out files in one tokenizer's ids (what :func:`choose_windows` reads, as a prepared corpus)."""

    folder: str  # where the files come from
    heldout_names: list[str]
    tokens: list[Tensor]  # [file]: its [tokens] long

    def heldout_file(self, index: int) -> Tensor:
        return self.tokens[index]

    def heldout_lengths(self) -> Tensor:
        return torch.tensor([len(t) for t in self.tokens], dtype=torch.long)  # [file]


@dataclass(frozen=True)
class HeldoutTexts:
    """The held-out files every model reads, where they come from, and the code runs' training context."""

    files: list[SourceFile]
    folder: str
    options: dict[str, Any]  # the corpus options naming them: a code run's task options, or corpus and heldout
    run_context: int | None  # the code runs' T; None when no code run is among the models


def load_subject(
    name: str | Path, device: str | torch.device = "cpu", pe_options: Mapping[str, Any] | None = None
) -> Subject:
    """``hf:ID`` / ``hf:FOLDER``, or a probe code run's folder (``pe_options`` apply to it at inference)."""
    if is_external(name):
        loaded = load_external(str(name), device)
        info = RunInfo(loaded.spelling, POSITIONS_PE.get(loaded.positions, loaded.positions), 0, loaded.spelling)
        return Subject(
            loaded.bridge, info, loaded.encode, loaded.vocabulary(), loaded.bos_id, loaded.n_ctx, loaded.max_length
        )
    config = _code_config(Path(name))
    model, info = load_run_model(Path(name), torch.device(device), pe_options=pe_options)
    tokenizer = CodeTokenizer.from_json(run_tokenizer_json(name))
    return Subject(
        model,
        info,
        tokenizer.encode_batch,
        tokenizer.tokenizer.get_vocab(),
        None,
        training_context(config),
        model.cfg.n_ctx,
    )


def _code_config(path: Path) -> dict[str, Any]:
    config = read_checkpoint_config(path)
    if not is_code_run(config):
        raise ProbeError(
            f"{path} is a run of task {config.get('task', {}).get('name', '?')}, not a code model: hf: "
            "models are read on held-out code, beside the runs of `probe pretrain`"
        )
    return config


def resolve_models(
    names: Sequence[str], *, root: str | Path | None = None, seed: int = 0, options: Mapping[str, Any] | None = None
) -> list[str]:
    """Every name checked before anything is read: ``hf:`` spellings found on this machine (kept as
    given); code runs given as folders or, with ``root``, as PE names (resolved for ``seed`` and the
    corpus ``options``)."""
    resolved = []
    for name in names:
        name = str(name)
        if is_external(name):
            model_folder(name)
        else:
            if root is not None:
                name = str(resolve_run(name, root, CODE_TASK, seed, dict(options or {})))
            _code_config(Path(name))
        resolved.append(name)
    return resolved


def heldout_texts(names: Sequence[str], options: Mapping[str, Any] | None = None) -> HeldoutTexts:
    """The held-out files the models ``names`` read (module docstring). Code runs among them must
    share their corpus and training context; a ``context`` option must then be theirs."""
    options = dict(options or {})
    runs = [Path(n) for n in names if not is_external(n)]
    if runs:
        configs = [_code_config(p) for p in runs]
        infos = [run_info(p, c) for p, c in zip(runs, configs)]
        for info, config in zip(infos[1:], configs[1:]):
            check_same_corpus(infos[0], configs[0], info, config)
        context = training_context(configs[0])
        if options.get("context") not in (None, context):
            raise ProbeError(
                f"{runs[0]} was trained at a context of {context} tokens, not {options['context']}: the "
                "models are read at multiples of the code runs' context"
            )
        corpus = run_corpus(runs[0], configs[0])
        decode = corpus.tokenizer.decode
        files = [
            SourceFile(name, decode(corpus.heldout_file(i).tolist())) for i, name in enumerate(corpus.heldout_names)
        ]
        return HeldoutTexts(files, str(corpus.folder), dict(configs[0]["task"]["options"]), context)
    spec = CorpusSpec.from_options(options)
    sources, _ = find_sources(spec.corpus)
    _, heldout = split_files(sources, spec.heldout)
    return HeldoutTexts(heldout, spec.corpus, {"corpus": spec.corpus, "heldout": spec.heldout}, None)


def reference_context(texts: HeldoutTexts, options: Mapping[str, Any] | None, subject: Subject) -> int:
    """T: the ``context`` option, else the code runs', else the context ``subject`` declares."""
    given = (options or {}).get("context")
    if given is not None:
        if not isinstance(given, int) or given < 2:
            raise ProbeError(f"context must be an integer of at least 2 tokens, got {given!r}")
        return given
    return texts.run_context or subject.context


def tokenized(subject: Subject, texts: HeldoutTexts) -> TokenizedFiles:
    """The held-out files in ``subject``'s token ids."""
    ids = subject.encode([f.text for f in texts.files])
    return TokenizedFiles(texts.folder, [f.name for f in texts.files], [torch.tensor(i, dtype=torch.long) for i in ids])


def subject_choice(subject: Subject, texts: HeldoutTexts, context: int, **choice: Any) -> list[ContextWindows]:
    """:func:`choose_windows` over the held-out files in ``subject``'s tokens, its BOS first."""
    return choose_windows(tokenized(subject, texts), context, bos=subject.bos_id, **choice)


def check_same_tokenizer(a: Subject, b: Subject) -> None:
    """Equal vocabularies (token -> id), so both read the same tokens; else one line saying so."""
    if a.vocabulary != b.vocabulary:
        shared = sum(b.vocabulary.get(token) == i for token, i in a.vocabulary.items())
        raise ProbeError(
            f"cannot read {a.info.label} and {b.info.label} on the same tokens: their tokenizers differ "
            f"(vocabularies of {len(a.vocabulary)} and {len(b.vocabulary)} tokens, {shared} the same); "
            "compare models that share a tokenizer"
        )


def readable_windows(windows: list[ContextWindows], subjects: Sequence[Subject]) -> tuple[list[ContextWindows], int]:
    """The windows every subject reads (a learned table of positions stops at n_ctx), and how many were left out."""
    limits = [s.max_length for s in subjects if s.max_length is not None]
    if not limits:
        return windows, 0
    return fitting_windows(windows, min(limits), " and ".join(s.info.label for s in subjects))


def _task_options(texts: HeldoutTexts, context: int) -> dict[str, Any]:
    return {**texts.options, "context": context}


@dataclass
class SubjectWindows:
    """One ``hf:`` model with the held-out windows it can read (at ``multiples`` of its context)."""

    subject: Subject | None  # None once the next model is asked for
    kept: list[ContextWindows]
    skipped: int
    task_options: dict[str, Any]


def subject_windows(
    names: Sequence[str],
    options: Mapping[str, Any],
    device: torch.device,
    *,
    multiples: Sequence[float] | None,
    n_per_bucket: int,
    seed: int,
    lengths: Lengths = "all",
    progress: Progress | None = None,
) -> Iterator[SubjectWindows]:
    """Each model of ``names`` in turn (one loaded at a time), with held-out windows of the same files
    read with its own tokenizer, its BOS first: what `probe distances` and `probe positions` read."""
    names = resolve_models(names)
    texts = heldout_texts(names, options)
    for done, name in enumerate(names):
        subject = load_subject(name, device)
        if progress:
            progress(subject.info.label, done, len(names))
        context = reference_context(texts, options, subject)
        windows = subject_choice(
            subject, texts, context, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
        )
        kept, skipped = readable_windows(windows, [subject])
        read = SubjectWindows(subject, kept, skipped, _task_options(texts, context))
        del subject
        yield read
        read.subject = None  # released before the next model loads (1B models: one at a time)


def external_compare_report(
    a_name: str,
    b_names: Sequence[str],
    *,
    root: str | Path = "checkpoints",
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    n_per_bucket: int = 10,
    metric: str = "jsd",
    device: str | torch.device = "cpu",
    batch_size: int = 16,
    lengths: Lengths = "all",
    multiples: Sequence[float] | None = None,
    pe_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> CompareReport:
    """``probe compare A B ...`` where a model is ``hf:``: D^(l)(A, B) on windows of held-out code at
    1x and 2x T (module docstring), one "bucket" per context size; no seed baseline."""
    check_metric(metric)
    if not b_names:
        raise ProbeError(f"name the models to compare {a_name} with (probe compare {a_name} hf:OTHER)")
    options = dict(options or {})
    device = torch.device(device)
    names = resolve_models([a_name, *b_names], root=root, seed=seed, options=options)
    texts = heldout_texts(names, options)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    a = load_subject(names[0], device, pe_options)
    timings["load"] = time.perf_counter() - start
    context = reference_context(texts, options, a)
    windows = subject_choice(
        a, texts, context, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
    )
    comparisons = []
    for done, name in enumerate(names[1:]):
        start = time.perf_counter()
        b = load_subject(name, device, pe_options)
        timings["load"] += time.perf_counter() - start
        check_same_tokenizer(a, b)
        if progress:
            progress(f"{a.info.label} vs {b.info.label}", done, len(names) - 1)
        kept, skipped = readable_windows(windows, [a, b])
        comparisons.append(
            compare_on_windows(
                a.model,
                a.info,
                b.model,
                b.info,
                kept,
                skipped=skipped,
                task_options=_task_options(texts, context),
                n_per_bucket=n_per_bucket,
                metric=metric,
                seed=seed,
                device=device,
                batch_size=batch_size,
                timings=timings,
            )
        )
        del b
    folder = models_home(names, root, options)
    return CompareReport(a.info, comparisons, None, folder.name, folder, timings)


def external_attended_report(
    names: Sequence[str],
    *,
    options: Mapping[str, Any] | None = None,
    n_per_bucket: int = 10,
    weightings: Sequence[str] = ("argmax", "attention"),
    normalization: str = "text",
    lengths: Lengths | None = None,
    bins: int = 20,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 16,
    multiples: Sequence[float] | None = None,
    progress: Progress | None = None,
) -> AttendedReport:
    """``probe distances`` where a model is ``hf:``: per model, the attended-distance distributions
    of every query of held-out windows at 1x and 2x its T, read with its own tokenizer."""
    results: list[AttendedResult] = []
    for read in subject_windows(
        names,
        dict(options or {}),
        torch.device(device),
        multiples=multiples,
        n_per_bucket=n_per_bucket,
        seed=seed,
        lengths=lengths or "all",
        progress=progress,
    ):
        results += attended_on_windows(
            read.subject.model,
            read.subject.info,
            read.kept,
            skipped=read.skipped,
            task_options=read.task_options,
            weightings=weightings,
            normalization=normalization,
            bins=bins,
            device=torch.device(device),
            batch_size=batch_size,
        )
    return AttendedReport(results, normalization, lengths or "all", n_per_bucket, seed, bins)


def external_perplexity_report(
    names: Sequence[str],
    *,
    options: Mapping[str, Any] | None = None,
    max_files: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 16,
    progress: Progress | None = None,
) -> PerplexityReport:
    """``probe perplexity`` where a model is ``hf:``: the paper's protocol (:mod:`probe.analysis.perplexity`)
    at T (module docstring), every model reading the same tokens, so all must share the first
    one's tokenizer. A context size a model cannot read (learned positions) is left out for it."""
    if not names:
        raise ProbeError("no models to read")
    options = dict(options or {})
    device = torch.device(device)
    names = resolve_models(names)
    texts = heldout_texts(names, options)
    subject = load_subject(names[0], device)
    first = subject
    protocol = Protocol.scaled(reference_context(texts, options, subject))
    every = tokenized(subject, texts)
    lengths = every.heldout_lengths()
    order = pick_files(lengths, protocol, max_files, seed)
    files = [every.heldout_file(int(i)) for i in order]
    steps = len(names) * len(protocol.contexts)
    results = []
    for done, name in enumerate(names):
        if done:
            subject = load_subject(name, device)
            check_same_tokenizer(first, subject)
        nll = read_contexts(
            subject.model,
            files,
            protocol,
            device=device,
            batch_size=batch_size,
            bos=first.bos_id,
            max_length=subject.max_length,
            progress=progress,
            label=subject.info.label,
            step=done * len(protocol.contexts),
            steps=steps,
        )
        results.append(RunPerplexity(subject.info.label, subject.info.pe, subject.info.path, nll))
    return PerplexityReport(protocol, [every.heldout_names[int(i)] for i in order], lengths[order], results, seed)


def models_home(names: Sequence[str], root: str | Path, options: Mapping[str, Any] | None = None) -> Path:
    """Where outputs about these models go: beside the code runs among them, else the code folder
    of the corpus options under ``root`` (``checkpoints/code``), beside the runs of that corpus."""
    runs = [Run(Path(n), read_checkpoint_config(n)) for n in names if not is_external(n)]
    if runs:
        return beside(runs)
    return Path(root) / task_folder_name(CODE_TASK, dict(options or {}))


def models_stem(names: Sequence[str]) -> str:
    """``hf-gpt2+hf-EleutherAI--pythia-70m``: the ``hf:`` models among ``names``, for output names."""
    return "+".join(file_name(n) for n in names if is_external(n))
