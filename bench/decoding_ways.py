"""Two ways of decoding a trained run's evaluation examples, timed side by side batch by batch, and the rows and
verdicts where they part: what ``decode_on.py`` and ``decode_drop.py`` share.

Per run, the examples are ``probe eval``'s (the first ``--n-valid`` held-out IID ones and ``--n-test`` of the test
split), cut into the batches ``evaluate_examples`` decodes (one prompt length a batch). Each way decodes every
batch, timed in process CPU time on one thread, which way goes first alternating batch by batch; the first way
is the one before, the second the one now, and the speed-up is the first's seconds over the second's.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from common import measure_runs, write_result

from probe.models.checkpoint import read_checkpoint_config
from probe.runs.folders import Run
from probe.subjects.resolve import resolve
from probe.tasks import Tokenizer, decoding
from probe.tasks import get as get_task


@dataclass
class Batch:
    """One decoding batch of a run's evaluation: its prompts [batch, prompt] (one length) and its longest gold."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    prompts: torch.Tensor
    longest: int
    answer_of: Callable | None

    @functools.cached_property
    def short(self) -> list[list[int]]:
        """The rows decoded to the gold's budget (the longest gold + 1), as ``evaluate_examples`` first decodes."""
        eos, pad = self.tokenizer.eos_id, self.tokenizer.pad_id
        return decoding.greedy_decode(self.model, self.prompts, self.longest, eos, pad).tolist()


Way = Callable[[Batch], list[list[int]]]


def compare(
    path: Path, n_test: int, n_valid: int, ways: dict[str, Way], counted: Callable[[Batch], dict] | None, answered: bool
):
    """The run's row: examples, rows and verdicts that differ between the two ``ways``, each way's seconds, the
    speed-up, and what ``counted`` says of each batch (untimed, before either way), summed. ``answered``: only a
    run whose predictions are scored by their answer (a scratchpad's) is measured."""
    model = resolve(Run(path, read_checkpoint_config(path))).load("cpu").model
    meta = model.metadata
    task = get_task(meta["task"]["name"], **meta["task"].get("options", {}))
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    answer_of = task.answer_reader()
    if answered and answer_of is None:
        sys.exit(f"{path}: its task is scored token for token; nothing is decoded on")
    examples = task.held_out(n_valid) + task.examples("test", n=n_test, seed=0)
    prompts = [tokenizer.encode_prompt(e.source) for e in examples]
    targets = [tokenizer.encode(e.target) + [tokenizer.eos_id] for e in examples]
    answers = [answer_of(e.target) if answer_of else None for e in examples]
    before, now = ways
    seconds = dict.fromkeys(ways, 0.0)
    counts: dict[str, int] = {}
    differ = verdicts = 0
    with torch.inference_mode():
        for b, (chunk, longest) in enumerate(decoding.decoding_batches(prompts, targets, 256)):
            batch = Batch(model, tokenizer, torch.tensor([prompts[i] for i in chunk]), longest, answer_of)
            for key, value in (counted(batch) if counted else {}).items():
                counts[key] = counts.get(key, 0) + value
            out = {}
            for way in sorted(ways, reverse=b % 2 == 1):  # which goes first alternates batch by batch
                start = time.process_time()
                out[way] = ways[way](batch)
                seconds[way] += time.process_time() - start
            differ += sum(a != c for a, c in zip(out[before], out[now]))
            verdicts += sum(
                decoding.is_correct(a, targets[i], tokenizer, answer_of, answers[i])
                != decoding.is_correct(c, targets[i], tokenizer, answer_of, answers[i])
                for a, c, i in zip(out[before], out[now], chunk)
            )
    return {
        "run": str(path),
        "examples": len(examples),
        **counts,
        "rows_that_differ": differ,
        "verdicts_that_differ": verdicts,
        **{f"seconds_{way}": seconds[way] for way in ways},
        "speedup": seconds[before] / seconds[now] if seconds[now] else None,
    }


def main(
    doc: str,
    name: str,
    what: str,
    ways: dict[str, Way] | Callable[[argparse.Namespace], dict[str, Way]],
    n_test: int,
    counted=None,
    answered=False,
    options: Sequence[tuple[str, dict]] = (),
    **fields,
) -> None:
    """The benchmark's command line (run folders, ``--n-test``, ``--n-valid``, ``--name``, and ``options``' flags,
    from which a callable ``ways`` builds the two ways): every run's row as it lands, then their sum, written to
    bench/results/<name>_cpu.json with ``fields`` and the options given."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (a glob is expanded)")
    parser.add_argument("--n-test", type=int, default=n_test, help=f"test examples per run (default {n_test})")
    parser.add_argument("--n-valid", type=int, default=100, help="held-out IID examples (default 100)")
    parser.add_argument("--name", default=name)
    own = [parser.add_argument(flag, **settings).dest for flag, settings in options]
    args = parser.parse_args()
    ways = ways(args) if callable(ways) else ways
    given = {dest: getattr(args, dest) for dest in own}
    rows, load = measure_runs(args.runs, lambda path: compare(path, args.n_test, args.n_valid, ways, counted, answered))
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in ("run", "speedup")}
    before, now = ways
    total["speedup"] = total[f"seconds_{before}"] / total[f"seconds_{now}"]
    print("all: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    write_result(
        args.name, what, load, n_test=args.n_test, n_valid=args.n_valid, **fields, **given, runs=rows, total=total
    )
