"""What a set of subjects reads: a :class:`Reading` gives each analysis its
:class:`~probe.subjects.inputs.Inputs` (:func:`probe.subjects.resolve.reading_of` says which one a set has).

- **A task run** reads up to ``n_per_bucket`` gold examples of every length bucket of its task.
- **Code runs** read windows of the held-out files of the corpus they were trained on, at multiples of their
  training context T (1x seen, 2x unseen), a beginning-of-sequence token first where they were trained with one.
- **Where an hf: model is among them**, every model reads the same held-out files, each with its own tokenizer
  and its own BOS (the one its tokenizer adds, or a code run's): the code runs' corpus (decoded: the BPE
  round-trips byte for byte) when a code run is among them, else the corpus the options name (``corpus``,
  ``heldout``). Models compared, or scored in one perplexity table, must share a tokenizer; models compared
  read the same windows, so must also put the same BOS first (or none). T is the ``context`` option, else the
  code runs', else the smaller of the context the first model declares and :data:`~probe.presets.HF_CONTEXT`. A
  model with a learned table of positions reads at most its n_ctx; Rotary and ALiBi read any length.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.corpus import CODE_TASK, CorpusSpec, SourceFile, find_sources, split_files
from probe.corpus.prepared import PreparedCorpus, corpus_of_run, run_corpus, run_tokenizer_json
from probe.errors import ProbeError
from probe.presets import HF_CONTEXT
from probe.subjects.examples import fitting_examples, sample_buckets, task_of
from probe.subjects.inputs import ExampleGroup, Inputs, WindowGroup
from probe.subjects.memory import check_fits
from probe.subjects.run_info import Lengths, check_comparable, is_code_run, training_context
from probe.subjects.subject import Loaded, Subject
from probe.subjects.windows import ContextWindows, HeldoutFiles, choose_windows, fitting_windows, run_windows


class Reading:
    """Where a set of subjects' inputs come from; :meth:`inputs` cuts them for one model (or a pair)."""

    default_lengths: Lengths = "all"
    seed_baseline = True  # a run can be compared with another seed of itself (NoPE vs NoPE')

    def inputs(
        self,
        first: Loaded,
        fit: Sequence[Loaded],
        *,
        n_per_bucket: int,
        seed: int,
        lengths: Lengths,
        multiples: Sequence[float] | None = None,
    ) -> Inputs:
        """``first``'s inputs, kept to those every model of ``fit`` reads."""
        raise NotImplementedError

    def check_pair(self, a: Loaded, b: Loaded) -> None:
        """Whether ``a`` and ``b`` read the same tokens (checked before loading, unless tokenizers decide)."""

    # what held-out text reads (perplexity, extrapolation's language models); a task's examples have none
    def check_scored_together(self, subjects: Sequence[Subject]) -> None:
        """ProbeError unless ``subjects`` can be scored on held-out text in one table (before any is loaded)."""
        from probe.models.checkpoint import task_name

        s = subjects[0]
        raise ProbeError(
            f"{s.path} is not a pretrained code model (task {task_name(s.config)!r}); perplexity reads runs of "
            "`probe pretrain`"
        )

    def at_inference(self, subject: Subject, pe_options: Mapping[str, Any] | None) -> dict[str, Any]:
        """The PE options ``subject`` is read with (``-p``), checked."""
        raise NotImplementedError

    def context(self, first: Loaded) -> int:
        """T, the context the windows' sizes are multiples of."""
        raise NotImplementedError

    def heldout(self, first: Loaded) -> HeldoutFiles:
        """The held-out files in ``first``'s token ids."""
        raise NotImplementedError

    def max_length(self, loaded: Loaded, longest: int) -> int | None:
        """The longest window ``loaded`` is read at (None: any); ProbeError where it must read ``longest``."""
        raise NotImplementedError

    def label(self, subject: Subject, loaded: Loaded, applied: Mapping[str, Any]) -> str:
        """``loaded``'s name in a table of scores, with the PE options ``applied`` at inference."""
        return loaded.info.label


class TaskReading(Reading):
    default_lengths = "unseen"  # the released notebook's attended distances

    def __init__(self, subject: Subject):
        self.task, self.tokenizer = task_of(subject.config)

    def inputs(
        self,
        first: Loaded,
        fit: Sequence[Loaded],
        *,
        n_per_bucket: int,
        seed: int,
        lengths: Lengths,
        multiples: Sequence[float] | None = None,
    ) -> Inputs:
        n_ctx = min(m.max_length for m in fit)
        buckets, skipped = fitting_examples(
            sample_buckets(self.task, n_per_bucket, seed, lengths), self.tokenizer, n_ctx
        )
        return Inputs(
            [ExampleGroup(buckets, self.tokenizer, self.task)],
            skipped,
            self.task.name,
            dict(self.task.options),
            self.tokenizer.pad_id,
        )


class CorpusReading(Reading):
    """A code run's own prepared corpus (its token ids), at its training context."""

    def __init__(self, subject: Subject):
        self.subject = subject
        self._corpus: PreparedCorpus | None = None

    def check_scored_together(self, subjects: Sequence[Subject]) -> None:
        """Every run a code run of the first one's prepared corpus (the same task folder, or the same corpus
        options, source files and tokenizer: every run is read on the first one's token ids and held-out files)
        at one training context; else one line saying what differs."""
        for s in subjects:
            if not is_code_run(s.config):
                Reading.check_scored_together(self, [s])
        corpus = self.heldout(None)
        for s in subjects[1:]:
            differ = _corpus_differences(corpus, s)
            if differ:
                raise ProbeError(
                    f"{s.path} was trained on another prepared corpus than {self.subject.path} ({'; '.join(differ)}): "
                    "the runs of one table must read the same tokens and held-out files; score runs of one task "
                    "folder together"
                )
        contexts = {training_context(s.config) for s in subjects}
        if len(contexts) > 1:
            raise ProbeError(
                f"the runs were trained at different contexts ({sorted(contexts)}); compare runs of one context"
            )

    def at_inference(self, subject: Subject, pe_options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Those of ``pe_options`` its PE has, a RoPE scaling's ``original_length`` its training context unless
        given."""
        from probe.models.registry import options_for
        from probe.models.rotary import SCALINGS_WITH_LENGTH

        applied = options_for(subject.config["pe"], dict(pe_options or {}))
        if applied.get("scaling") in SCALINGS_WITH_LENGTH:
            applied.setdefault("original_length", self.context(None))  # what "the length trained on" is here
        return applied

    def context(self, first: Loaded | None) -> int:
        return training_context(self.subject.config)

    def heldout(self, first: Loaded | None) -> PreparedCorpus:
        if self._corpus is None:
            self._corpus = run_corpus(self.subject.path, self.subject.config)
        return self._corpus

    def max_length(self, loaded: Loaded, longest: int) -> int | None:
        """None: a code run must read every window; ProbeError where its n_ctx is short of ``longest``."""
        n_ctx = loaded.model.cfg.n_ctx
        if n_ctx < longest:
            raise ProbeError(
                f"{loaded.info.path} accepts {n_ctx} tokens; reading 2.5x its context needs {longest} "
                f"(train with -m n_ctx={longest})"
            )
        return None

    def label(self, subject: Subject, loaded: Loaded, applied: Mapping[str, Any]) -> str:
        """``rotary+factor=2+scaling=yarn seed1 under cap=255``: the folder name of its PE as read."""
        from probe.models.registry import pe_folder_name

        config = subject.config
        training = config.get("training", {}).get("pe_options", {})
        seed_of = config.get("training", {}).get("seed", 0)
        label = pe_folder_name(config["pe"], {**training, **applied}) + (f" seed{seed_of}" if seed_of else "")
        if loaded.info.intervention:
            label += f" under {loaded.info.intervention['name']}"
        return label

    def inputs(
        self,
        first: Loaded,
        fit: Sequence[Loaded],
        *,
        n_per_bucket: int,
        seed: int,
        lengths: Lengths,
        multiples: Sequence[float] | None = None,
    ) -> Inputs:
        config = self.subject.config
        _check_same_start(fit)
        windows = run_windows(
            self.subject.path, config, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
        )
        kept, skipped = fitting_windows(windows, min(m.max_length for m in fit), _who(fit))
        check_fits(sum(m.model.cfg.n_heads for m in fit), max(w.context for w in kept), _who(fit))
        return Inputs([WindowGroup(w) for w in kept], skipped, CODE_TASK, dict(config["task"]["options"]))


def _corpus_differences(corpus: PreparedCorpus, subject: Subject) -> list[str]:
    """What makes the corpus ``subject`` was trained on another than ``corpus`` (its corpus options but the
    context, its source files, its tokenizer); none where it sits in the same task folder."""
    if corpus_of_run(subject.path).resolve() == Path(corpus.folder).resolve():
        return []
    defaults = CorpusSpec().source()  # a corpus prepared before an option was: its default
    ours = {**defaults, **corpus.manifest.get("spec", {})}
    theirs = {**defaults, **subject.config.get("task", {}).get("options", {})}
    differ = [
        f"its {key} {theirs.get(key)}, not {ours.get(key)}"
        for key in dict.fromkeys([*ours, *theirs])
        if key != "context" and theirs.get(key) != ours.get(key)
    ]
    if subject.config.get("corpus", {}).get("fingerprint") != corpus.manifest.get("fingerprint"):
        differ.append("other source files (their fingerprints differ)")
    if not differ and run_tokenizer_json(subject.path) != corpus.tokenizer.to_json():
        differ.append("another tokenizer")
    return differ


@dataclass(frozen=True)
class HeldoutTexts:
    """The held-out files every model reads, where they come from, and the code runs' training context."""

    files: list[SourceFile]
    folder: str
    options: dict[str, Any]  # the corpus options naming them: a code run's task options, or corpus and heldout
    run_context: int | None  # the code runs' T; None when no code run is among the models


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


class TextReading(Reading):
    """The same held-out files for every model, each read with its own tokenizer."""

    seed_baseline = False

    def __init__(self, subjects: Sequence[Subject], options: Mapping[str, Any] | None):
        self.options = dict(options or {})
        self.texts = heldout_texts(subjects, self.options)
        self._last: tuple[weakref.ref, TokenizedFiles] | None = None  # a model's files: never keeps it alive

    def context(self, first: Loaded) -> int:
        """T: the ``context`` option, else the code runs', else the smaller of the context ``first`` declares
        and :data:`~probe.presets.HF_CONTEXT`."""
        given = self.options.get("context")
        if given is not None:
            if not isinstance(given, int) or given < 2:
                raise ProbeError(f"context must be an integer of at least 2 tokens, got {given!r}")
            return given
        return self.texts.run_context or min(first.context, HF_CONTEXT)

    def check_scored_together(self, subjects: Sequence[Subject]) -> None:
        """Nothing before loading: tokenizers are checked once loaded (:meth:`check_pair`)."""

    def at_inference(self, subject: Subject, pe_options: Mapping[str, Any] | None) -> dict[str, Any]:
        if pe_options:
            raise ProbeError(
                "-p applies probe's PE options at inference; hf: models are read as published: read them without -p"
            )
        return {}

    def heldout(self, first: Loaded) -> TokenizedFiles:
        return self.tokenized(first)

    def max_length(self, loaded: Loaded, longest: int) -> int | None:
        """Its own: a context it cannot read (learned positions) is left out for it."""
        return loaded.max_length

    def tokenized(self, loaded: Loaded) -> TokenizedFiles:
        """The held-out files in ``loaded``'s token ids (tokenized once per model: `probe compare A B C`
        cuts A's windows for each of B and C)."""
        if self._last is None or self._last[0]() is not loaded:
            ids = loaded.encode([f.text for f in self.texts.files])
            names = [f.name for f in self.texts.files]
            files = TokenizedFiles(self.texts.folder, names, [torch.tensor(i, dtype=torch.long) for i in ids])
            self._last = (weakref.ref(loaded), files)
        return self._last[1]

    def windows(self, first: Loaded, context: int, **choice: Any) -> list[ContextWindows]:
        return choose_windows(self.tokenized(first), context, bos=first.bos_id, **choice)

    def inputs(
        self,
        first: Loaded,
        fit: Sequence[Loaded],
        *,
        n_per_bucket: int,
        seed: int,
        lengths: Lengths,
        multiples: Sequence[float] | None = None,
    ) -> Inputs:
        _check_same_start(fit)
        context = self.context(first)
        windows = self.windows(
            first, context, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
        )
        limits = [m.max_length for m in fit if m.max_length is not None]
        kept, skipped = (windows, 0) if not limits else fitting_windows(windows, min(limits), _who(fit))
        check_fits(sum(m.model.cfg.n_heads for m in fit), max(w.context for w in kept), _who(fit))
        return Inputs([WindowGroup(w) for w in kept], skipped, CODE_TASK, {**self.texts.options, "context": context})

    def check_pair(self, a: Loaded, b: Loaded) -> None:
        """Equal vocabularies (token -> id), so both read the same tokens; else one line saying so."""
        vocabulary_a, vocabulary_b = a.vocabulary, b.vocabulary
        if vocabulary_a != vocabulary_b:
            shared = sum(vocabulary_b.get(token) == i for token, i in vocabulary_a.items())
            raise ProbeError(
                f"cannot read {a.info.label} and {b.info.label} on the same tokens: their tokenizers differ "
                f"(vocabularies of {len(vocabulary_a)} and {len(vocabulary_b)} tokens, {shared} the same); "
                "compare models that share a tokenizer"
            )


def _check_same_start(fit: Sequence[Loaded]) -> None:
    """Models read together read the same windows, and each puts its own BOS first: they must put the same
    token first (or none), else one line saying whose differ."""
    first, *others = fit
    for other in others:
        if other.bos_id != first.bos_id:
            raise ProbeError(
                f"cannot read {first.info.label} and {other.info.label} on the same windows: each puts its own BOS "
                f"first ({_first_token(first)}, {_first_token(other)}); compare models whose windows start alike"
            )


def _first_token(loaded: Loaded) -> str:
    return f"{loaded.info.label}: {'none' if loaded.bos_id is None else f'token {loaded.bos_id}'}"


def _who(fit: Sequence[Loaded]) -> str:
    labels = [m.info.label for m in fit]
    return labels[0] if len(labels) == 1 else "both " + " and ".join(labels)


def heldout_texts(subjects: Sequence[Subject], options: Mapping[str, Any] | None = None) -> HeldoutTexts:
    """The held-out files the ``subjects`` read (module docstring). Code runs among them must share their
    corpus and training context; a ``context`` option must then be theirs."""
    options = dict(options or {})
    runs = [s for s in subjects if s.path is not None]
    if runs:
        for other in runs[1:]:
            check_comparable(runs[0].info, runs[0].config, other.info, other.config)
        context = training_context(runs[0].config)
        if options.get("context") not in (None, context):
            raise ProbeError(
                f"{runs[0].path} was trained at a context of {context} tokens, not {options['context']}: the "
                "models are read at multiples of the code runs' context"
            )
        corpus = run_corpus(runs[0].path, runs[0].config)
        decode = corpus.tokenizer.decode
        files = [
            SourceFile(name, decode(corpus.heldout_file(i).tolist())) for i, name in enumerate(corpus.heldout_names)
        ]
        return HeldoutTexts(files, str(corpus.folder), dict(runs[0].config["task"]["options"]), context)
    spec = CorpusSpec.from_options(options)
    sources, _ = find_sources(spec.corpus)
    _, heldout = split_files(sources, spec.heldout)
    return HeldoutTexts(heldout, spec.corpus, {"corpus": spec.corpus, "heldout": spec.heldout}, None)
