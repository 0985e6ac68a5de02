"""Greedy decoding that drops the rows that have ended, against decoding every row to the batch's end.

    python bench/decode_drop.py RUN [RUN ...]                  # run folders (globs welcome)
    python bench/decode_drop.py '/work/runs/section6/runs/lego+scratchpad=I+C+O+R/*/seed0' --n-test 400
    python bench/decode_drop.py RUN --drop 0.5 --name decode_drop_half     # another fraction than the default

A decoding step reads every cached key of every row, and a long scratchpad's cache is most of a step's work:
at ``tiny``, 156 rows at 1,500 positions read 240 MB a layer a step. A batch decodes to its longest gold (then
its unended rows on to 1,500 positions), so a row that ended early went on being computed, as padding, to the
batch's end. Now rows that have ended leave the batch and the cache once they are
:data:`probe.tasks.decoding.DROP_ENDED` of it (``--drop``: another fraction). Per run (:mod:`decoding_ways`: the
evaluation's examples, timed side by side), each decoding batch is scored both ways as ``evaluate_examples``
scores it (to the gold's budget, then a scratchpad's unended rows decoded on); counted: the rows whose ids
differ and the verdicts that differ (the rows left compute in a narrower batch: the same values up to its
matrix products' rounding). Writes bench/results/decode_drop_cpu.json (``--name``: another stem).
"""

from __future__ import annotations

import argparse

import decoding_ways
from decoding_ways import Batch

from probe.tasks import decoding

DROP_ENDED = decoding.DROP_ENDED


def fraction(text: str) -> float:
    """``--drop``: a fraction in (0, 1], or one clear line."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: not a fraction in (0, 1]")
    return value


def scored(batch: Batch, drop: float) -> list[list[int]]:
    """The batch's rows as ``evaluate_examples`` decodes them, ended rows dropped once they are ``drop`` of it."""
    decoding.DROP_ENDED = drop
    rows = decoding.greedy_decode(
        batch.model, batch.prompts, batch.longest, batch.tokenizer.eos_id, batch.tokenizer.pad_id
    ).tolist()
    if batch.answer_of is None:
        return rows
    return decoding._decoded_on(batch.model, batch.prompts, rows, batch.tokenizer, True, None)


if __name__ == "__main__":
    decoding_ways.main(
        __doc__,
        "decode_drop",
        "greedy decoding dropping the rows that ended (at --drop of a batch) vs every row to the batch's end",
        lambda args: {
            "every_row": lambda batch: scored(batch, float("inf")),
            "drop_ended": lambda batch: scored(batch, args.drop),
        },
        n_test=400,
        options=[("--drop", {"type": fraction, "default": DROP_ENDED, "help": f"the fraction (default {DROP_ENDED})"})],
    )
