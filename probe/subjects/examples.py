"""A task's inputs: up to ``n_per_bucket`` examples of every length bucket λ, kept to those that
fit a model's context.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probe.errors import ProbeError
from probe.subjects.run_info import Lengths, describe_run, is_code_run, training_context
from probe.tasks import Example, Task, Tokenizer
from probe.tasks import get as get_task

TRAINED_FROM = 200  # IID validation examples whose longest sequence stands for the longest trained on


def task_of(config: Mapping[str, Any]) -> tuple[Task, Tokenizer]:
    task, tokenizer, _ = describe_run(config)
    return get_task(task["name"], **task.get("options", {})), Tokenizer.from_dict(tokenizer)


def trained_length(config: Mapping[str, Any]) -> int:
    """L, the longest sequence a run was trained on, in tokens: a code run's training context; a task run's
    longest sequence among :data:`TRAINED_FROM` IID validation examples (drawn from its training lengths)."""
    if is_code_run(config):
        return training_context(config)
    task, tokenizer = task_of(config)
    return max(len(tokenizer.encode_example(e)[0]) for e in task.examples("valid", n=TRAINED_FROM, seed=0))


@dataclass(frozen=True)
class Bucket:
    """Examples of one length bucket λ, and where they were drawn from."""

    length: int
    seen: bool
    split: str
    examples: tuple[Example, ...]


def sample_buckets(task: Task, n_per_bucket: int = 10, seed: int = 0, lengths: Lengths = "all") -> list[Bucket]:
    """Up to ``n_per_bucket`` examples of every length bucket of the test split, in length order.

    Where the test split has no seen lengths (SCAN, PCFG: their test side is all unseen), the
    seen buckets come from the valid split (IID held-out examples). ``lengths`` keeps all buckets,
    or only the seen or unseen ones. Deterministic given ``seed``.
    """
    if n_per_bucket < 1:
        raise ProbeError(f"--n-per-bucket must be at least 1, got {n_per_bucket}")
    if lengths not in ("all", "seen", "unseen"):
        raise ProbeError(f"unknown lengths {lengths!r}; accepted: all, seen, unseen")
    pools: dict[int, tuple[str, list[Example]]] = {}
    for example in task.examples("test", seed=seed):
        pools.setdefault(example.length, ("test", []))[1].append(example)
    if lengths != "unseen" and not any(task.is_seen(length) for length in pools):
        for example in task.examples("valid", seed=seed):
            pools.setdefault(example.length, ("valid", []))[1].append(example)
    buckets = []
    for length in sorted(pools):
        seen = task.is_seen(length)
        if (lengths == "seen" and not seen) or (lengths == "unseen" and seen):
            continue
        split, pool = pools[length]
        rng = random.Random(f"buckets/{task.name}/{length}/{seed}")
        chosen = rng.sample(pool, min(n_per_bucket, len(pool)))
        buckets.append(Bucket(length, seen, split, tuple(chosen)))
    if not buckets:
        raise ProbeError(f"{task.name} has no {lengths} length buckets to sample")
    return buckets


def fitting_examples(buckets: list[Bucket], tokenizer: Tokenizer, n_ctx: int) -> tuple[list[Bucket], int]:
    """Drop examples longer than the model's context; returns the buckets left and how many went."""
    kept, skipped = [], 0
    for bucket in buckets:
        fits = tuple(e for e in bucket.examples if len(tokenizer.encode_example(e)[0]) <= n_ctx)
        skipped += len(bucket.examples) - len(fits)
        if fits:
            kept.append(Bucket(bucket.length, bucket.seen, bucket.split, fits))
    if not kept:
        raise ProbeError(f"no sampled example fits the model's context (n_ctx={n_ctx})")
    return kept, skipped
