"""The training loop's member: one run's model, optimizer and steps (:class:`Trainer`), its resumable
state in one atomically replaced file, and what it publishes (the best checkpoint on IID validation
under the authors' protocol, the last step's otherwise). :func:`probe.training.stacked.train_stack`
drives one or several of them over a batch stream."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from probe.atomic import append_line, atomic_write, atomic_write_text
from probe.errors import ProbeError
from probe.models.checkpoint import save_checkpoint
from probe.models.transformer import PETransformer
from probe.precision import BF16, BY_NAME, FLOAT32
from probe.runs.folders import LAST
from probe.runs.provenance import UNRECORDED, code_version, sessions_code
from probe.tasks.decoding import teacher_forced_exact_match
from probe.training.background import StateWriter
from probe.training.optimizer import make_optimizer
from probe.training.selection import Selection
from probe.training.sources import TrainingSource, training_source
from probe.training.steps import CapturedStep, Engine
from probe.training.train_config import TrainConfig, learning_rate, settings_differ

STATE = "train_state.safetensors"
METRICS = "metrics.jsonl"


def target_loss(
    model: PETransformer, tokens: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (and <eos>) given everything before them (in their own
    example, for rows packed with ``segments``)."""
    logits = model(tokens, segments=segments)[:, :-1]  # [batch, pos - 1, vocab]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 up; float64 stays
    losses = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


class Trainer:
    """One run: build or resume, step, publish. :func:`~probe.training.stacked.train_stack` runs
    its session (:meth:`begin`, then :meth:`run_step` and :meth:`end_step` a step, then :meth:`close`),
    alone or beside others on the same batches."""

    def __init__(
        self,
        config: TrainConfig,
        run_path: Path,
        device: torch.device,
        source: TrainingSource | None = None,
        engine: Engine | None = None,
    ):
        self.numerics = config.numerics(device.type)  # a device's refusal first; a resumed run's: the state's
        self.config = config
        self.path = Path(run_path)
        self.device = device
        self.engine = engine or Engine()
        self.source = source or training_source(
            config.task, config.task_options, config.seed, self.path, authors=config.protocol == "authors"
        )
        self.model = PETransformer(config.model_config(self.source.vocab_size), device=device)
        self.source.attach_to(self.model)  # string habits (to_tokens, generate) on the training model too
        # a model that reads the host every step trains eagerly by design, said once; never found by a failed capture
        self.eager_because = self.model.config.eager_because if self.engine.capture else None
        if self.eager_because:
            print(f"probe: {self.path}: trains eagerly, not captured: {self.eager_because}", file=sys.stderr)
        self.forward = torch.compile(self.model, dynamic=False) if self.engine.compile else self.model
        self.optimizer = make_optimizer(
            self.model,
            lr=config.lr,
            weight_decay=config.weight_decay,
            beta2=config.beta2,
            groups=config.weight_decay_groups,
            device=device,
        )
        self.step, self.epoch, self.position = 0, 0, 0
        self.saved_step = 0  # the step of the last state written (or resumed from)
        self.earlier_seconds = 0.0  # training time of earlier sessions, up to the state resumed from
        self.earlier_versions: list[str] = []  # the code versions earlier sessions trained under (runs.provenance)
        self.rng: dict[str, torch.Tensor] | None = None  # this run's generator states between its steps
        self.writer = StateWriter()
        self._captured: CapturedStep | None = None
        self._window = (0.0, 0, 0.0, 0)  # since the last log line: its start, tokens, loss sum, losses
        self._started: float | None = None
        self._losses: list[tuple[int, torch.Tensor]] = []  # (step, loss) not yet read: one sync reads them all
        self._updating = False
        self._last_loss = float("nan")
        self.selection = Selection() if config.eval_every else None
        self.validation = self.source.validation_set(config.eval_examples) if config.eval_every else None
        if config.eval_every and self.validation is None:
            raise ProbeError(f"{config.task} has no validation examples to select a checkpoint by; pass --eval-every 0")

    # -- resumable state: one file, replaced atomically, written off the training thread ----------
    def save_state(self) -> None:
        """Snapshot the state between two steps and write it in the background (:meth:`StateWriter.wait`
        joins it): weights, optimizer moments, the best checkpoint so far, RNG, data position. Weights a
        step with a finite loss made non-finite stop the run here, the last good state kept."""
        self._check_weights_finite()
        copy = {"device": "cpu", "copy": True}  # a CPU tensor the next step would change in place, too
        tensors = {f"model.{k}": v.detach().to(**copy).contiguous() for k, v in self.model.state_dict().items()}
        for index, state in self.optimizer.state_dict()["state"].items():
            for key, value in state.items():
                value = value.detach().to(**copy)
                tensors[f"optim.{index}.{key}"] = value.reshape(-1) if value.dim() == 0 else value.contiguous()
        if self.selection and self.selection.best_state is not None:
            best = self.selection.best_state.items()
            tensors.update({f"best.{k}": v.detach().to(**copy).contiguous() for k, v in best})
        tensors.update({f"rng.{name}": state.clone() for name, state in (self.rng or self._seeded_rng()).items()})
        meta = {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "seconds": self.seconds(),
            "probe_versions": self.probe_versions(),
            "forward": self.forward_precision,
            "train_config": self.config.to_dict(),
            "selection": self.selection.to_dict() if self.selection else None,
            "log_window": list(self._window[1:]),  # tokens, loss sum, losses since the last log line
            "last_loss": None if math.isnan(self._last_loss) else self._last_loss,  # stopped at the last step
        }
        path = self.path / STATE
        self.writer.submit(
            lambda: atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata={"probe": json.dumps(meta)}))
        )
        self.saved_step = self.step

    def load_state(self) -> bool:
        """Resume from the run's state file, if it has one; one it cannot resume from (damaged, written with
        other settings or by another version of probe) is a ProbeError naming it, never a traceback."""
        path = self.path / STATE
        if not path.is_file():
            return False
        meta, tensors = _read_state(path)
        differences = settings_differ(meta["train_config"], self.config.to_dict())
        if differences:
            raise ProbeError(
                f"{path} was written by a run with other settings ({'; '.join(differences)}); pass --force "
                "to start over"
            )
        misfits = self._misfits(tensors)
        if misfits:
            named = ", ".join(misfits[:4]) + (", ..." if len(misfits) > 4 else "")
            raise ProbeError(
                f"cannot resume from {path}: its tensors do not fit this model ({named}), as another version of "
                "probe wrote it; delete it or pass --force to start over"
            )
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
        self.rng = {name[4:]: tensors[name] for name in ("rng.torch", "rng.cuda") if name in tensors}
        if self.device.type == "cuda" and "cuda" not in self.rng:  # written on a CPU: the GPU's from the seed
            self.rng["cuda"] = self._seeded_rng()["cuda"]
        self.step, self.epoch, self.position = meta["step"], meta["epoch"], meta["position"]
        self.saved_step = meta["step"]
        self.earlier_seconds = meta.get("seconds", 0.0)  # states saved before it was recorded: unknown
        self.earlier_versions = meta.get("probe_versions", [UNRECORDED])
        self._window = (0.0, *meta.get("log_window", (0, 0.0, 0)))  # the next log line's mean spans the kill
        last_loss = meta.get("last_loss")
        self._last_loss = float("nan") if last_loss is None else last_loss
        if "forward" in meta:  # `auto` can change its mind between versions; the run does not
            if meta["forward"] not in BY_NAME:
                raise ProbeError(f"{path} trained in precision {meta['forward']!r}, which this probe does not know")
            self.numerics = BY_NAME[meta["forward"]]
        elif self.config.precision == "auto":  # saved when auto meant bf16 on CUDA only
            self.numerics = BF16 if self.device.type == "cuda" else FLOAT32
        if self.selection:
            best = {k[5:]: v.to(self.device) for k, v in tensors.items() if k.startswith("best.")}
            self.selection = Selection.from_dict(meta.get("selection") or {}, best or None)
        return True

    def _misfits(self, tensors: dict[str, torch.Tensor]) -> list[str]:
        """The names of a state's tensors this run's model and optimizer cannot take (missing, unknown or of
        another shape), as in a state another version of probe wrote."""
        mine, misfits = self.model.state_dict(), []
        for prefix in ("model.", "best."):  # the weights, and the best checkpoint's where it has one
            weights = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            if weights or prefix == "model.":
                misfits += sorted(prefix + k for k in set(mine).symmetric_difference(weights))
                misfits += [prefix + k for k in mine if k in weights and weights[k].shape != mine[k].shape]
        params = [param for group in self.optimizer.param_groups for param in group["params"]]
        for key, value in tensors.items():
            if not key.startswith("optim."):
                continue
            index, _, name = key[6:].partition(".")
            known = index.isdigit() and int(index) < len(params)
            if not (known and (value.numel() == 1 if name == "step" else value.shape == params[int(index)].shape)):
                misfits.append(key)
        return misfits

    def _check_weights_finite(self) -> None:
        """Stop the run if its weights are not all finite (one host sync: a state save's, never a step's),
        the last good state kept: a step can take a finite loss and spoil the weights with its update."""
        if not bool(torch.stack([p.detach().isfinite().all() for p in self.model.parameters()]).all()):
            self.writer.wait()
            raise ProbeError(
                f"weights became non-finite by step {self.step} of {self.path} (every loss read was finite); "
                f"{self._kept()} — lower --lr or change the seed"
            )

    def _kept(self) -> str:
        """What a run stopped by non-finite numbers has to resume from (its writes done)."""
        if self.saved_step and (self.path / STATE).is_file():
            return f"the last good state (step {self.saved_step}) is kept"
        return "no state is kept: it starts over"

    # -- this run's random numbers: dropout's masks, its own stream whatever else trains beside it ---
    def _seeded_rng(self) -> dict[str, torch.Tensor]:
        """The generator states ``torch.manual_seed(seed)`` gives, without touching the process's."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.config.seed)
            return self._rng_states()

    def _rng_states(self) -> dict[str, torch.Tensor]:
        states = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            states["cuda"] = torch.cuda.get_rng_state(self.device)
        return states

    def _set_rng(self, states: dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(states["torch"])
        if "cuda" in states:
            torch.cuda.set_rng_state(states["cuda"], self.device)

    # -- a step: run_step on a batch, then end_step's bookkeeping ---------------------------------
    def begin(self) -> None:
        """Start a session of steps: training mode, this run's RNG, the clock."""
        self.model.train()
        if self.rng is None:  # a fresh run; a resumed one restored its own
            self.rng = self._seeded_rng()
        self._started = time.perf_counter()
        self._window = (time.perf_counter(), *self._window[1:])  # the clock restarts; a resumed window goes on
        self._evaluate_if_due()  # a run stopped between a step and its evaluation

    @property
    def captures(self) -> bool:
        """Whether this run's steps are captured as CUDA graphs: asked of the engine, and possible."""
        return self.engine.capture and not self.eager_because

    def run_step(self, batch: tuple[torch.Tensor, ...]) -> None:
        """One optimizer step on ``batch`` (tokens, loss mask[, segments], on the device); no host sync.
        The step draws from this run's own generators, swapped in around it (host-side states: a
        captured step's replay reads the device generator's seed and offset as they are at replay, so
        captured and eager runs alike resume with the masks an uninterrupted run draws)."""
        self._updating = True  # weights and counters change together; never save in between
        outer = self._rng_states()
        self._set_rng(self.rng)
        if self.captures:
            self._captured = self._captured or CapturedStep(
                self._compute,
                self.optimizer,
                [learning_rate(s, self.config) for s in range(self.config.steps)],
                self.step,
                self.device,
                hold=lambda: (dict(self.model.pe._geometry), self.model.pe.positions),
                name=str(self.path),
            )
            loss = self._captured(batch).clone()  # the graph's loss buffer is rewritten by the next replay
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate(self.step, self.config)
            loss = self._compute(batch)
        self.rng = self._rng_states()
        self._set_rng(outer)
        self._losses.append((self.step, loss))

    def _compute(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Forward, backward, clipping and AdamW at the optimizer's learning rate, in the run's numerics
        (TF32 products in the backward pass too): the captured part."""
        with self.numerics.products():
            # a captured step keeps no casts between replays: autocast's weight cache would hold stale ones
            with self.numerics.forward(self.device.type, cache_enabled=not self.captures):
                loss = target_loss(self.forward, *batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.config.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
            self.optimizer.step()
        return loss.detach()

    def end_step(
        self, epoch: int, position: int, tokens: int, on_step: Callable[[int, float, float], None] | None = None
    ) -> None:
        """Count the step taken on the stream's batch (``epoch``, ``position``) of ``tokens`` tokens;
        log, validate and save state when due (each reads the losses first: one host sync)."""
        config = self.config
        self.step += 1
        self.epoch, self.position = epoch, position + 1
        self._updating = False
        start, window_tokens, loss_sum, loss_n = self._window
        self._window = (start, window_tokens + tokens, loss_sum, loss_n)
        if self.step % config.log_every == 0 or self.step == config.steps:
            self.read_losses()
            start, window_tokens, loss_sum, loss_n = self._window
            self._last_loss = loss_sum / max(loss_n, 1)
            tokens_per_s = window_tokens / max(time.perf_counter() - start, 1e-9)
            self._log(
                {
                    "step": self.step,
                    "loss": self._last_loss,
                    "lr": learning_rate(self.step - 1, config),
                    "tokens_per_s": tokens_per_s,
                    "time": time.time(),
                }
            )
            self._window = (time.perf_counter(), 0, 0.0, 0)  # before on_step, which may be Ctrl-C's way in
            if on_step:
                on_step(self.step, self._last_loss, tokens_per_s)
        self._evaluate_if_due()
        if self.step % config.checkpoint_every == 0 and self.step < config.steps:
            self.read_losses()
            self.save_state()

    def read_losses(self) -> None:
        """Read the losses since the last read (one host sync); a non-finite one stops the run with
        its step, the state kept being the last one written before it."""
        if not self._losses:
            return
        steps = [step for step, _ in self._losses]
        values = torch.stack([loss.float() for _, loss in self._losses]).tolist()
        self._losses = []
        for step, value in zip(steps, values):
            if not math.isfinite(value):
                self.writer.wait()
                raise ProbeError(
                    f"loss became {value} at step {step} of {self.path}; {self._kept()} — lower --lr or change the seed"
                )
        start, window_tokens, loss_sum, loss_n = self._window
        self._window = (start, window_tokens, loss_sum + sum(values), loss_n + len(values))

    def keep_finished_steps(self) -> None:
        """On Ctrl-C: write the state of every finished step, unless a step is half taken or went
        non-finite."""
        if self._updating or self.step <= self.saved_step:
            return
        try:
            self.read_losses()
            self.save_state()
        except ProbeError:
            return
        self.writer.wait()

    def close(self) -> None:
        """End the session: every loss read (a non-finite one raises), the finished steps' state written (a
        Ctrl-C or a kill while they are validated and published keeps them), every state write on disk."""
        try:
            self.read_losses()
            if self.step > self.saved_step:
                self.save_state()
        finally:
            self.writer.wait()
            self.model.eval()

    def _evaluate_if_due(self) -> None:
        """Score the IID validation set at the selection interval and at the last step (once each)."""
        if self.selection is None or self.step == 0:
            return
        due = self.step % self.config.eval_every == 0 or self.step == self.config.steps
        if not due or (self.selection.history and self.selection.history[-1][0] == self.step):
            return
        self.read_losses()  # never select weights that a non-finite loss already spoilt
        correct = teacher_forced_exact_match(
            self.model, self.validation, device=self.device, precision=self.forward_precision
        )
        score = sum(correct) / len(correct)
        self.selection.consider(self.step, score, self.model)
        self._log({"step": self.step, "valid_exact_match": score, "time": time.time()})
        self.model.train()

    @property
    def forward_precision(self) -> str:
        """``float32``, ``bf16`` or ``tf32``: what this run trains in (:mod:`probe.precision`; named "forward" in
        its state and ``forward_precision`` in its metrics since it was the forward pass's alone, where ``tf32``
        rounds the backward pass's products too)."""
        return self.numerics.name

    def seconds(self) -> float:
        """Training time of the run so far, over every session: the steps a killed session lost
        after its last state are not counted, as they are trained again."""
        session = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.earlier_seconds + session

    def probe_versions(self) -> list[str]:
        """The code versions the run has trained under so far, in order (:func:`probe.runs.provenance.code_version`):
        a run resumed after the code changed trained under both."""
        return sessions_code(self.earlier_versions, code_version())

    def session_seconds(self) -> float:
        """Seconds since this session's :meth:`begin`."""
        return 0.0 if self._started is None else time.perf_counter() - self._started

    @property
    def step_engine(self) -> dict[str, Any]:
        """How this session's steps ran: compiled, captured as asked (``capture``) and as done
        (``captured``), and why not where a capture was asked: the model's reason (``eager_because``),
        or the sync the warm-up found (``capture_failed``)."""
        captured = self._captured
        return {
            "compile": self.engine.compile,
            "capture": self.engine.capture,
            "captured": bool(captured and captured.captured),
            **({"eager_because": self.eager_because} if self.eager_because else {}),
            **({"capture_failed": captured.failed} if captured and captured.failed else {}),
        }

    @property
    def last_loss(self) -> float:
        """The mean loss of the last log line's window (NaN before the first)."""
        return self._last_loss

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
        self.writer.wait()  # a state still being written would land after its removal
        training = {**self.config.to_dict(), "complete": True, "steps_done": self.step}
        if self.selection is not None and self.selection.history:
            best_step, _ = self.selection.best
            training["selection"] = {**self.selection.to_dict(), "last_step": self.step}
            last = {"step": self.step, **{k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}}
            if best_step != self.step:
                self._write(self.path / LAST, {**training, "selected_step": self.step}, metrics)
                self.model.load_state_dict(self.selection.best_state)
                held_out = self.source.validate(
                    self.model, self.config.eval_examples, self.device, self.forward_precision
                )
                metrics = {**metrics, **held_out}
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


def _read_state(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A state file's metadata and tensors; a damaged one, or one without what a resume reads, is a
    ProbeError naming it."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            meta = json.loads(handle.metadata()["probe"])
        tensors = load_file(str(path))
        missing = {"step", "epoch", "position", "train_config"} - set(meta)
    except Exception as error:  # a damaged state file: say so rather than train over it silently
        raise ProbeError(f"cannot resume from {path} ({error}); delete it or pass --force to start over") from None
    if missing:
        raise ProbeError(
            f"cannot resume from {path}: it records no {', '.join(sorted(missing))}, as another version of probe "
            "wrote it; delete it or pass --force to start over"
        )
    return meta, tensors
