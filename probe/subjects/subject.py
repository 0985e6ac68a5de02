"""What is analysed, before and after it is loaded: a :class:`Subject` (a task run, a code run or an ``hf:``
model, with the intervention it is read under) and its :class:`Loaded` model. What differs by kind is a
question a subject answers (its measure, what L is, whether it rotates or has a distance to cap, how it
loads); :mod:`probe.subjects.resolve` alone asks which kind it has. Each run's ``config.json`` is read once,
by :func:`probe.subjects.resolve.resolve`; loading passes it on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import run_tokenizer_json
from probe.errors import ProbeError
from probe.models.attach import attach, attached, unscalable, with_rope
from probe.models.checkpoint import read_checkpoint_config, window_bos
from probe.models.hf import ExternalModel, load_external
from probe.models.interventions import Intervention
from probe.runs.folders import Run
from probe.subjects.examples import TRAINED_FROM, trained_length
from probe.subjects.memory import check_fits
from probe.subjects.run_info import RunInfo, training_context

EXACT_MATCH, PERPLEXITY = "exact match", "perplexity"  # a subject's measure: task runs', language models'

# TransformerLens' positional_embedding_type -> the probe PE whose colour an hf: model gets in figures
POSITIONS_PE = {"standard": "learned", "shortformer": "learned", "rotary": "rotary", "alibi": "alibi"}


@dataclass(eq=False)
class Loaded:
    """A subject's model in memory: only what loading adds. How it reads text (its tokenizer, BOS, context) is
    its subject's answer, from its run or, for an ``hf:`` model, from the files loaded with it; never a copy."""

    subject: Subject  # what was loaded
    model: Any  # TransformerLens-hooked: [batch, pos] ids -> logits; blocks.{l}.attn.hook_pattern
    info: RunInfo  # as read: with the PE options applied at inference and the intervention it attends under
    external: ExternalModel | None = None  # an hf: model's tokenizer and config, known once its files are read

    @property
    def max_length(self) -> int | None:
        """The longest input it reads; None: any."""
        return self.subject.max_length(self)

    @property
    def bos_id(self) -> int | None:
        """The token in front of every window of text it reads (None: none)."""
        return self.subject.bos_id(self)

    @property
    def context(self) -> int | None:
        """The context it was trained at (None: a task run)."""
        return self.subject.context(self)

    @property
    def vocabulary(self) -> dict[str, int]:
        """Token -> id of its tokenizer: two models read the same tokens when these are equal."""
        return self.subject.vocabulary(self)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, no special tokens."""
        return self.subject.encode(self, texts)


@dataclass(eq=False)
class Subject:
    """A model an analysis reads, before it is loaded, and the intervention on its attention it is read under
    (:mod:`probe.models.interventions`; none by default)."""

    name: str  # as given
    run: Run | None  # its run folder and config.json, read once (None: an hf: model)
    intervention: Intervention = field(default_factory=Intervention)

    measure = EXACT_MATCH  # how a change to its attention is scored: exact match or held-out perplexity
    trained_from = f"the longest of {TRAINED_FROM} IID validation sequences"  # what its L is, said

    @property
    def info(self) -> RunInfo:
        """What a report says of it."""
        return RunInfo.of(self.run)

    @property
    def path(self) -> Path | None:
        """Its run folder (None: an hf: model)."""
        return None if self.run is None else self.run.path

    @property
    def config(self) -> dict[str, Any] | None:
        """Its run's ``config.json`` (None: an hf: model)."""
        return None if self.run is None else self.run.config

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

    def max_length(self, loaded: Loaded) -> int | None:
        """The longest input ``loaded`` reads: its n_ctx."""
        return loaded.model.cfg.n_ctx

    def bos_id(self, loaded: Loaded) -> int | None:
        """The token in front of its windows of text: a task run reads its task's examples, not windows."""
        return None

    def context(self, loaded: Loaded) -> int | None:
        """The context it was trained at, where it reads text (a task run reads its task's lengths)."""
        return None

    def vocabulary(self, loaded: Loaded) -> dict[str, int]:
        raise ProbeError(f"{self.info.label} is a run of a task: it reads its task's examples, not text")

    def encode(self, loaded: Loaded, texts: Sequence[str]) -> list[list[int]]:
        raise ProbeError(f"{self.info.label} is a run of a task: it reads its task's examples, not text")

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
        """The model, with those of ``pe_options`` its PE has applied at inference, its weights in ``dtype``
        (None: as saved), attending under the subject's intervention (its RoPE scaling too: attached, which its
        info records among the options at inference)."""
        from probe.models.registry import options_for
        from probe.runs.folders import load_run

        intervention = self._resolved()
        why = unscalable(self.config["pe"], intervention)
        if why:
            raise ProbeError(f"{self.info.label}: {why}")
        given = options_for(self.config["pe"], dict(pe_options or {}))
        model = load_run(self.path, device=device, pe_options=given or None, config=self.config)
        if dtype is not None:
            model.to(dtype)
        applied = options_for(self.config["pe"], with_rope(pe_options, intervention))
        loaded = Loaded(self, model, RunInfo.of(self.run, label, applied))
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
        return type(self)(str(path), Run(path, config), self.intervention)


class TaskRun(Subject):
    """A run of one of the paper's tasks."""


class CodeRun(Subject):
    """A run of `probe pretrain` or `probe import`: a code model with its corpus beside it."""

    measure = PERPLEXITY
    trained_from = "its training context"

    @cached_property
    def tokenizer(self) -> CodeTokenizer:
        """The BPE it was trained with (its run folder's ``tokenizer.json``), read once."""
        return CodeTokenizer.from_json(run_tokenizer_json(self.path))

    def bos_id(self, loaded: Loaded) -> int | None:
        """The beginning-of-sequence token it was trained with at the start of every block, if any."""
        return window_bos(self.config)

    def context(self, loaded: Loaded) -> int | None:
        return training_context(self.config)

    def vocabulary(self, loaded: Loaded) -> dict[str, int]:
        return self.tokenizer.tokenizer.get_vocab()

    def encode(self, loaded: Loaded, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenizer.encode_batch(texts)


class HfModel(Subject):
    """A model TransformerLens boots from Hugging Face files, with its own tokenizer."""

    measure = PERPLEXITY
    trained_from = "its n_ctx"

    @property
    def info(self) -> RunInfo:
        """Its spelling; its PE is known once it is loaded (:attr:`Loaded.info`)."""
        return RunInfo.external(self.name)

    def rotates(self, loaded: Loaded | None = None) -> bool:
        """Whether its attention has RoPE: known once it is loaded (before, it may: a plan counts the rule)."""
        return True if loaded is None else loaded.info.pe == "rotary"

    def has_distance(self, loaded: Loaded | None = None) -> bool:
        return self.rotates(loaded)

    def max_length(self, loaded: Loaded) -> int | None:
        """Its n_ctx with a learned table of positions, else any length."""
        return loaded.external.max_length

    def bos_id(self, loaded: Loaded) -> int | None:
        """The BOS its tokenizer adds by itself, if any."""
        return loaded.external.bos_id

    def context(self, loaded: Loaded) -> int | None:
        """The context its config declares."""
        return loaded.external.n_ctx

    def vocabulary(self, loaded: Loaded) -> dict[str, int]:
        return loaded.external.vocabulary()

    def encode(self, loaded: Loaded, texts: Sequence[str]) -> list[list[int]]:
        return loaded.external.encode(texts)

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
        model = load_external(self.name, device, dtype)
        info = RunInfo.external(model.spelling, POSITIONS_PE.get(model.positions, model.positions))
        return self._intervened(Loaded(self, model.bridge, info, model), intervention)

    def trained_length(self) -> int:
        from probe.models.hf import declared_context

        return declared_context(self.name)

    def other_seed(self) -> Subject | None:
        return None
