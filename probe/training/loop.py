"""The training loop: one run's model, optimizer and steps (:class:`Trainer`), its resumable state in
one atomically replaced file, and what it publishes (the best checkpoint on IID validation under
the authors' protocol, the last step's otherwise)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
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
from probe.models.checkpoint import save_checkpoint
from probe.models.transformer import PETransformer
from probe.runs import LAST
from probe.selection import Selection
from probe.sources import TrainingSource, training_source
from probe.training.config import TrainConfig, learning_rate, settings_differ

STATE = "train_state.safetensors"
METRICS = "metrics.jsonl"
FORWARD = {"float32": None, "bf16": torch.bfloat16}  # the forward pass's precision: its autocast dtype


def target_loss(
    model: PETransformer, tokens: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (and <eos>) given everything before them (in their own
    example, for rows packed with ``segments``)."""
    logits = model(tokens, segments=segments)[:, :-1]  # [batch, pos - 1, vocab]
    losses = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="none")
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


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
        self.earlier_seconds = 0.0  # training time of earlier sessions, up to the state resumed from
        self.forward_dtype = config.autocast_dtype(device.type)  # a resumed run's: the state's
        self._started: float | None = None
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
            "seconds": self.seconds(),
            "forward": self.forward_precision,
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
        self.earlier_seconds = meta.get("seconds", 0.0)  # states saved before it was recorded: unknown
        if "forward" in meta:  # `auto` can change its mind between versions; the run does not
            self.forward_dtype = FORWARD[meta["forward"]]
        elif self.config.precision == "auto":  # saved when auto meant bf16 on CUDA only
            self.forward_dtype = torch.bfloat16 if self.device.type == "cuda" else None
        if self.selection:
            best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
            self.selection = Selection.from_dict(meta.get("selection") or {}, best or None)
        return True

    # -- the loop -----------------------------------------------------------------------------
    def train(self, on_step: Callable[[int, float, float], None] | None = None) -> tuple[float, float]:
        """Train to ``config.steps``; returns (last logged loss, seconds spent in this call)."""
        config = self.config
        data = self.source.training_set(config.seed)
        stream = batch_stream(
            data, config.batch_size, config.seed, self.epoch, self.position, grouped=config.protocol == "probe"
        )
        autocast = torch.autocast(self.device.type, dtype=self.forward_dtype) if self.forward_dtype else nullcontext()
        self.model.train()
        if self.step == 0:  # dropout draws from the global RNG; a resumed run restored it instead
            torch.manual_seed(config.seed)
        self._started = started = time.perf_counter()
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

    @property
    def forward_precision(self) -> str:
        """``float32`` or ``bf16``: what this run's forward pass trains in."""
        return next(name for name, dtype in FORWARD.items() if dtype == self.forward_dtype)

    def seconds(self) -> float:
        """Training time of the run so far, over every session: the steps a killed session lost
        after its last state are not counted, as they are trained again."""
        session = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.earlier_seconds + session

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
