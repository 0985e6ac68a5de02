"""What is analysed, before and after it is loaded: a :class:`Subject` (a task run, a code run or an ``hf:``
model, with the intervention it is read under) and its :class:`Loaded` model. What differs by kind is a
question a subject answers (its measure, what L is, whether it rotates or has a distance to cap, how it
loads); :mod:`probe.subjects.resolve` alone asks which kind it has. Each run's ``config.json`` is read once,
by :func:`probe.subjects.resolve.resolve`; loading passes it on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import run_tokenizer_json
from probe.errors import ProbeError
from probe.models.attach import attach, attached
from probe.models.checkpoint import read_checkpoint_config
from probe.models.hf import load_external
from probe.models.interventions import Intervention
from probe.runs.folders import Run
from probe.subjects.examples import TRAINED_FROM, trained_length
from probe.subjects.memory import check_fits
from probe.subjects.run_info import RunInfo, run_info, training_context

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
    info: RunInfo  # what a report says of it
    run: Run | None  # its run folder and config.json, read once (None: an hf: model)
    intervention: Intervention = field(default_factory=Intervention)

    measure = EXACT_MATCH  # how a change to its attention is scored: exact match or held-out perplexity
    trained_from = f"the longest of {TRAINED_FROM} IID validation sequences"  # what its L is, said

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
        return type(self)(str(path), run_info(path, config), Run(path, config), self.intervention)


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
