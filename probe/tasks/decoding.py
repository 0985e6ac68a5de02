"""Exact-match accuracy with greedy decoding, per length bucket (Section 3: length generalization).

Decoding reuses keys and values (TransformerLens' KV cache): the prompt runs once, then one token
per step. Examples are grouped by prompt length, so no batch needs padding and every position
index is the one the model would see alone. A prediction is correct when the generated tokens up
to ``<eos>`` equal the gold target (with ``answer_of``, a task's answer reader, when the answer read
from the generated text, up to ``<eos>`` or all of it, equals the gold target's: how the authors score a
scratchpad). Decoding stops one token after the longest gold target, where a prediction scored token for
token is decided. One scored by its answer is not: a model that writes a longer scratchpad than the gold
can still reach the right answer, and the authors decode a scratchpad to 1,500 positions, prompt included
(:data:`SCRATCHPAD_POSITIONS`), so the rows with no ``<eos>`` by the gold's budget are decoded on to
theirs (``bench/decode_budget.py``: on 25 trained Section 6 runs, 21 of 10,000 verdicts, LEGO's and
polynomial evaluation's, turn right that way), from where they stopped (``bench/decode_on.py``: 1.40x faster
than decoding them again from their prompts, 2 of 117 rows ending otherwise by rounding, no verdict changed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from probe.errors import ProbeError
from probe.precision import BF16, BY_NAME, FLOAT32, Precision
from probe.tasks import Example, Task, Tokenizer
from probe.tasks.batches import EncodedSet, encode

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

SCRATCHPAD_POSITIONS = 1500
"""Positions, prompt included, the authors decode a scratchpad run to (``generation_max_length`` in their
``configs/data/w_scratchpad.jsonnet``): how far a prediction scored by its answer may run."""
PLAIN_POSITIONS = 256
"""Positions, prompt included, the authors decode a run without a scratchpad to (``generation_max_length`` in
their ``configs/trainer/base_model.jsonnet``, which ``configs/t5_dec_base.jsonnet`` brings to every run that
adds no scratchpad configuration): how far a prediction in their words, scored by its answer, may run."""


def scoring_precision(device: torch.device, precision: str | None = None) -> Precision:
    """The numerics a score's forward passes run in on ``device`` (:mod:`probe.precision`). On a GPU bf16
    autocast, for speed, unless the model trained in float32 or with TF32 products (``precision``: its run's
    recorded ``forward_precision``; None when not known), which is scored as it trained: a float32 run scored
    under bf16 would read its argmaxes through rounding it never trained with. On a CPU float32, the weights'
    own precision (a bf16-trained run included), and the faster where the CPU has no bf16 arithmetic of its
    own."""
    if device.type != "cuda":
        return FLOAT32
    trained = BY_NAME.get(precision)
    return trained if trained and trained.autocast is None else BF16


def scoring_numerics(device: torch.device, precision: str | None = None) -> AbstractContextManager:
    """:func:`scoring_precision`'s autocast and TF32 setting, entered for a score's passes."""
    return scoring_precision(device, precision).scoring(device.type)


DROP_ENDED = 1 / 8
"""Greedy decoding goes on without the rows that have ended once they are this fraction of those it runs: each
step reads every row's cached keys, and dropping rows moves the kept rows'. On a trained LEGO run's 240 test
examples, against every row to the end: 1/8 1.32x, 1/32 1.35x (the same, within the bench's noise), 1/2 1.15x
(``bench/decode_drop.py RUN --drop F``: ``bench/results/decode_drop_{8th,32nd,half}_cpu.json``)."""


def decode_positions(task: Task) -> int | None:
    """How far greedy decoding runs a ``task``'s predictions scored by their answer: a scratchpad's to
    :data:`SCRATCHPAD_POSITIONS`, one in the authors' words without a scratchpad to :data:`PLAIN_POSITIONS`;
    None where a prediction is scored token for token, decided at the gold's length."""
    if task.answer_reader() is None:
        return None
    return SCRATCHPAD_POSITIONS if task.scratchpad else PLAIN_POSITIONS


@dataclass
class EvalResult:
    """Per-example outcomes; ``by_length`` aggregates them into the paper's buckets."""

    lengths: list[int]
    correct: list[bool]
    predictions: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct) if self.correct else float("nan")

    def by_length(self) -> dict[int, tuple[int, int]]:
        """length -> (examples, correct)."""
        table: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for length, ok in zip(self.lengths, self.correct):
            table[length][0] += 1
            table[length][1] += int(ok)
        return {length: (n, k) for length, (n, k) in sorted(table.items())}


@torch.no_grad()
def greedy_decode(
    model: TransformerLensModel,
    prompts: torch.Tensor,
    max_new: int,
    eos_id: int,
    pad_id: int,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """[batch, prompt] (equal lengths) -> [batch, <= max_new] generated ids, ``pad_id`` after <eos>.
    ``generator`` draws the positions of a model with ``random_positions``. Rows that have ended leave the batch
    (and the cache) once they are :data:`DROP_ENDED` of it: the rows left compute what they would have, up
    to the rounding of a narrower batch's matrix products."""
    batch, length = prompts.shape
    if length + max_new - 1 > model.cfg.n_ctx:
        raise ProbeError(
            f"decoding needs {length + max_new - 1} positions but the model's context is n_ctx={model.cfg.n_ctx}"
        )
    device = prompts.device
    # Randomized positions are drawn at test time too (Ruoss et al. 2023), once for the whole decode
    plan = model.sample_positions(length + max_new, generator) if model.config.random_positions else None
    at = (lambda n: plan[:n]) if plan is not None else (lambda n: None)
    cache = model.key_value_cache(batch, length + max_new) if use_cache else None
    mask = torch.ones(batch, length, dtype=torch.long, device=device)
    logits = (
        model(prompts, past_kv_cache=cache, attention_mask=mask, positions=at(length))
        if use_cache
        else model(prompts, positions=at(length))
    )
    sequence = prompts
    generated = torch.full((batch, max_new), pad_id, dtype=torch.long, device=device)
    live = torch.arange(batch, device=device)  # [rows] the batch rows still decoded
    finished = torch.zeros(batch, dtype=torch.bool, device=device)  # [rows]
    one = torch.ones(batch, 1, dtype=torch.long, device=device)  # [rows, 1] a step's attention mask
    step = -1
    for step in range(max_new):
        token = logits[:, -1].argmax(-1)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        generated[live, step] = token
        finished |= token == eos_id
        ended = int(finished.sum())
        if step == max_new - 1 or ended == live.numel():
            break
        if ended >= DROP_ENDED * live.numel():
            kept = (~finished).nonzero().squeeze(1)  # [rows left]
            live, token, finished, sequence, one = live[kept], token[kept], finished[kept], sequence[kept], one[kept]
            if cache is not None:
                cache.keep(kept)
        if use_cache:
            logits = model(token[:, None], past_kv_cache=cache, attention_mask=one, positions=at(length + step + 1))
        else:
            sequence = torch.cat([sequence, token[:, None]], dim=1)
            logits = model(sequence, positions=at(sequence.size(1)))
    return generated[:, : step + 1]


def evaluate_examples(
    model: TransformerLensModel,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    use_cache: bool = True,
    keep_predictions: bool = False,
    answer_of: Callable[[str], Hashable | None] | None = None,
    decode_to: int | None = SCRATCHPAD_POSITIONS,
    precision: str | None = None,
    on_scored: Callable[[int], None] | None = None,
) -> EvalResult:
    """Greedy exact match of ``model`` on ``examples`` (same order in the result); with ``answer_of``
    (:meth:`probe.tasks.base.Task.answer_reader`) a prediction is right when it reads as the gold answer, an
    unended one decoded on to ``decode_to`` positions, prompt included (:func:`decode_positions`; None: not
    decoded past the gold's length).
    ``precision``: the model's training precision, which :func:`scoring_precision` reads. ``on_scored`` hears
    how many examples are scored after each batch: a scratchpad's can take minutes, decoded on."""
    device = torch.device(device)
    model.eval()
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    answers = [answer_of(e.target) for e in examples] if answer_of else []
    correct = [False] * len(examples)
    predictions = [""] * len(examples)
    generator = torch.Generator().manual_seed(0)  # randomized positions: the same draws on every evaluation
    scored = 0
    with scoring_numerics(device, precision):
        for chunk, longest in decoding_batches(prompts, targets, batch_size):
            batch = torch.tensor([prompts[i] for i in chunk], device=device)
            out = greedy_decode(model, batch, longest, tokenizer.eos_id, tokenizer.pad_id, use_cache, generator)
            rows = out.tolist()
            if answer_of and decode_to:
                rows = _decoded_on(model, batch, rows, tokenizer, use_cache, generator, decode_to)
            for row, i in enumerate(chunk):
                ids = rows[row]
                correct[i] = is_correct(ids, targets[i], tokenizer, answer_of, answers[i] if answer_of else None)
                if keep_predictions:
                    predictions[i] = prediction(ids, tokenizer)
            scored += len(chunk)
            if on_scored is not None:
                on_scored(scored)
    return EvalResult([e.length for e in examples], correct, predictions if keep_predictions else [])


def _decoded_on(
    model,
    prompts: torch.Tensor,
    rows: list[list[int]],
    tokenizer: Tokenizer,
    use_cache: bool,
    generator,
    decode_to: int = SCRATCHPAD_POSITIONS,
) -> list[list[int]]:
    """``rows`` (generated ids per prompt of ``prompts`` [batch, prompt]), those without ``<eos>`` decoded on to
    ``decode_to`` positions (the model's context, if shorter), as one batch, from where they stopped: each
    prompt and what it generated read in one pass, then a token a step. (Decoding them again from their prompts
    re-derived the tokens they had, most of a rerun's steps.) A model that draws its positions decodes them again
    from their prompts, so that one draw covers each row's whole decode."""
    cut = [k for k, ids in enumerate(rows) if tokenizer.eos_id not in ids]
    budget = min(decode_to, model.cfg.n_ctx + 1) - prompts.size(1)
    done = max((len(rows[k]) for k in cut), default=budget)  # unended rows ran every step the batch ran
    if done >= budget:
        return rows
    eos, pad = tokenizer.eos_id, tokenizer.pad_id
    if model.config.random_positions:
        again = greedy_decode(model, prompts[cut], budget, eos, pad, use_cache, generator).tolist()
        longer = dict(zip(cut, again))
    else:
        seen = torch.cat([prompts[cut], torch.tensor([rows[k] for k in cut], device=prompts.device)], dim=1)
        more = greedy_decode(model, seen, budget - done, eos, pad, use_cache, generator).tolist()
        longer = {k: rows[k] + tail for k, tail in zip(cut, more)}
    return [longer.get(k, ids) for k, ids in enumerate(rows)]


def prediction(ids: Sequence[int], tokenizer: Tokenizer) -> str:
    """The text of generated ``ids`` up to their first ``<eos>`` (all of them where there is none)."""
    ids = list(ids)
    end = ids.index(tokenizer.eos_id) if tokenizer.eos_id in ids else len(ids)
    return tokenizer.decode(ids[:end])


def is_correct(
    ids: Sequence[int],
    target: Sequence[int],
    tokenizer: Tokenizer,
    answer_of: Callable[[str], Hashable | None] | None = None,
    answer: Hashable | None = None,
) -> bool:
    """Whether generated ``ids`` score: token for token the ``target`` through its ``<eos>``, or, with
    ``answer_of``, the answer it reads from their :func:`prediction` is the gold ``answer``."""
    if answer_of is None:
        return list(ids[: len(target)]) == list(target)
    read = answer_of(prediction(ids, tokenizer))
    return read is not None and read == answer


def decoding_batches(
    prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], batch_size: int
) -> list[tuple[list[int], int]]:
    """The batches greedy decoding scores, as (example indices, new tokens): the examples grouped by prompt
    length (one batch, one prompt length: no padding before the answer), cut into ``batch_size``, each decoded
    to its longest target."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, prompt in enumerate(prompts):
        groups[len(prompt)].append(i)
    batches = []
    for indices in groups.values():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batches.append((chunk, max(len(targets[i]) for i in chunk)))
    return batches


TEACHER_FORCED_BATCH = 256  # examples per forward pass of a teacher-forced score (what a price counts in)


@torch.no_grad()
def teacher_forced_exact_match(
    model: TransformerLensModel,
    data: EncodedSet,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = TEACHER_FORCED_BATCH,
    precision: str | None = None,
) -> list[bool]:
    """Per example, whether the argmax after every prefix of the gold sequence is the next gold target
    token (through ``<eos>``): one forward pass per batch.

    This is greedy decoding's exact match: greedy decoding reproduces the target and its ``<eos>``
    exactly when each argmax given the gold prefix is the gold token, since up to the first miss the
    two feed the model the same prefix (the two differ only where an argmax is a float tie, or by the
    rounding of a batched pass against a cached one). So checkpoint selection can score the whole
    validation set every few hundred steps at the cost of a forward pass. ``precision``: the model's training
    precision, which :func:`scoring_precision` reads.
    """
    device = torch.device(device)
    model.eval()
    correct = [False] * len(data)
    for index in length_batches(data.lengths, batch_size):
        tokens, mask = data.batch(index)  # [batch, pos], [batch, pos - 1]
        tokens, mask = tokens.to(device), mask.to(device)
        with scoring_numerics(device, precision):
            predicted = model(tokens)[:, :-1].argmax(-1)  # [batch, pos - 1]
        hits = (predicted == tokens[:, 1:]) | ~mask
        for i, hit in zip(index.tolist(), hits.all(dim=1).tolist()):
            correct[i] = hit
    return correct


def length_batches(lengths: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """The examples' indices in batches of ``batch_size``, shortest first (ties in their order). A batch is
    padded to its longest example, so a random order pads most batches to nearly the longest of all: sorted,
    an IID validation set of copy is 1.4x fewer tokens, PCFG's 1.9x."""
    return list(torch.argsort(lengths, stable=True).split(batch_size))


def teacher_forced_examples(
    model: TransformerLensModel,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    precision: str | None = None,
) -> EvalResult:
    """:func:`evaluate_examples`' exact match (not ``answer_of``'s) in one teacher-forced pass per
    batch (:func:`teacher_forced_exact_match`): a study's test split in seconds where decoding token
    by token takes minutes."""
    data = encode(examples, tokenizer)
    correct = teacher_forced_exact_match(model, data, device=device, batch_size=batch_size, precision=precision)
    return EvalResult([e.length for e in examples], correct)
