"""Training (Section 3, Appendix D.2): AdamW, polynomial decay after a linear warm-up, loss on
the output tokens only, checkpoints that survive a kill and resume to the same weights.

A run lives in its run folder (``probe.runs.run_dir``). While it trains, ``train_state.safetensors``
(weights, optimizer moments, RNG, data position, all in one atomically replaced file) is written
every ``checkpoint_every`` steps; the published checkpoint (``model.safetensors`` + ``config.json``)
is written at the end, when the IID accuracy is known. ``metrics.jsonl`` gets one line per log.

Two protocols. ``probe``'s: ``<bos>`` first, batches of one length, dropout on the embedding and
the sublayer outputs, the last step published. The ``authors``' (the default on the paper's splits,
``split=paper``), read from McGill-NLP/length-generalization at 40f8a44: their sequence format (no
``<bos>``, their separator), batches drawn at random, dropout where their T5 stack has it
(:mod:`probe.dropout`), RMSNorm eps 1e-6, and the best checkpoint on IID validation published
(:mod:`probe.selection`), the last step's kept beside it in ``last/``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from probe.data import batch_stream
from probe.decoding import teacher_forced_exact_match
from probe.dropout import dropout
from probe.errors import ProbeError
from probe.files import append_line, atomic_write, atomic_write_text
from probe.locks import run_lock
from probe.models.checkpoint import CONFIG, read_checkpoint_config, save_checkpoint
from probe.models.config import PRESETS, ModelConfig, resolve_config
from probe.models.registry import PE_CLASSES, parse_pe_options
from probe.models.transformer import PETransformer
from probe.runs import LAST
from probe.selection import Selection, every
from probe.sources import TrainingSource, training_source

STATE = "train_state.safetensors"
METRICS = "metrics.jsonl"
PROTOCOLS = ("probe", "authors")
AUTHORS_EPS = 1e-6  # their T5 config's layer_norm_epsilon

# Per-preset recipe. `base` is the paper's (Table tab:hyperparam: lr 3e-5, 40K steps, dropout 0.1);
# smaller models train well with a larger peak rate and far fewer steps.
# Measured on SCAN (NoPE, held-out IID exact match): tiny at lr 1e-3 reaches 96.6% after 4000
# steps of 32, against 92.8% after 2000 steps of 64 (the same examples, at about the same cost on
# a CPU) and 89% for a peak rate of 3e-3.
RECIPES: dict[str, dict[str, Any]] = {
    "tiny": dict(steps=4000, lr=1e-3, batch_size=32, dropout=0.0),
    "small": dict(steps=8000, lr=5e-4, batch_size=32, dropout=0.0),
    "base": dict(steps=40_000, lr=3e-5, batch_size=64, dropout=0.1),
}
# Per-preset recipe on a code corpus (`probe pretrain`). `tiny` is the 2-core CPU default, measured
# by bench/pretrain_speed.py; `lm-1b` is the paper's pretraining (Appendix "Pretraining at 1.3B
# Scale", after SantaCoder: AdamW beta2 0.95, weight decay 0.1, lr 2e-4, cosine decay after 2%
# warm-up, 256 windows of 1024 tokens a step; its 30B tokens are ~114K steps).
LM_RECIPES: dict[str, dict[str, Any]] = {
    "tiny": dict(steps=1500, lr=1e-3, batch_size=32, dropout=0.0),
    "small": dict(steps=6000, lr=5e-4, batch_size=32, dropout=0.0),
    "base": dict(
        steps=40_000, lr=2e-4, batch_size=64, dropout=0.1, weight_decay=0.1, warmup=0.02, schedule="cosine", beta2=0.95
    ),
    "lm-1b": dict(
        steps=114_000,
        lr=2e-4,
        batch_size=256,
        dropout=0.0,
        weight_decay=0.1,
        warmup=0.02,
        schedule="cosine",
        beta2=0.95,
    ),
}
DEFAULTS = dict(weight_decay=0.05, warmup=0.06, schedule="polynomial", beta2=0.999)  # the paper's (HF's) AdamW
SCHEDULES = ("polynomial", "cosine")


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
    pack: bool = False  # several examples per row (probe.data.EncodedSet.packed_batch): less padding

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ProbeError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        from probe.corpus import CODE_TASK

        recipes = LM_RECIPES if self.task == CODE_TASK else RECIPES
        if self.preset not in recipes:
            raise ProbeError(f"no {self.task} recipe for preset {self.preset!r}; choose one of {', '.join(recipes)}")
        recipe = {**DEFAULTS, **recipes[self.preset]}
        for name in ("steps", "lr", "dropout", "batch_size", "weight_decay", "warmup", "schedule", "beta2"):
            if getattr(self, name) is None:
                setattr(self, name, recipe[name])
        if self.schedule not in SCHEDULES:
            raise ProbeError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.batch_size < 1:
            raise ProbeError(f"--batch-size must be positive, got {self.batch_size}")
        if self.steps < 1:
            raise ProbeError(f"--steps must be at least 1, got {self.steps}")
        self.pe_options = parse_pe_options(self.pe, self.pe_options)
        if self.protocol is None:
            self.protocol = "authors" if self.task_options.get("split") == "paper" else "probe"
        if self.protocol not in PROTOCOLS:
            raise ProbeError(f"unknown protocol {self.protocol!r}; choose one of {', '.join(PROTOCOLS)}")
        if self.protocol == "authors" and self.task == CODE_TASK:
            raise ProbeError("the authors' protocol is their synthetic tasks'; pretraining on code takes probe's")
        if self.eval_every is None:
            self.eval_every = every(self.steps) if self.protocol == "authors" else 0
        if self.eval_every < 0:
            raise ProbeError(f"--eval-every must be 0 (no selection) or positive, got {self.eval_every}")
        if self.pack and (self.task == CODE_TASK or not PE_CLASSES[self.pe].packable()):
            what = "code windows are full already" if self.task == CODE_TASK else (
                f"{self.pe}'s logits read more than each example's relative positions")
            raise ProbeError(f"--pack does not apply here: {what}")

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


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` x steps, then polynomial decay to ``lr_end`` (HuggingFace's
    ``get_polynomial_decay_schedule_with_warmup``, which the paper's code uses) or, for
    ``schedule="cosine"``, half a cosine down to ``lr_end`` (its pretraining's)."""
    warmup = max(1, round(config.warmup * config.steps))
    if step < warmup:
        return config.lr * (step + 1) / warmup
    done = (step - warmup) / max(1, config.steps - warmup)
    if config.schedule == "cosine":
        return config.lr_end + (config.lr - config.lr_end) * 0.5 * (1 + math.cos(math.pi * done))
    return config.lr_end + (config.lr - config.lr_end) * (1 - done) ** config.decay_power


def target_loss(model: PETransformer, tokens: torch.Tensor, mask: torch.Tensor,
                segments: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (and <eos>) given everything before them (in their own
    example, for rows packed with ``segments``)."""
    logits = model(tokens, segments=segments)[:, :-1]  # [batch, pos - 1, vocab]
    losses = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="none")
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ProbeError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ProbeError(f"device {device!r} requested but no CUDA GPU is available here")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ProbeError(f"device {device!r} does not exist (this machine has {torch.cuda.device_count()} GPU(s))")
    if resolved.type not in ("cpu", "cuda"):
        raise ProbeError(f"unsupported device {device!r}; use cpu or cuda")
    return resolved


@dataclass
class RunResult:
    path: Path
    config: TrainConfig
    status: str  # "trained", "resumed", "skipped"
    steps: int
    seconds: float
    final_loss: float | None
    iid_accuracy: float | None
    steps_per_second: float | None = None
    held_out: dict[str, float] = field(default_factory=dict)  # the source's validation metrics


class Trainer:
    """One run: build or resume, train, publish. ``on_step(step, loss, tokens_per_s)`` reports progress."""

    def __init__(self, config: TrainConfig, run_path: Path, device: torch.device, source: TrainingSource | None = None):
        self.config = config
        self.path = Path(run_path)
        self.device = device
        self.source = source or training_source(
            config.task, config.task_options, config.seed, self.path, authors=config.protocol == "authors"
        )
        self.model = PETransformer(config.model_config(self.source.vocab_size), device=device)
        self.source.attach_to(self.model)  # string habits (to_tokens, generate) on the training model too
        params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr,
            betas=(0.9, config.beta2),
            eps=1e-8,
            **({"fused": True} if device.type == "cuda" else {"foreach": True}),
        )
        self.step, self.epoch, self.position = 0, 0, 0
        self.selection = Selection() if config.eval_every else None
        self.validation = self.source.validation_set(config.eval_examples) if config.eval_every else None
        if config.eval_every and self.validation is None:
            raise ProbeError(f"{config.task} has no validation examples to select a checkpoint by; pass --eval-every 0")

    # -- resumable state: one file, replaced atomically ---------------------------------------
    def save_state(self) -> None:
        tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        optim = self.optimizer.state_dict()
        for index, state in optim["state"].items():
            for key, value in state.items():
                tensors[f"optim.{index}.{key}"] = (
                    value.detach().cpu().reshape(-1) if value.dim() == 0 else value.detach().cpu().contiguous()
                )
        if self.selection and self.selection.best_state is not None:
            tensors.update({f"best.{k}": v.contiguous() for k, v in self.selection.best_state.items()})
        tensors["rng.torch"] = torch.get_rng_state()
        if self.device.type == "cuda":
            tensors["rng.cuda"] = torch.cuda.get_rng_state(self.device)
        meta = {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "train_config": self.config.to_dict(),
            "selection": self.selection.to_dict() if self.selection else None,
        }
        atomic_write(self.path / STATE, lambda tmp: save_file(tensors, str(tmp), metadata={"probe": json.dumps(meta)}))

    def load_state(self) -> bool:
        path = self.path / STATE
        if not path.is_file():
            return False
        from safetensors import safe_open

        try:
            with safe_open(str(path), "pt") as handle:
                meta = json.loads(handle.metadata()["probe"])
            tensors = load_file(str(path))
        except Exception as error:  # a damaged state file: say so rather than train over it silently
            raise ProbeError(f"cannot resume from {path} ({error}); delete it or pass --force to start over") from None
        if settings_differ(meta["train_config"], self.config.to_dict()):
            raise ProbeError(f"{path} was written by a run with other settings; pass --force to start over")
        self.model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        optim = self.optimizer.state_dict()
        for index in range(sum(len(g["params"]) for g in optim["param_groups"])):
            keys = [k for k in tensors if k.startswith(f"optim.{index}.")]
            if keys:
                optim["state"][index] = {}
                for key in keys:
                    name = key.split(".", 2)[2]
                    value = tensors[key]
                    optim["state"][index][name] = value.reshape(()) if name == "step" else value.to(self.device)
        self.optimizer.load_state_dict(optim)
        torch.set_rng_state(tensors["rng.torch"])
        if "rng.cuda" in tensors and self.device.type == "cuda":
            torch.cuda.set_rng_state(tensors["rng.cuda"], self.device)
        self.step, self.epoch, self.position = meta["step"], meta["epoch"], meta["position"]
        if self.selection:
            best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
            self.selection = Selection.from_dict(meta.get("selection") or {}, best or None)
        return True

    # -- the loop -----------------------------------------------------------------------------
    def train(self, on_step: Callable[[int, float, float], None] | None = None) -> tuple[float, float]:
        """Train to ``config.steps``; returns (last logged loss, seconds spent)."""
        config = self.config
        data = self.source.training_set(config.seed)
        stream = batch_stream(
            data, config.batch_size, config.seed, self.epoch, self.position, grouped=config.protocol == "probe"
        )
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else _null()
        self.model.train()
        if self.step == 0:  # dropout draws from the global RNG; a resumed run restored it instead
            torch.manual_seed(config.seed)
        started = time.perf_counter()
        self._updating, self._last_loss = False, float("nan")
        try:
            with dropout(self.model, config.dropout, config.protocol):
                self._evaluate_if_due()  # a run stopped between a step and its evaluation
                self._steps(data, stream, autocast, on_step)
        except KeyboardInterrupt:
            if not self._updating and self.step > self._saved_step():
                self.save_state()  # Ctrl-C: keep every finished step
            raise
        finally:
            self.model.eval()
        return self._last_loss, time.perf_counter() - started

    def _steps(self, data, stream, autocast, on_step: Callable[[int, float, float], None] | None) -> None:
        config = self.config
        window_start, window_tokens, loss_sum, loss_n = time.perf_counter(), 0, 0.0, 0
        while self.step < config.steps:
            epoch, position, index = next(stream)
            batch = data.packed_batch(index) if config.pack else data.batch(index)  # tokens, mask[, segments]
            tokens, *rest = (tensor.to(self.device, non_blocking=True) for tensor in batch)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate(self.step, config)
            with autocast:
                loss = target_loss(self.model, tokens, *rest)
            if not torch.isfinite(loss):
                raise ProbeError(
                    f"loss became {loss.item()} at step {self.step} of {self.path}; the last good state "
                    f"(step {self._saved_step()}) is kept — lower --lr or change the seed"
                )
            self._updating = True  # weights and counters change together; never save in between
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
            self.optimizer.step()
            self.step += 1
            self.epoch, self.position = epoch, position + 1
            self._updating = False
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            window_tokens += tokens.numel()
            if self.step % config.log_every == 0 or self.step == config.steps:
                elapsed = time.perf_counter() - window_start
                self._last_loss = loss_sum / loss_n
                tokens_per_s = window_tokens / max(elapsed, 1e-9)
                self._log(
                    {
                        "step": self.step,
                        "loss": self._last_loss,
                        "lr": learning_rate(self.step - 1, config),
                        "tokens_per_s": tokens_per_s,
                        "time": time.time(),
                    }
                )
                if on_step:
                    on_step(self.step, self._last_loss, tokens_per_s)
                window_start, window_tokens, loss_sum, loss_n = time.perf_counter(), 0, 0.0, 0
            self._evaluate_if_due()
            if self.step % config.checkpoint_every == 0 and self.step < config.steps:
                self.save_state()

    def _evaluate_if_due(self) -> None:
        """Score the IID validation set at the selection interval and at the last step (once each)."""
        if self.selection is None or self.step == 0:
            return
        due = self.step % self.config.eval_every == 0 or self.step == self.config.steps
        if not due or (self.selection.history and self.selection.history[-1][0] == self.step):
            return
        correct = teacher_forced_exact_match(self.model, self.validation, device=self.device)
        score = sum(correct) / len(correct)
        self.selection.consider(self.step, score, self.model)
        self._log({"step": self.step, "valid_exact_match": score, "time": time.time()})
        self.model.train()

    def _saved_step(self) -> int:
        path = self.path / STATE
        if not path.is_file():
            return 0
        from safetensors import safe_open

        with safe_open(str(path), "pt") as handle:
            return json.loads(handle.metadata()["probe"])["step"]

    def trim_log(self) -> None:
        """Drop log lines past the state training resumes from (a killed run logged steps it then
        lost), so ``metrics.jsonl`` holds each step once."""
        path = self.path / METRICS
        if not path.is_file():
            return
        lines = path.read_text().splitlines()
        kept = [line for line in lines if _logged_step(line) <= self.step]
        if len(kept) < len(lines):
            atomic_write_text(path, "".join(line + "\n" for line in kept))

    def _log(self, record: dict[str, Any]) -> None:
        append_line(self.path / METRICS, json.dumps(record))

    def publish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Write the finished model (the checkpoint other commands read) and drop the resume state;
        ``metrics`` are the last step's. With selection the run's model is the best checkpoint on IID
        validation, and the last step's, where another, is written to ``last/``. Returns the metrics
        of the model published as the run's."""
        training = {**self.config.to_dict(), "complete": True, "steps_done": self.step}
        if self.selection is not None and self.selection.history:
            best_step, _ = self.selection.best
            training["selection"] = {**self.selection.to_dict(), "last_step": self.step}
            last = {"step": self.step, **{k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}}
            if best_step != self.step:
                self._write(self.path / LAST, {**training, "selected_step": self.step}, metrics)
                self.model.load_state_dict(self.selection.best_state)
                metrics = {**metrics, **self.source.validate(self.model, self.config.eval_examples, self.device)}
            training["selected_step"] = best_step
            metrics = {**metrics, "last": last}
        self._write(self.path, training, metrics)
        (self.path / STATE).unlink(missing_ok=True)
        return metrics

    def _write(self, folder: Path, training: dict[str, Any], metrics: dict[str, Any]) -> None:
        self.source.write_files(folder)
        save_checkpoint(self.model, folder, **self.source.metadata(), training=training, metrics=metrics)


def _logged_step(line: str) -> float:
    """The step of a ``metrics.jsonl`` line; a torn or foreign line counts as past every step."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and make sure files can be written in it (or raise ProbeError)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_file = folder / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as error:
        raise ProbeError(
            f"cannot write to {folder}: {error.strerror}; choose another folder with --checkpoints"
        ) from None


BOOKKEEPING = (
    "checkpoint_every",
    "log_every",
    "eval_examples",
    "complete",
    "steps_done",
    "selection",
    "selected_step",
)  # not the model
LEGACY = {"protocol": "probe", "pack": False}  # what a run saved before a setting existed was trained with


def settings_differ(stored: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """``"steps 4000, asked 10000"`` for every training setting that differs; settings a checkpoint
    older than the setting does not record are taken as matching."""
    stored = {**LEGACY, **stored}
    return [
        f"{key} {stored[key]!r}, asked {value!r}"
        for key, value in requested.items()
        if key not in BOOKKEEPING and key in stored and stored[key] != value
    ]


def is_complete(path: Path) -> bool:
    if not (path / CONFIG).is_file():
        return False
    try:
        return bool(read_checkpoint_config(path).get("training", {}).get("complete"))
    except ProbeError:
        return False


def train_run(
    config: TrainConfig,
    run_path: Path,
    device: torch.device,
    *,
    force: bool = False,
    on_step: Callable[[int, float, float], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    wait: bool = False,
    on_wait: Callable[[dict], None] | None = None,
) -> RunResult:
    """Train one run to completion (resuming if it can); skip it if already complete.

    The run folder is locked meanwhile (:func:`probe.locks.run_lock`): another process training
    or evaluating it raises :class:`~probe.locks.RunLocked`, or with ``wait`` is waited for.
    """
    run_path = Path(run_path)
    if is_complete(run_path) and not force:
        return _skipped(config, run_path)
    check_writable(run_path)
    with run_lock(run_path, wait=wait, command=f"probe train {config.task} {config.pe}", on_wait=on_wait):
        if is_complete(run_path) and not force:  # the holder we waited for finished it
            return _skipped(config, run_path)
        return _train_locked(config, run_path, device, force, on_step, on_start)


def _skipped(config: TrainConfig, run_path: Path) -> RunResult:
    """A finished run is skipped only if it was trained as asked; another recipe in the same folder
    (other steps, another rotary scaling) is one line, never silently someone else's model."""
    stored = read_checkpoint_config(run_path)
    differences = settings_differ(stored.get("training", {}), config.to_dict())
    if differences:
        raise ProbeError(
            f"{run_path} is already trained with other settings ({'; '.join(differences)}); pass --force "
            "to retrain it there, or choose another --checkpoints"
        )
    metrics = stored.get("metrics", {})
    held_out = {k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}
    return RunResult(
        run_path,
        config,
        "skipped",
        config.steps,
        0.0,
        metrics.get("final_loss"),
        metrics.get("iid_accuracy"),
        None,
        held_out,
    )


def _train_locked(
    config: TrainConfig,
    run_path: Path,
    device: torch.device,
    force: bool,
    on_step: Callable[[int, float, float], None] | None,
    on_start: Callable[[int, int], None] | None,
) -> RunResult:
    if force:
        for name in (STATE, METRICS, CONFIG, "model.safetensors", "eval.json"):
            (run_path / name).unlink(missing_ok=True)
        shutil.rmtree(run_path / LAST, ignore_errors=True)
    trainer = Trainer(config, run_path, device)
    resumed = trainer.load_state()
    trainer.trim_log()
    if on_start:
        on_start(trainer.step, config.steps)
    start_step = trainer.step
    loss, seconds = trainer.train(on_step)
    held_out = trainer.source.validate(trainer.model, config.eval_examples, device)
    steps_per_second = (trainer.step - start_step) / seconds if seconds > 0 else None
    metrics = trainer.publish(
        {"final_loss": loss, **held_out, "train_seconds": seconds, "steps_per_second": steps_per_second}
    )
    held_out = {k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}
    return RunResult(
        run_path,
        config,
        "resumed" if resumed else "trained",
        trainer.step,
        seconds,
        loss,
        held_out.get("iid_accuracy"),
        steps_per_second,
        held_out,
    )
