"""What is analysed: a name resolved once, here, into a subject, and what a set of subjects reads.

A name is a PE (a run of the given task and seed under the checkpoints folder), a run folder (``probe train``,
``probe pretrain`` or ``probe import``), or ``hf:ID`` / ``hf:FOLDER`` (any model TransformerLens loads from
Hugging Face files: :mod:`probe.models.hf`). :func:`resolve` is the one place that asks which; every analysis
(compare, distances, positions, perplexity) takes subjects, loads each when it needs it (:meth:`Subject.load`)
and reads the :class:`~probe.subjects.inputs.Inputs` its :class:`Reading` gives:

- **A task run** reads up to ``n_per_bucket`` gold examples of every length bucket of its task.
- **Code runs** read windows of the held-out files of the corpus they were trained on, at multiples of their
  training context T (1x seen, 2x unseen), a beginning-of-sequence token first where they were trained with one.
- **Where an hf: model is among them**, every model reads the same held-out files, each with its own tokenizer:
  the code runs' corpus (decoded: the BPE round-trips byte for byte) when a code run is among them, else the
  corpus the options name (``corpus``, ``heldout``). Models compared, or scored in one perplexity table, must
  share a tokenizer. T is the ``context`` option, else the code runs', else the smaller of the context the
  first model declares and :data:`HF_CONTEXT`. A model with a learned table of positions reads at most its
  n_ctx; Rotary and ALiBi read any length.

Each run's ``config.json`` is read once, by :func:`resolve`; loading passes it on.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.corpus import CODE_TASK, CorpusSpec, SourceFile, find_sources, split_files
from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import PreparedCorpus, run_corpus, run_tokenizer_json
from probe.errors import ProbeError
from probe.models.attach import attach, attached
from probe.models.checkpoint import read_checkpoint_config
from probe.models.hf import file_name, is_external, load_external, model_folder
from probe.models.interventions import Intervention
from probe.runs.folders import Run, beside, resolve_run, task_folder_name, train_command
from probe.subjects.examples import TRAINED_FROM, fitting_examples, sample_buckets, task_of, trained_length
from probe.subjects.inputs import ExampleGroup, Inputs, WindowGroup
from probe.subjects.memory import check_fits
from probe.subjects.run_info import (
    Lengths,
    RunInfo,
    check_comparable,
    is_code_run,
    pe_label,
    run_info,
    task_runs,
    training_context,
)
from probe.subjects.windows import ContextWindows, HeldoutFiles, choose_windows, fitting_windows, run_windows

# T of hf: models unless -o context=N: the paper's reads (1x and 2x T; perplexity 12 sizes from 0.5x to 2.5x) of
# 20 files cost a 135M model on 2 cores 70 s to 290 s per command at T = 512 (bench/real_lm.py), half of that and
# under 3 minutes at 256, where 151 and 146 of the default corpus's 200 held-out files reach 2x and 2.5x
HF_CONTEXT = 256

EXACT_MATCH, PERPLEXITY = "exact match", "perplexity"  # a subject's measure: task runs', language models'

# TransformerLens' positional_embedding_type -> the probe PE whose colour an hf: model gets in figures
POSITIONS_PE = {"standard": "learned", "shortformer": "learned", "rotary": "rotary", "alibi": "alibi"}


@dataclass(eq=False)
class Loaded:
    """A subject's model in memory, and how it reads text."""

    model: Any  # TransformerLens-hooked: [batch, pos] ids -> logits; blocks.{l}.attn.hook_pattern
    info: RunInfo  # with the PE options applied at inference
    max_length: int | None  # the longest input it reads; None: any
    encode: Callable[[Sequence[str]], list[list[int]]] | None = None  # texts -> ids, no special tokens
    vocabulary: dict[str, int] | None = None
    bos_id: int | None = None  # in front of every window read from text
    context: int | None = None  # the context it was trained at


@dataclass(eq=False)
class Subject:
    """A model an analysis reads, before it is loaded, and the intervention on its attention it is read under
    (:mod:`probe.models.interventions`; none by default)."""

    name: str  # as given
    info: RunInfo
    path: Path | None  # its run folder (None: an hf: model)
    config: dict[str, Any] | None  # its config.json, read once
    intervention: Intervention = field(default_factory=Intervention)

    measure = EXACT_MATCH  # how a change to its attention is scored: exact match or held-out perplexity
    trained_from = f"the longest of {TRAINED_FROM} IID validation sequences"  # what its L is, said

    @property
    def run(self) -> Run | None:
        return None if self.path is None else Run(self.path, self.config)

    def under(self, intervention: Intervention) -> Subject:
        """This subject, to be read under ``intervention`` instead of its own."""
        return replace(self, intervention=intervention)

    def rotates(self, loaded: Loaded | None = None) -> bool:
        """Whether it takes a RoPE scaling (its PE has a ``scaling`` option: Rotary)."""
        from probe.models.registry import pe_class

        return "scaling" in pe_class(self.info.pe).options

    def has_distance(self, loaded: Loaded | None = None) -> bool:
        """Whether it has a relative distance to cap: a bias or rotating PE."""
        from probe.models.registry import pe_class

        cls = pe_class(self.info.pe)
        return cls.adds_bias or cls.rotates

    def check_cap_fits(self, model: Any, intervention: Intervention, longest: int, label: str) -> None:
        """ProbeError where ``model`` (``label``) cannot be read at ``longest`` tokens under ``intervention``'s
        cap (probe's layers cap in their own kernels: it always can)."""

    def trained_length(self) -> int:
        """L, the longest sequence it was trained on, in tokens (what log-length, cap and RoPE scalings read)."""
        return trained_length(self.config)

    def load(
        self,
        device: torch.device,
        pe_options: Mapping[str, Any] | None = None,
        label: str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Loaded:
        """The model, with those of ``pe_options`` its PE has applied at inference (and the intervention's RoPE
        scaling), its weights in ``dtype`` (None: as saved), attending under the subject's intervention."""
        from probe.models.registry import options_for
        from probe.runs.folders import load_run

        intervention = self._resolved()
        if intervention.rope and not options_for(self.config["pe"], dict(intervention.rope)):
            raise ProbeError(f"{self.info.label}: {self.config['pe']} has no RoPE to scale")
        applied = options_for(self.config["pe"], {**dict(pe_options or {}), **intervention.rope})
        model = load_run(self.path, device=device, pe_options=applied or None, config=self.config)
        if dtype is not None:
            model.to(dtype)
        loaded = Loaded(model, run_info(self.path, self.config, label, applied), model.cfg.n_ctx)
        return self._intervened(loaded, intervention)

    def _resolved(self) -> Intervention:
        if self.intervention.is_identity:
            return self.intervention
        return self.intervention.resolved(self.trained_length())

    def _intervened(self, loaded: Loaded, intervention: Intervention) -> Loaded:
        """``loaded`` attending under ``intervention`` (the subject's, resolved), its label and info saying which."""
        if intervention.is_identity:
            return loaded
        attach(loaded.model, intervention)
        info = replace(
            loaded.info, label=f"{loaded.info.label} under {intervention.name}", intervention=intervention.to_json()
        )
        return replace(loaded, info=info)

    def other_seed(self) -> Subject | None:
        """Another complete seed of this run (seed 1 first, else the lowest): the A' baseline."""
        found = []
        for candidate in sorted(self.path.parent.glob("seed*")):
            if candidate == self.path or not (candidate / "config.json").is_file():
                continue
            try:
                config = read_checkpoint_config(candidate)
            except ProbeError:
                continue
            other = int(config.get("model", {}).get("seed", -1))
            if other != self.info.seed and config.get("training", {}).get("complete", True):
                found.append((other != 1, other, candidate, config))
        if not found:
            return None
        _, _, path, config = min(found, key=lambda f: f[:3])
        return type(self)(str(path), run_info(path, config), path, config, self.intervention)


class TaskRun(Subject):
    """A run of one of the paper's tasks."""


class CodeRun(Subject):
    """A run of `probe pretrain` or `probe import`: a code model with its corpus beside it."""

    measure = PERPLEXITY
    trained_from = "its training context"

    def load(
        self,
        device: torch.device,
        pe_options: Mapping[str, Any] | None = None,
        label: str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Loaded:
        loaded = super().load(device, pe_options, label, dtype)  # intervened: its edits are on the model
        tokenizer = CodeTokenizer.from_json(run_tokenizer_json(self.path))
        loaded.encode, loaded.vocabulary = tokenizer.encode_batch, tokenizer.tokenizer.get_vocab()
        loaded.context = training_context(self.config)
        return loaded


class HfModel(Subject):
    """A model TransformerLens boots from Hugging Face files, with its own tokenizer."""

    measure = PERPLEXITY
    trained_from = "its n_ctx"

    def rotates(self, loaded: Loaded | None = None) -> bool:
        """Whether its attention has RoPE: known once it is loaded (before, it may: a plan counts the rule)."""
        return True if loaded is None else loaded.info.pe == "rotary"

    def has_distance(self, loaded: Loaded | None = None) -> bool:
        return self.rotates(loaded)

    def check_cap_fits(self, model: Any, intervention: Intervention, longest: int, label: str) -> None:
        """A cap the fused route cannot fold is ReRoPE on the bridge's own [head, query, key] scores: they must
        fit in memory at ``longest``."""
        if intervention.cap is None:
            return
        from probe.models.hf_attention import runs_folded

        with attached(model, intervention):
            if not runs_folded(model):
                check_fits(model.cfg.n_heads, longest, label)

    def load(
        self,
        device: torch.device,
        pe_options: Mapping[str, Any] | None = None,
        label: str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Loaded:
        intervention = self._resolved()
        model = load_external(self.name, device, dtype, rope=dict(intervention.rope) or None)
        info = RunInfo(model.spelling, POSITIONS_PE.get(model.positions, model.positions), 0, model.spelling)
        loaded = Loaded(
            model.bridge, info, model.max_length, model.encode, model.vocabulary(), model.bos_id, model.n_ctx
        )
        return self._intervened(loaded, intervention)

    def trained_length(self) -> int:
        from probe.models.hf import declared_context

        return declared_context(self.name)

    def other_seed(self) -> Subject | None:
        return None


def resolve(
    name: str | Path | Run,
    *,
    root: str | Path | None = None,
    task: str = "scan",
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> Subject:
    """The subject ``name`` names: ``hf:`` (found on this machine), a run folder, or with ``root`` a PE name
    resolved for ``task``, ``seed`` and the task ``options``. Nothing is loaded."""
    if isinstance(name, Run):
        return _run_subject(name.path, name.config)
    name = str(name)
    if is_external(name):
        model_folder(name)
        return HfModel(name, RunInfo(name, "", 0, name), None, None)
    path = Path(name) if root is None else resolve_run(name, root, task, seed, dict(options or {}))
    return _run_subject(path, read_checkpoint_config(path))


def subjects_task(names: Sequence[str], task: str | None) -> str | None:
    """The task whose runs PE names among ``names`` are: code where an ``hf:`` model is among them (they are
    read on held-out code), else ``task`` (None: the main job's, :func:`probe.presets.main_task`); a task that
    is not code beside hf: is one line."""
    if any(is_external(str(n)) for n in names):
        if task not in (None, CODE_TASK):
            raise ProbeError(f"hf: models are read on held-out code (--task {CODE_TASK}), not on task {task}")
        return CODE_TASK
    return task


def reads_code(names: Sequence[str], task: str | None) -> bool:
    """Whether the models ``names`` (with ``--task``) are read on code, where options name a corpus rather than
    a task's (:func:`subjects_task`)."""
    return subjects_task(names, task) == CODE_TASK


def is_language_model(config: Mapping[str, Any]) -> bool:
    """Whether a run folder's ``config.json`` is a language model's (a code run of `probe pretrain` or
    `probe import`: read on held-out text, scored by perplexity) rather than a task run's: the one test of a
    run's kind, which :func:`resolve` and the explorer's run lists ask."""
    return is_code_run(config)


def split_hf(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the ``hf:`` spellings among ``names``, the rest): what a text field of model names holds."""
    return [n for n in names if is_external(n)], [n for n in names if not is_external(n)]


def _run_subject(path: Path, config: dict[str, Any]) -> Subject:
    kind = CodeRun if is_language_model(config) else TaskRun
    return kind(str(path), run_info(path, config), path, config)


def resolve_all(
    names: Sequence[str | Path | Run],
    *,
    root: str | Path | None = None,
    task: str = "scan",
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    intervention: Intervention | None = None,
) -> list[Subject]:
    """:func:`resolve` of every name before anything is read, each to be read under ``intervention``. Where an
    ``hf:`` model is among them, PE names are code runs (``task`` code) and every run must be one: hf: models
    are read on held-out code."""
    if any(is_external(str(n)) for n in names if not isinstance(n, Run)):
        subjects = [resolve(n, root=root, task=CODE_TASK, seed=seed, options=options) for n in names]
        for s in subjects:
            if isinstance(s, TaskRun):
                raise ProbeError(
                    f"{s.path} is a run of task {s.config.get('task', {}).get('name', '?')}, not a code model: "
                    "hf: models are read on held-out code, beside the runs of `probe pretrain`"
                )
    else:
        subjects = [resolve(n, root=root, task=task, seed=seed, options=options) for n in names]
    for s in subjects:
        s.intervention = intervention or Intervention()
    return subjects


def task_subjects(
    root: str | Path,
    task: str,
    options: Mapping[str, Any] | None = None,
    seed: int | None = 0,
    pes: Sequence[str] | None = None,
) -> list[Subject]:
    """The complete runs of a task folder (:func:`probe.subjects.run_info.task_runs`) as subjects."""
    return [resolve(run) for run in task_runs(root, task, options, seed, pes)]


def others_than(a: Subject, root: str | Path, task: str, options: Mapping[str, Any], seed: int) -> list[Subject]:
    """Every other PE's run beside ``a`` (`probe compare A` with no B)."""
    if isinstance(a, HfModel):
        raise ProbeError(f"name the models to compare {a.name} with (probe compare {a.name} hf:OTHER)")
    others = [s for s in task_subjects(root, task, options, seed=seed) if s.info.pe != a.info.pe]
    if not others:
        raise ProbeError(
            f"no other PE's run of {task_folder_name(task, dict(options))} seed {seed} under {root} to "
            f"compare {a.info.pe} with (make them with: {train_command(task, dict(options), root)})"
        )
    return others


def home(subjects: Sequence[Subject], root: str | Path, options: Mapping[str, Any] | None = None) -> Path:
    """Where outputs about these subjects go: beside the runs among them, else the code folder of the
    corpus ``options`` under ``root`` (``checkpoints/code``)."""
    runs = [s.run for s in subjects if s.path is not None]
    if runs:
        return beside(runs)
    return Path(root) / task_folder_name(CODE_TASK, dict(options or {}))


def task_folder(subjects: Sequence[Subject], root: str | Path, options: Mapping[str, Any] | None = None) -> str:
    """The task folder the outputs name: the first run's, else that of the corpus ``options``."""
    runs = [s.run for s in subjects if s.path is not None]
    if runs and not any(isinstance(s, HfModel) for s in subjects):
        return runs[0].task_folder
    return home(subjects, root, options).name


def file_stem(subjects: Sequence[Subject]) -> str:
    """``hf-gpt2+hf-EleutherAI--pythia-70m``: the ``hf:`` models among ``subjects``, for output names."""
    return "+".join(file_name(s.name) for s in subjects if isinstance(s, HfModel))


# -- what subjects read -------------------------------------------------------------------------------
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

    def bos(self, subject: Subject, first: Loaded) -> int | None:
        """The token ``subject``'s windows start with (``first``: the model the files were tokenized for)."""
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

    def inputs(self, first, fit, *, n_per_bucket, seed, lengths, multiples=None) -> Inputs:
        n_ctx = min(m.max_length for m in fit)
        buckets, skipped = fitting_examples(
            sample_buckets(self.task, n_per_bucket, seed, lengths), self.tokenizer, n_ctx
        )
        return Inputs(
            [ExampleGroup(buckets, self.tokenizer)],
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
        """Every run a code run of the one corpus (checked by fingerprint) at one training context."""
        for s in subjects:
            if not is_code_run(s.config):
                Reading.check_scored_together(self, [s])
        corpus = self.heldout(None)
        for s in subjects[1:]:
            if s.config.get("corpus", {}).get("fingerprint") != corpus.manifest["fingerprint"]:
                raise ProbeError(
                    f"{s.path} was trained on another corpus than the one in {corpus.folder}; compare runs of "
                    "one task folder"
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

    def bos(self, subject: Subject, first: Loaded) -> int | None:
        from probe.models.checkpoint import window_bos

        return window_bos(subject.config)

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

    def inputs(self, first, fit, *, n_per_bucket, seed, lengths, multiples=None) -> Inputs:
        config = self.subject.config
        windows = run_windows(
            self.subject.path, config, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed, lengths=lengths
        )
        kept, skipped = fitting_windows(windows, min(m.max_length for m in fit), _who(fit))
        check_fits(sum(m.model.cfg.n_heads for m in fit), max(w.context for w in kept), _who(fit))
        return Inputs([WindowGroup(w) for w in kept], skipped, CODE_TASK, dict(config["task"]["options"]))


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
        and :data:`HF_CONTEXT`."""
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

    def bos(self, subject: Subject, first: Loaded) -> int | None:
        return first.bos_id

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

    def inputs(self, first, fit, *, n_per_bucket, seed, lengths, multiples=None) -> Inputs:
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
        if a.vocabulary != b.vocabulary:
            shared = sum(b.vocabulary.get(token) == i for token, i in a.vocabulary.items())
            raise ProbeError(
                f"cannot read {a.info.label} and {b.info.label} on the same tokens: their tokenizers differ "
                f"(vocabularies of {len(a.vocabulary)} and {len(b.vocabulary)} tokens, {shared} the same); "
                "compare models that share a tokenizer"
            )


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


def reading_of(subjects: Sequence[Subject], options: Mapping[str, Any] | None = None) -> Reading:
    """What the first of ``subjects`` reads, and those compared with it or scored beside it: held-out texts
    where an hf: model is among them, else its task's examples or its corpus's windows."""
    if any(isinstance(s, HfModel) for s in subjects):
        return TextReading(subjects, options)
    return CorpusReading(subjects[0]) if isinstance(subjects[0], CodeRun) else TaskReading(subjects[0])


def readings(subjects: Sequence[Subject], options: Mapping[str, Any] | None = None) -> list[Reading]:
    """What each subject reads: its task's examples, its corpus's windows, or, where an hf: model is among
    them, one set of held-out texts for all."""
    if any(isinstance(s, HfModel) for s in subjects):
        shared = TextReading(subjects, options)
        return [shared for _ in subjects]
    return [reading_of([s]) for s in subjects]


def check_together(a: Subject, others: Sequence[Subject]) -> None:
    """Runs compared with ``a`` read what ``a`` reads (same task and vocabulary, or the same corpus); an
    hf: model's tokenizer is checked once it is loaded (:meth:`Reading.check_pair`)."""
    for b in others:
        if a.path is not None and b.path is not None:
            check_comparable(a.info, a.config, b.info, b.config)


def baseline_label(a: Subject) -> str:
    return f"{pe_label(a.info.pe)}'"


def relabelled(info: RunInfo, suffix: str | None) -> RunInfo:
    return info if suffix is None else replace(info, label=f"{info.label} @{suffix}")
