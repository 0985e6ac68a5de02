"""What is left of a sweep and what it costs: run states, steps left, measured throughput,
estimated seconds and wall time."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import tempfile
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError
from probe.studies.sweep.grid import SweepRun

if TYPE_CHECKING:
    from torch import Tensor

    from probe.tasks import Task, Tokenizer
    from probe.training.train_config import TrainConfig


# -- what is left to do ----------------------------------------------------------------------
def run_state(run: SweepRun, evaluate: bool = True) -> str:
    """``done`` (trained and evaluated), ``evaluate`` (trained), ``resume`` (interrupted), ``new``,
    ``conflict`` (trained with other settings: running it fails with the line that says which) or ``damaged``
    (its config.json cannot be read: running it fails with the line that says so)."""
    from probe.analysis.evaluation import EVAL
    from probe.corpus import CODE_TASK
    from probe.training.loop import STATE

    folder, _ = _folder_state(run)
    if folder == "published":
        code = run.config.task == CODE_TASK  # validated by held-out perplexity when it was trained
        return "done" if not evaluate or code or (run.path / EVAL).is_file() else "evaluate"
    if folder != "unpublished":
        return folder
    return "resume" if (run.path / STATE).is_file() else "new"


PRICED = ("new", "resume", "evaluate")  # the plan's states that cost time; the others start nothing


def why_blocked(run: SweepRun) -> str | None:
    """Why running ``run`` would stop at its folder (:func:`run_state` ``conflict`` or ``damaged``), in the words
    training would use; None where it can run."""
    return _folder_state(run)[1]


def _folder_state(run: SweepRun) -> tuple[str, str | None]:
    """What ``run``'s folder holds: ``published`` (this run, trained), ``unpublished`` (nothing finished),
    ``conflict`` (a run trained with other settings) or ``damaged``; for the last two, the line training would
    fail the run with."""
    from probe.models.checkpoint import read_checkpoint_config
    from probe.training.bookkeeping import published
    from probe.training.train_config import settings_differ

    try:
        if not published(run.path):
            return "unpublished", None
        differences = settings_differ(read_checkpoint_config(run.path).get("training", {}), run.config.to_dict())
    except ProbeError as error:
        return "damaged", str(error)
    if differences:
        return "conflict", f"{run.path} is already trained with other settings ({'; '.join(differences)})"
    return "published", None


def plan_state(run: SweepRun, evaluate: bool = True) -> str:
    """:func:`run_state` as the dry run shows it, and also ``in use`` (another process holds its lock)."""
    from probe.runs.locks import RunLocked, check_free

    try:
        check_free(run.path)
    except RunLocked:
        return "in use"
    return run_state(run, evaluate)


def steps_left(run: SweepRun) -> int:
    """Training steps a run still has to take (from its resumable state, if any)."""
    from safetensors import safe_open

    from probe.training.bookkeeping import is_complete
    from probe.training.loop import STATE

    if is_complete(run.path):
        return 0
    state = run.path / STATE
    if state.is_file():
        try:
            with safe_open(str(state), "pt") as handle:
                return max(0, run.config.steps - json.loads(handle.metadata()["probe"])["step"])
        except Exception:
            return run.config.steps
    return run.config.steps


# -- cost ------------------------------------------------------------------------------------
SAMPLE_POOLS = 1  # a price reads one pool of 32 batches of a task's training examples, not all of them


def mean_batch_tokens(run: SweepRun, sample: int | None = SAMPLE_POOLS) -> float:
    """Tokens in one training batch of ``run``, padding included, the mean over the first epoch's
    batches as the trainer cuts them, packed where it packs (its tokens/s counts padded tokens too).

    With ``sample``, the epoch is cut from that many pools' worth of training examples (a random draw
    from the same distribution), which prices a grid of 70 task folders in seconds; ``None`` reads the
    whole training set."""
    return batch_geometry(run, sample)[0]


def batch_geometry(run: SweepRun, sample: int | None = SAMPLE_POOLS) -> tuple[float, float]:
    """(tokens, row width): a training batch's padded tokens and the width of its rows, each the mean over
    the first epoch's batches as the trainer cuts them (``sample``: :func:`mean_batch_tokens`)."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.errors import ProbeError
    from probe.tasks.batches import encode, epoch_batches
    from probe.training.sources import TaskSource

    if run.config.task == CODE_TASK:
        context = CorpusSpec.from_options(run.config.task_options).context
        return run.config.batch_size * context, context
    authors = run.config.protocol == "authors"  # random batches: padded to the longest of a random draw
    source = TaskSource(run.config.task, run.config.task_options, run.config.seed, authors)
    if sample is None:
        data = source.training_set(run.config.seed)
    else:
        n = sample * 32 * run.config.batch_size
        try:
            examples = source.task.examples("train", n=n, seed=run.config.seed)
        except ProbeError:  # a fixed dataset with fewer training examples than that: all of them
            examples = source.task.examples("train", seed=run.config.seed)
        data = encode(examples, source.tokenizer)
    batches = epoch_batches(data, run.config.batch_size, run.config.seed, 0, grouped=not authors)
    if run.config.pack:
        shapes = [data.packed_batch(batch, factor=run.config.pack_width)[0].shape for batch in batches]
    else:
        shapes = [(len(batch), int(data.lengths[batch].max())) for batch in batches]
    return sum(r * w for r, w in shapes) / len(shapes), sum(w for _, w in shapes) / len(shapes)


def row_class(width: float) -> int:
    """The power of two nearest a batch's row width: runs whose rows are within about 1.4x of each other
    share a throughput measurement. Attention's cost grows with the square of a row's width, so tokens/s
    falls with it: 10,400 tokens/s for polynomial evaluation's full scratchpad at ``tiny`` (rows of ~3,000
    tokens) against 18,400 for addition's computation-only one (~800), on one thread here."""
    return 2 ** round(math.log2(max(1.0, width)))


MEASURED_WORK = 2e11  # FLOPs (6 x weights x tokens) of a step above which a CPU is compute-bound


def measured_batch(run: SweepRun, batch_tokens: float | None, device: str) -> int:
    """The batch a throughput measurement times: the run's own, except on a CPU where a step of it is over
    :data:`MEASURED_WORK`. There the step is compute-bound, so tokens/s does not depend on the batch, and a
    smaller one of about that much work is timed: seconds, not minutes, for ``base``. Below it, per-step
    costs that do not shrink with the batch (AdamW's update, Python) would put tokens/s at batch 8 1.3x
    (``small``) to 1.4-1.6x (``tiny``) below batch 64's, so the batch is kept."""
    if batch_tokens is None or device != "cpu":
        return run.config.batch_size
    shape = run.config.model_config(vocab_size=64)
    weights = shape.n_layers * (4 * shape.d_model**2 + 2 * shape.d_model * shape.d_mlp)  # attention + MLP
    work = 6 * weights * batch_tokens
    if work <= MEASURED_WORK:
        return run.config.batch_size
    return max(1, int(run.config.batch_size * MEASURED_WORK / work))


@contextlib.contextmanager
def _scratch_trainer(run: SweepRun, device: str, threads: int, **changes: Any) -> Iterator[Any]:
    """A ``Trainer`` of ``run`` (its config with ``changes``) in a scratch folder, with ``threads`` torch
    threads while it is open: what a price times, the run's own model and data."""
    import torch

    from probe.device import resolve_device
    from probe.training.loop import Trainer
    from probe.training.sources import training_source

    resolved = resolve_device(device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    config = dataclasses.replace(run.config, **changes)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            source = training_source(
                config.task, config.task_options, config.seed, run.path, authors=config.protocol == "authors"
            )
            yield Trainer(config, Path(scratch), resolved, source=source)
    finally:
        torch.set_num_threads(previous_threads)


def measure_tokens_per_second(
    run: SweepRun, device: str = "cpu", steps: int = 5, threads: int = 1, batch_tokens: float | None = None
) -> float:
    """Training throughput of ``run``'s model (tokens/s, the median step) from a few real steps of
    ``Trainer`` in a scratch folder (the first step is a warm-up), with the torch threads each run will
    get, at :func:`measured_batch` (``batch_tokens``: the run's mean padded tokens per batch), on a CPU with the
    freed memory kept mapped, as a worker trains (:mod:`probe.training.memory`)."""
    from probe.device import resolve_device
    from probe.training.memory import freed_memory_kept
    from probe.training.stacked import train_alone

    kind = resolve_device(device).type
    changes = {
        "steps": steps + 1,
        "log_every": 1,
        "checkpoint_every": 10**9,
        "eval_every": 0,  # no selection pass between the timed steps: priced apart
        "batch_size": measured_batch(run, batch_tokens, kind),
    }
    speeds: list[float] = []
    with _scratch_trainer(run, device, threads, **changes) as trainer, freed_memory_kept(kind):
        train_alone(trainer, lambda step, loss, tokens_per_s: speeds.append(tokens_per_s) if step > 1 else None)
    return sorted(speeds)[len(speeds) // 2]


def selections_left(run: SweepRun) -> int:
    """Checkpoint-selection passes ``run`` still has to make: the authors' protocol scores its IID validation
    set every ``eval_every`` steps and at its last step (:mod:`probe.training.selection`); probe's, none."""
    every, steps = run.config.eval_every, run.config.steps
    if not every:
        return 0

    def due(step: int) -> int:  # passes made by the end of ``step``
        return step // every + int(step == steps and steps % every != 0)

    return due(steps) - due(steps - steps_left(run))


def selection_tokens(run: SweepRun) -> int:
    """Padded tokens one selection pass of ``run`` reads: its IID validation set, in the batches of
    :func:`~probe.tasks.decoding.teacher_forced_exact_match`, one forward pass each (none without one)."""
    from probe.tasks.decoding import TEACHER_FORCED_BATCH
    from probe.training.sources import training_source

    config = run.config
    source = training_source(
        config.task, config.task_options, config.seed, run.path, authors=config.protocol == "authors"
    )
    data = source.validation_set(config.eval_examples)
    if data is None:
        return 0
    return padded_tokens(data.lengths, TEACHER_FORCED_BATCH)


def measure_selection_tokens_per_second(
    run: SweepRun, device: str = "cpu", threads: int = 1, tokens: int | None = None, passes: int = 3
) -> float:
    """Throughput of a selection pass of ``run``'s model (tokens/s of its validation set, teacher-forced, no
    gradient), the median of ``passes`` after a warm-up one, with the torch threads each run will get
    (``tokens``: :func:`selection_tokens` of ``run``, where the caller has it)."""
    import time

    from probe.tasks.decoding import teacher_forced_exact_match

    tokens = selection_tokens(run) if tokens is None else tokens
    with _scratch_trainer(run, device, threads, eval_every=1) as trainer:
        seconds = []
        for _ in range(passes + 1):
            started = time.perf_counter()
            teacher_forced_exact_match(
                trainer.model, trainer.validation, device=trainer.device, precision=trainer.forward_precision
            )
            seconds.append(time.perf_counter() - started)
    return tokens / sorted(seconds[1:])[len(seconds[1:]) // 2]


FORWARD_SHARE = 1 / 3  # a forward pass's work per token against a training step's (forward + backward ~ 3x)


def vocabulary_size(run: SweepRun) -> int:
    """The size of ``run``'s vocabulary: its task's tokenizer's, or the BPE's its corpus asks for (an imported
    tokenizer's size is not known before the corpus is prepared: the spec's is taken)."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.training.sources import TaskSource

    if run.config.task == CODE_TASK:
        return CorpusSpec.from_options(run.config.task_options).vocab_size
    return TaskSource(
        run.config.task, run.config.task_options, run.config.seed, run.config.protocol == "authors"
    ).vocab_size


def throughput_keys(config: TrainConfig, width: float, vocabulary: int) -> tuple[str, str]:
    """The kinds of run that share a measured throughput: training's, per model shape, precision, row width
    (:func:`row_class`), vocabulary (the same rounding) and PE with its options; a selection pass's, per model
    shape, precision, row width and vocabulary.

    A PE's own work per step differs (at ``tiny`` on a CPU, T5's bias trains about 1.15x as long as NoPE,
    Rotary and ALiBi 1.1x), so timing one PE for all underprices a study by up to a tenth. So does the
    vocabulary: the embedding, the unembedding and the loss grow with it, and at ``tiny`` PCFG's 535 words train
    at 16,600 tokens/s where copy's 107, in rows as wide, train at 19,900. Selection passes are 5-10% of a run,
    where a PE's difference moves a price by about 1%: timing them per PE would take most of a dry run's time."""
    model_shape = [config.preset, config.model, config.precision, row_class(width), row_class(vocabulary)]
    training = json.dumps([*model_shape, config.pe, config.pe_options], sort_keys=True)
    return training, json.dumps(model_shape, sort_keys=True)


@dataclasses.dataclass(frozen=True)
class EvaluationWork:
    """What the evaluation after training reads, per set of weights scored (:func:`evaluation_work`)."""

    passes: int  # the selected weights, and the last step's where the protocol selects and eval_last asks
    forced_tokens: int = 0  # teacher-forced: padded tokens, in length-sorted batches
    decoded: tuple[tuple[int, int, int], ...] = ()  # decoded: (examples, prompt tokens, new tokens) per batch
    attended_tokens: int = 0  # the attended distances' reading (``attended``), once: padded tokens

    def seconds(self, forward_speed: float, step: tuple[float, float, float] | None) -> float:
        """At ``forward_speed`` tokens/s a teacher-forced pass (and a decoded batch's prompt, and the attended
        distances' reading: its attention maps are not priced apart), and a decoding step at ``step`` = (seconds
        a step, more per example in its batch, more per example and position it attends to): a batch of b
        prompts of p tokens decoding n new ones takes n (o + b c) + b a (n p + n^2 / 2)."""
        attended = self.attended_tokens / forward_speed
        forced = self.forced_tokens / forward_speed
        decoded = 0.0
        if self.decoded:
            overhead, per_example, per_position = step
            for b, p, n in self.decoded:
                decoded += (
                    b * p / forward_speed + n * (overhead + b * per_example) + b * per_position * (n * p + n * n / 2)
                )
        return self.passes * (forced + decoded) + attended


def evaluation_work(run: SweepRun) -> EvaluationWork:
    """What :func:`probe.analysis.evaluation.evaluate_run` reads for ``run``: its held-out IID examples and its
    test split, teacher-forced in length-sorted batches of 256 (:func:`~probe.tasks.decoding.length_batches`), or,
    where exact match needs decoding (a task scored on its answer, positions drawn at random), decoded batch by
    batch (:func:`~probe.tasks.decoding.decoding_batches`); for the selected weights and the last step's where
    the protocol selects and the run asks for both (``eval_last``); and once, where it asks (``attended``), the
    attended distances' reading of :func:`probe.analysis.distances.attend_run`. Not the rows a scratchpad's
    prediction leaves unended at its gold's length, which decoding runs on to the authors' 1,500 positions
    (:data:`~probe.tasks.decoding.SCRATCHPAD_POSITIONS`): how many a trained model leaves is known only once it
    has run (3.6% of 10,000 on the Section 6 study's runs, ``bench/decode_budget.py``); and each batch priced as
    decoding all its rows to its end, where rows that have ended leave it (:data:`~probe.tasks.decoding.DROP_ENDED`):
    when a trained model ends them is known only once it has run too. A code run is read by held-out perplexity
    while it trains, and not evaluated after: none."""
    from probe.analysis.evaluation import BATCH_SIZE
    from probe.corpus import CODE_TASK
    from probe.tasks import get
    from probe.tasks.batches import encode
    from probe.tasks.decoding import decoding_batches
    from probe.training.sources import TaskSource

    config = run.config
    if config.task == CODE_TASK:
        return EvaluationWork(passes=0)
    task = get(config.task, **config.task_options)
    tokenizer = TaskSource(config.task, config.task_options, config.seed, config.protocol == "authors").tokenizer
    examples = task.held_out(run.eval_valid) + task.examples("test", n=run.eval_n, seed=0)
    passes = 2 if config.eval_every and run.eval_last else 1
    attended = attended_tokens(task, tokenizer) if run.attended else 0
    if task.answer_reader() is None and not config.model_config(vocab_size=64).random_positions:
        data = encode(examples, tokenizer)
        forced = padded_tokens(data.lengths, BATCH_SIZE)
        return EvaluationWork(passes, forced_tokens=forced, attended_tokens=attended)
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    batches = decoding_batches(prompts, targets, BATCH_SIZE)
    decoded = tuple((len(c), len(prompts[c[0]]), new) for c, new in batches)
    return EvaluationWork(passes, decoded=decoded, attended_tokens=attended)


def padded_tokens(lengths: Tensor, batch_size: int) -> int:
    """Tokens of ``lengths`` [example] read in length-sorted batches, each padded to its longest."""
    from probe.tasks.decoding import length_batches

    return sum(int(lengths[c].max()) * len(c) for c in length_batches(lengths, batch_size))


def attended_tokens(task: Task, tokenizer: Tokenizer) -> int:
    """Padded tokens of the attended distances' default reading (:func:`probe.analysis.distances.attend_run`):
    up to ten gold examples of each unseen length bucket, in batches of its batch size."""
    import torch

    from probe.analysis.distances import BATCH_SIZE
    from probe.subjects.examples import sample_buckets

    examples = [e for bucket in sample_buckets(task, lengths="unseen") for e in bucket.examples]
    lengths = torch.tensor([len(tokenizer.encode_example(e)[0]) for e in examples])
    return padded_tokens(lengths, BATCH_SIZE)


DECODE_STEPS = 24  # timed new tokens a decoding measurement takes, at each batch size and context
LONG_CONTEXT = 512  # the prompt a measurement decodes after to time attention over a long cache


def measure_decoding_step(
    run: SweepRun, device: str = "cpu", threads: int = 1, wide: int = 64
) -> tuple[float, float, float]:
    """(seconds a decoding step takes, more per example in its batch, more per example and cached position) for
    ``run``'s model, from :data:`DECODE_STEPS` cached greedy steps (less the prompt's pass, timed apart) at a batch
    of 1 and of ``wide`` after a short prompt, and of ``wide`` after a long one (:data:`LONG_CONTEXT`, within the
    model's context), each timed after a warm-up, no example stopping early: a step's fixed cost (Python, kernel
    launches), its per-example one, and its attention over the cache, which grows with the scratchpad it decodes."""
    import time

    import torch

    from probe.tasks.decoding import greedy_decode

    short = 16
    with _scratch_trainer(run, device, threads) as trainer:
        model = trainer.model.eval()
        long = max(short + 1, min(LONG_CONTEXT, model.cfg.n_ctx - DECODE_STEPS))
        per_step = {}
        for batch, prompt in ((1, short), (wide, short), (wide, long)):
            prompts = torch.zeros(batch, prompt, dtype=torch.long, device=trainer.device)
            seconds = {}
            for new in (1, 1, 1 + DECODE_STEPS, 1 + DECODE_STEPS):  # each length once to warm up, then timed
                started = time.perf_counter()
                greedy_decode(model, prompts, new, eos_id=-1, pad_id=0)
                seconds[new] = time.perf_counter() - started
            per_step[batch, prompt] = (seconds[1 + DECODE_STEPS] - seconds[1]) / DECODE_STEPS  # the prompt's pass out
    per_position = max(0.0, (per_step[wide, long] - per_step[wide, short]) / (wide * (long - short)))
    per_example = max(0.0, (per_step[wide, short] - per_step[1, short]) / (wide - 1))
    return per_step[1, short] - per_example, per_example, per_position


class _Meter:
    """Throughputs measured once per kind of run (:func:`throughput_keys`), and the tokens each kind reads."""

    def __init__(
        self, device: str, tokens_per_second: float | None, steps: int, threads: int, on_measure: Callable | None
    ):
        self.device, self.given, self.steps, self.threads = device, tokens_per_second, steps, threads
        self.on_measure = on_measure
        self.speeds: dict[str, float] = {}
        self.forward_speeds: dict[str, float] = {}
        self.decoding_steps: dict[str, tuple[float, float, float]] = {}
        self.cached: dict[tuple, Any] = {}

    def once(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``key`` is asked for, the same answer after."""
        if key not in self.cached:
            self.cached[key] = compute()
        return self.cached[key]

    def training(self, run: SweepRun, shape: str, batch_tokens: float) -> float:
        """Training tokens/s of ``run``'s kind: given, or timed on its first run."""
        if shape not in self.speeds:
            if self.given is not None:
                self.speeds[shape] = self.given
            else:
                if self.on_measure:
                    self.on_measure(f"measuring {run.config.preset} {run.config.model or ''} on {run.label}")
                self.speeds[shape] = measure_tokens_per_second(run, self.device, self.steps, self.threads, batch_tokens)
        return self.speeds[shape]

    def forward(self, run: SweepRun, key: str, shape: str, batch_tokens: float, valid_tokens: int) -> float:
        """Teacher-forced tokens/s of ``run``'s model: a selection pass timed on its first run, or, given a
        training throughput or without a validation set, :data:`FORWARD_SHARE` of a step's work per token."""
        if key not in self.forward_speeds:
            if self.given is None and valid_tokens > 0:
                speed = measure_selection_tokens_per_second(run, self.device, self.threads, valid_tokens)
            else:
                speed = self.training(run, shape, batch_tokens) / FORWARD_SHARE
            self.forward_speeds[key] = speed
        return self.forward_speeds[key]

    def decoding(self, run: SweepRun, key: str) -> tuple[float, float, float]:
        """A decoding step's cost for ``run``'s model shape (``key``, a selection pass's: timed once, whatever the
        PE, as a selection pass is), timed on its first run; given a training throughput, none (a decoded
        evaluation is then not priced)."""
        if key not in self.decoding_steps:
            measured = self.given is None
            self.decoding_steps[key] = (
                measure_decoding_step(run, self.device, self.threads) if measured else (0.0, 0.0, 0.0)
            )
        return self.decoding_steps[key]


def estimate_cost(
    runs: Sequence[SweepRun],
    *,
    device: str = "cpu",
    tokens_per_second: float | None = None,
    measure_steps: int = 5,
    threads: int = 1,
    on_measure: Callable[[str], None] | None = None,
    states: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Seconds each run still needs (``states``: each run's :func:`plan_state`; one not :data:`PRICED`
    needs none): its steps left x tokens per batch / training tokens per second, plus
    its checkpoint-selection passes left x the tokens of one / selection tokens per second; and, apart
    (``evaluation_seconds``), the evaluation after training: teacher-forced at that forward speed, or decoded at
    a decoding step's measured cost (:class:`EvaluationWork`, :func:`measure_decoding_step`).

    Both throughputs are measured on the first run of their kind (:func:`throughput_keys`) with ``threads``
    torch threads (what each run will train with); or training's is taken from ``tokens_per_second`` (to
    price hardware you do not have here) and a selection pass's put at :data:`FORWARD_SHARE` of its work per
    token. The authors' protocol scores 20 selection passes a run: 5-10% of a ``tiny`` run's time on a CPU.
    """
    meter = _Meter(device, tokens_per_second, measure_steps, threads, on_measure)
    per_run: list[float] = []
    evaluating: list[float] = []
    for number, run in enumerate(runs):
        config = run.config
        if (states[number] if states is not None else run_state(run)) not in PRICED:
            per_run.append(0.0)
            evaluating.append(0.0)
            continue
        left, passes = steps_left(run), selections_left(run)
        task = (config.task, json.dumps(config.task_options, sort_keys=True), config.protocol)
        tokens, width = meter.once(
            ("rows", *task, config.batch_size, config.pack, config.pack_width), lambda run=run: batch_geometry(run)
        )
        valid = meter.once(("valid", *task, config.eval_examples), lambda run=run: selection_tokens(run))
        tested = ("test", *task, bool(config.eval_every), run.eval_n, run.eval_valid, run.eval_last, run.attended)
        work = meter.once(tested, lambda run=run: evaluation_work(run))
        vocabulary = meter.once(("vocabulary", *task), lambda run=run: vocabulary_size(run))
        shape, forward = throughput_keys(config, width, vocabulary)
        forward_speed = meter.forward(run, forward, shape, tokens, valid)
        training = left * tokens / meter.training(run, shape, tokens) if left else 0.0
        per_run.append(training + passes * valid / forward_speed)
        step = meter.decoding(run, forward) if work.decoded else None
        evaluating.append(work.seconds(forward_speed, step))
    return {
        "seconds": per_run,
        "total_seconds": sum(per_run),
        "evaluation_seconds": evaluating,
        "tokens_per_second": meter.speeds,
        "selection_tokens_per_second": meter.forward_speeds,
        "source": "given" if tokens_per_second is not None else f"measured on {device}",
    }


def queued_wall_seconds(seconds: Sequence[float], phases: Sequence[Hashable], slots: int) -> float:
    """Wall time of jobs that run a phase at a time (``phases``: each job's, in order), each phase's jobs one
    queue in their order that ``slots`` workers take from as each becomes free: a study's phase, its scenarios
    one after another with no worker waiting for a scenario's last run."""
    by_phase: dict[Hashable, list[float]] = {}
    for phase, s in zip(phases, seconds, strict=True):
        by_phase.setdefault(phase, []).append(s)
    wall = 0.0
    for queue in by_phase.values():
        free_at = [0.0] * max(1, slots)
        for s in queue:
            free_at[free_at.index(min(free_at))] += s
        wall += max(free_at)
    return wall


def wall_seconds(seconds: Iterable[float], slots: int) -> float:
    """Wall time of running jobs of these lengths on ``slots`` parallel slots, longest first."""
    loads = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


def duration(seconds: float) -> str:
    """``42 s``, ``12.5 min`` or ``3.1 h``: a time estimate as a person reads it."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"
