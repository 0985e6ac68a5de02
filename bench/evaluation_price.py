"""The price of the evaluation after training against the evaluation itself, teacher-forced and decoded.

    python bench/evaluation_price.py                          # Section 6's addition: none, C and full formats
    python bench/evaluation_price.py --formats full --n 400

For each format, a NoPE run of the Section 6 study (`tiny`, the authors' protocol) trains two steps in a scratch
folder (its weights barely trained: an untrained model decodes each batch to its longest target, as a trained one
does), then ``evaluate_run`` scores it on ``--n`` test and ``--n / 2`` held-out examples, on one thread, timed; the
price (:func:`probe.studies.sweep.cost.evaluation_work`, its seconds at the forward speed and decoding step measured
by :func:`~probe.studies.sweep.cost.measure_selection_tokens_per_second` and
:func:`~probe.studies.sweep.cost.measure_decoding_step`) is set beside it. Writes
bench/results/evaluation_price_cpu.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402

from probe.analysis.evaluation import evaluate_run  # noqa: E402
from probe.models.checkpoint import read_checkpoint_config  # noqa: E402
from probe.runs.folders import Run  # noqa: E402
from probe.studies import reproduce  # noqa: E402
from probe.studies.sweep.cost import (  # noqa: E402
    evaluation_work,
    measure_decoding_step,
    measure_selection_tokens_per_second,
)
from probe.training.bookkeeping import train_run  # noqa: E402


def compare(scratchpad: str, n: int, root: Path) -> dict:
    """One format's evaluation, timed, and its price."""
    runs = reproduce.plan("section6", root / scratchpad, seeds=1, tasks=["addition"])
    run = next(
        r for r in runs if r.config.pe == "nope" and r.config.task_options.get("scratchpad", "none") == scratchpad
    )
    run = dataclasses.replace(
        run, eval_n=n, eval_valid=n // 2, config=dataclasses.replace(run.config, steps=2, eval_every=1)
    )
    train_run(run.config, run.path, torch.device("cpu"))
    started = time.perf_counter()
    evaluate_run(Run(run.path, read_checkpoint_config(run.path)), n_test=run.eval_n, n_valid=run.eval_valid)
    measured = time.perf_counter() - started
    work = evaluation_work(run)
    forward = measure_selection_tokens_per_second(run, "cpu", 1)
    step = measure_decoding_step(run, "cpu", 1) if work.decoded else None
    priced = work.seconds(forward, step)
    return {
        "examples": n + n // 2,
        "decoded_batches": len(work.decoded),
        "forced_tokens": work.forced_tokens,
        "forward_tokens_per_second": forward,
        "decoding_step_seconds": step,
        "measured_seconds": measured,
        "priced_seconds": priced,
        "measured_over_priced": measured / priced,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", nargs="+", default=["none", "C", "full"], help="addition's scratchpad formats")
    parser.add_argument("--n", type=int, default=200, help="test examples (and half as many held out)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for scratchpad in args.formats:
            rows[scratchpad] = row = compare(scratchpad, args.n, Path(scratch))
            print(
                f"addition {scratchpad}: measured {row['measured_seconds']:.1f} s, "
                f"priced {row['priced_seconds']:.1f} s ({row['measured_over_priced']:.2f}x)",
                flush=True,
            )
    what = "the evaluation after training, priced and measured"
    write_result("evaluation_price", what, load, threads=1, n_test=args.n, formats=rows)


if __name__ == "__main__":
    main()
