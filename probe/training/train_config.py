"""What decides a run's weights (:class:`TrainConfig`: the preset's recipe from :mod:`probe.presets`,
overrides, the protocol), which stored settings differ from asked ones, and the learning rate."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from probe.errors import ProbeError
from probe.models.model_config import ModelConfig, resolve_config
from probe.models.registry import parse_pe_options, pe_class
from probe.precision import BF16, BY_NAME, FLOAT32, NAMES, TF32, Precision
from probe.presets import CPU_BF16, training_recipe
from probe.tasks.batches import PACKED_WIDTH
from probe.training.optimizer import DECAY_GROUPS
from probe.training.selection import every

PROTOCOLS = ("probe", "authors")
PRECISIONS = ("auto", *NAMES)  # auto: bf16 autocast on CUDA; see TrainConfig.numerics
AUTHORS_EPS = 1e-6  # their T5 config's layer_norm_epsilon
SCHEDULES = ("polynomial", "cosine")
BOOKKEEPING = (
    "checkpoint_every",
    "log_every",
    "eval_examples",
    "complete",
    "steps_done",
    "selection",
    "selected_step",
)  # not the model
# what a run saved before a setting existed was trained with
LEGACY = {"protocol": "probe", "pack": False, "pack_width": 2, "precision": "auto", "weight_decay_groups": "probe"}


@dataclass
class TrainConfig:
    """Everything that decides a run's weights (and nothing that does not)."""

    task: str = "scan"
    pe: str = "nope"
    seed: int = 0
    preset: str = "tiny"
    task_options: dict[str, Any] = field(default_factory=dict)
    pe_options: dict[str, Any] = field(default_factory=dict)  # as given (-p); the preset's defaults fill the rest
    steps: int | None = None
    lr: float | None = None
    dropout: float | None = None
    batch_size: int | None = None
    weight_decay: float | None = None
    warmup: float | None = None
    lr_end: float = 0.0
    decay_power: float = 1.0
    schedule: str | None = None  # polynomial (the paper's synthetic tasks) or cosine (its pretraining)
    beta2: float | None = None
    grad_clip: float = 1.0
    checkpoint_every: int = 500
    log_every: int = 50
    eval_examples: int = 1000
    model: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None  # probe or authors; the authors' on split=paper
    eval_every: int | None = None  # steps between selection evaluations; 0: publish the last step
    pack: bool = False  # several examples per row (probe.tasks.batches.EncodedSet.packed_batch): less padding
    pack_width: int = PACKED_WIDTH  # packed rows hold up to this many times the batch's longest example
    precision: str = "auto"  # float32, bf16 autocast, TF32 products (a GPU's), or auto (see numerics)
    weight_decay_groups: str | None = None  # which weights AdamW decays (probe.training.optimizer); the protocol's

    def __post_init__(self) -> None:
        self._fill_recipe()
        self.pe_options = parse_pe_options(self.pe, self.pe_options)
        self._settle_protocol()
        if self.precision not in PRECISIONS:
            raise ProbeError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.eval_every is None:
            self.eval_every = every(self.steps) if self.protocol == "authors" else 0
        if self.eval_every < 0:
            raise ProbeError(f"--eval-every must be 0 (no selection) or positive, got {self.eval_every}")
        self._check_pack()

    def _fill_recipe(self) -> None:
        """Settings left unset take the preset's recipe for the task (pretraining on code has its own);
        a schedule, batch size or step count that cannot train is refused."""
        from probe.corpus import CODE_TASK

        recipe = training_recipe(self.preset, self.task, code=self.task == CODE_TASK)
        for name in ("steps", "lr", "dropout", "batch_size", "weight_decay", "warmup", "schedule", "beta2"):
            if getattr(self, name) is None:
                setattr(self, name, recipe[name])
        if self.schedule not in SCHEDULES:
            raise ProbeError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        _check_whole("--batch-size", self.batch_size, 1)
        _check_whole("--steps", self.steps, 1)
        _check_whole("--checkpoint-every", self.checkpoint_every, 1, "steps between resumable states")
        _check_whole("log_every", self.log_every, 1, "steps between log lines")
        _check_whole("eval_examples", self.eval_examples, 1)
        _check_real("--lr", self.lr, "a finite number above 0", lambda v: 0 < v < math.inf)
        _check_real("--dropout", self.dropout, "at least 0 and below 1", lambda v: 0 <= v < 1)
        _check_real("weight_decay", self.weight_decay, "a finite number, at least 0", lambda v: 0 <= v < math.inf)
        _check_real("warmup", self.warmup, "a fraction of the steps, 0 to 1", lambda v: 0 <= v <= 1)
        _check_real("lr_end", self.lr_end, "a finite number, at least 0", lambda v: 0 <= v < math.inf)
        _check_real("decay_power", self.decay_power, "a finite number, at least 0", lambda v: 0 <= v < math.inf)
        _check_real("beta2", self.beta2, "at least 0 and below 1", lambda v: 0 <= v < 1)
        if self.grad_clip is not None:  # None or 0: no clipping (the loop clips where it is set)
            _check_real(
                "grad_clip", self.grad_clip, "a finite number, at least 0 (0: off)", lambda v: 0 <= v < math.inf
            )

    def _settle_protocol(self) -> None:
        """The protocol (the authors' on their paper split, else probe's) and the weight-decay groups it
        implies unless given; the authors' protocol is refused for code pretraining."""
        from probe.corpus import CODE_TASK

        if self.protocol is None:
            self.protocol = "authors" if self.task_options.get("split") == "paper" else "probe"
        if self.protocol not in PROTOCOLS:
            raise ProbeError(f"unknown protocol {self.protocol!r}; choose one of {', '.join(PROTOCOLS)}")
        if self.protocol == "authors" and self.task == CODE_TASK:
            raise ProbeError("the authors' protocol is their synthetic tasks'; pretraining on code takes probe's")
        if self.weight_decay_groups is None:
            self.weight_decay_groups = self.protocol
        if self.weight_decay_groups not in DECAY_GROUPS:
            raise ProbeError(
                f"unknown weight-decay groups {self.weight_decay_groups!r}; choose one of {', '.join(DECAY_GROUPS)}"
            )

    def _check_pack(self) -> None:
        """``pack`` only where packing changes nothing a model sees: not code windows (full already), not a
        PE whose logits read more than each example's relative positions."""
        from probe.corpus import CODE_TASK

        if isinstance(self.pack_width, bool) or not isinstance(self.pack_width, int) or self.pack_width < 1:
            raise ProbeError(
                f"pack_width must be a whole number, at least 1 (rows as wide as the longest example), got "
                f"{self.pack_width!r}"
            )
        if self.pack and (self.task == CODE_TASK or not pe_class(self.pe).packable()):
            what = (
                "code windows are full already"
                if self.task == CODE_TASK
                else f"{self.pe}'s logits read more than each example's relative positions"
            )
            raise ProbeError(f"--pack does not apply here: {what}")

    def numerics(self, device_type: str) -> Precision:
        """What a new run trains in on ``device_type`` (:mod:`probe.precision`): the one asked, or for ``auto``
        bf16 autocast on a GPU; on a CPU with bf16 arithmetic of its own
        (:func:`probe.device.cpu_computes_bf16`), at the presets measured to train the paper's tasks as well
        and faster in it (``probe.presets.CPU_BF16``), code pretraining excepted (its perplexity was not
        measured in bf16). A resumed run keeps what it started with (``Trainer.load_state``). ``tf32`` on a
        device with no TF32 products (a CPU) is a ProbeError, asked before anything is built or written."""
        from probe.corpus import CODE_TASK
        from probe.device import cpu_computes_bf16

        if self.precision == "auto":
            cpu_bf16 = self.preset in CPU_BF16 and self.task != CODE_TASK and cpu_computes_bf16()
            return BF16 if device_type == "cuda" or cpu_bf16 else FLOAT32
        if self.precision == TF32.name and device_type != "cuda":
            raise ProbeError(f"precision tf32 rounds a GPU's float32 products; on {device_type} train float32 or bf16")
        return BY_NAME[self.precision]

    def forward_precision(self, device_type: str) -> str:
        """``float32``, ``bf16`` or ``tf32``: what a new run trains in on ``device_type`` (:meth:`numerics`' name)."""
        return self.numerics(device_type).name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model this run trains: the preset, ``-m`` overrides and the PE's options (ProbeError
        naming a field or option that does not exist or does not fit)."""
        model = {"eps": AUTHORS_EPS, **self.model} if self.protocol == "authors" else self.model
        return resolve_config(
            self.pe,
            vocab_size=vocab_size,
            preset=self.preset,
            seed=self.seed,
            dropout=self.dropout,
            pe_options=self.pe_options,
            **model,
        )


def _check_whole(name: str, value: Any, least: int, what: str = "") -> None:
    """ProbeError naming ``name`` (a flag, or a field without one) unless ``value`` is an integer >= ``least``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        said = f" ({what})" if what else ""
        raise ProbeError(f"{name} must be a whole number, at least {least}{said}, got {value!r}")


def _check_real(name: str, value: Any, should: str, fits: Callable[[float], bool]) -> None:
    """ProbeError naming ``name`` and ``value`` unless ``value`` is a number that ``fits`` (``should`` says how)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not fits(value):
        raise ProbeError(f"{name} must be {should}, got {value!r}")


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` x steps, then polynomial decay to ``lr_end`` (HuggingFace's
    ``get_polynomial_decay_schedule_with_warmup``, which the paper's code uses, but one step ahead during the
    warm-up: step 0 runs at 1/W of ``lr``, not at 0; docs/deviations.md) or, for ``schedule="cosine"``, half a
    cosine down to ``lr_end`` (its pretraining's)."""
    warmup = max(1, round(config.warmup * config.steps))
    if step < warmup:
        return config.lr * (step + 1) / warmup
    done = (step - warmup) / max(1, config.steps - warmup)
    if config.schedule == "cosine":
        return config.lr_end + (config.lr - config.lr_end) * 0.5 * (1 + math.cos(math.pi * done))
    return config.lr_end + (config.lr - config.lr_end) * (1 - done) ** config.decay_power


def settings_differ(stored: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """``"steps 4000, asked 10000"`` for every training setting that differs; settings a checkpoint
    older than the setting does not record are taken as matching."""
    stored = {**LEGACY, **stored}
    return [
        f"{key} {stored[key]!r}, asked {value!r}"
        for key, value in requested.items()
        if key not in BOOKKEEPING and key in stored and stored[key] != value
    ]
