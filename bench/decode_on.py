"""A scratchpad's unended rows decoded on from where they stopped, against decoded again from their prompts.

    python bench/decode_on.py RUN [RUN ...]                  # run folders (globs welcome)
    python bench/decode_on.py '/work/runs/section6/runs/addition+scratchpad=full/*/seed0' --n-test 200

``evaluate_examples`` decodes a batch to its longest gold target + 1; rows scored by their answer with no
``<eos>`` by then go on to the authors' 1,500 positions (:func:`probe.tasks.decoding._decoded_on`). They used to
be decoded again from their prompts, every token they had re-derived a step at a time; now their prompt and
what they generated are read in one pass and decoding goes on from there. Per run (:mod:`decoding_ways`: the
evaluation's examples, timed side by side), each batch is decoded to its gold's budget, untimed, then its
unended rows on both ways; counted: those rows, the rows whose ids differ at the end and the verdicts that
differ. Writes bench/results/decode_on_cpu.json (``--name``: another stem).
"""

from __future__ import annotations

import decoding_ways
from decoding_ways import Batch

from probe.tasks.decoding import SCRATCHPAD_POSITIONS, _decoded_on, greedy_decode


def again_from_prompts(batch: Batch) -> list[list[int]]:
    """The unended of the batch's rows decoded again from their prompts to the authors' budget (the way before)."""
    model, rows, eos, pad = batch.model, batch.short, batch.tokenizer.eos_id, batch.tokenizer.pad_id
    cut = [k for k, ids in enumerate(rows) if eos not in ids]
    budget = min(SCRATCHPAD_POSITIONS, model.cfg.n_ctx + 1) - batch.prompts.size(1)
    if not cut or budget <= len(rows[cut[0]]):
        return rows
    again = dict(zip(cut, greedy_decode(model, batch.prompts[cut], budget, eos, pad).tolist()))
    return [again.get(k, ids) for k, ids in enumerate(rows)]


def decoded_on(batch: Batch) -> list[list[int]]:
    """The unended rows decoded on from where they stopped (the way now)."""
    return _decoded_on(batch.model, batch.prompts, batch.short, batch.tokenizer, True, None)


def unended(batch: Batch) -> dict[str, int]:
    return {"unended_at_the_golds_budget": sum(batch.tokenizer.eos_id not in ids for ids in batch.short)}


if __name__ == "__main__":
    decoding_ways.main(
        __doc__,
        "decode_on",
        "a scratchpad's rows unended at the gold's budget decoded on from where they stopped vs again from prompts",
        {"again_from_prompts": again_from_prompts, "decoded_on": decoded_on},
        n_test=200,
        counted=unended,
        answered=True,
    )
