"""Stacked runs: runs that read one batch stream, trained as one program (:func:`train_stack`): a study's PEs
at one seed read the same batches in the same order, so each batch is cut once and every member
takes its step on it in turn. Each member is a :class:`~probe.training.loop.Trainer` doing exactly
what it does alone (its own model, optimizer, RNG, log and state), so a run trained with others is
the run trained alone; one member is how a run trains alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from functools import partial

from probe.errors import ProbeError
from probe.tasks.batches import EncodedSet, batch_stream, fixed_geometry
from probe.training.background import Batch, prefetched
from probe.training.dropout import dropout
from probe.training.loop import Trainer
from probe.training.steps import CaptureFailed
from probe.training.train_config import TrainConfig


def stack_key(config: TrainConfig) -> tuple:
    """What runs share to read one batch stream and validate at the same steps: the task and its
    options, the seed, the preset, the steps and batch size, the protocol (its sequence format and
    batch order), packing and its row width, and the selection schedule. Code pretraining reads a corpus of its own."""
    from probe.corpus import CODE_TASK

    if config.task == CODE_TASK:
        return (id(config),)
    return (
        config.task,
        json.dumps(config.task_options, sort_keys=True),
        config.seed,
        config.preset,
        config.steps,
        config.batch_size,
        config.protocol,
        config.pack,
        config.pack_width,
        config.eval_every,
        config.eval_examples,
        config.log_every,
        config.checkpoint_every,
    )


def train_stack(
    trainers: Sequence[Trainer], on_steps: Sequence[Callable[[int, float, float], None] | None] | None = None
) -> list[tuple[float, float] | ProbeError]:
    """Train ``trainers`` (one :func:`stack_key`, at one step) to their last step on one batch stream:
    each batch is cut once, on one fixed geometry when their engine needs one, and every member
    takes its step on it in turn. Per member: (last logged loss, seconds of this session), or the
    ProbeError that stopped it (a non-finite loss), the others going on; a capture that broke
    (:class:`~probe.training.steps.CaptureFailed`) stops them all."""
    lead = trainers[0]
    config = lead.config
    if len({stack_key(t.config) for t in trainers}) > 1 or len({t.step for t in trainers}) > 1:
        raise ValueError("stacked runs share a batch stream: one stack_key, one step")
    on_steps = list(on_steps or [None] * len(trainers))
    data = lead.source.training_set(config.seed)
    grouped = config.protocol == "probe"
    cut = _batch_cutter(lead, data, grouped)
    stream = batch_stream(data, config.batch_size, config.seed, lead.epoch, lead.position, grouped=grouped)
    outcomes: dict[int, tuple[float, float] | ProbeError] = {}
    active = list(range(len(trainers)))
    with ExitStack() as stack:
        for trainer in trainers:  # each member its own rate
            stack.enter_context(dropout(trainer.model, trainer.config.dropout, trainer.config.protocol))
        batches = prefetched(stream, cut, lead.device)
        stack.callback(batches.close)
        try:
            for trainer in trainers:
                trainer.begin()
            while active and trainers[active[0]].step < config.steps:
                _step_each(trainers, active, next(batches), on_steps, outcomes)
            for i in list(active):
                try:
                    trainers[i].close()
                    outcomes[i] = (trainers[i].last_loss, trainers[i].session_seconds())
                except ProbeError as error:
                    outcomes[i] = error
        except KeyboardInterrupt:
            for i in active:
                trainers[i].keep_finished_steps()  # Ctrl-C: keep every finished step
            raise
        finally:
            for trainer in trainers:
                trainer.model.eval()
                trainer.writer.wait()
    return [outcomes[i] for i in range(len(trainers))]


def _batch_cutter(lead: Trainer, data: EncodedSet, grouped: bool) -> Callable:
    """How the stream's examples become a batch: on one fixed geometry when the engine needs fixed
    shapes (a captured step), else packed or padded as the run asks."""
    config = lead.config
    if lead.engine.fixed_shapes:
        geometry = fixed_geometry(
            data,
            config.batch_size,
            config.seed,
            config.steps,
            grouped=grouped,
            packed=config.pack,
            factor=config.pack_width,
        )
        return partial(geometry.cut, data)
    return partial(data.packed_batch, factor=config.pack_width) if config.pack else data.batch


def _step_each(
    trainers: Sequence[Trainer],
    active: list[int],
    item: Batch,
    on_steps: Sequence[Callable[[int, float, float], None] | None],
    outcomes: dict[int, tuple[float, float] | ProbeError],
) -> None:
    """Every active member's step on one batch (``item``: epoch, position, batch); a member whose step
    raised a ProbeError leaves ``active`` with it as its outcome, the others go on."""
    epoch, position, batch = item
    for i in list(active):
        try:
            trainers[i].run_step(batch)
            trainers[i].end_step(epoch, position, batch[0].numel(), on_steps[i])
        except CaptureFailed:  # the process's CUDA state is spoilt: no member goes on, nothing is saved
            raise
        except ProbeError as error:
            outcomes[i] = error
            active.remove(i)


def train_alone(trainer: Trainer, on_step: Callable[[int, float, float], None] | None = None) -> tuple[float, float]:
    """Train one run to ``config.steps``: (last logged loss, seconds spent in this call); a non-finite
    loss raises its ProbeError."""
    (outcome,) = train_stack([trainer], [on_step])
    if isinstance(outcome, ProbeError):
        raise outcome
    return outcome
