"""How `probe extrapolate` scores a task run: an example's score does not depend on the batch it is read in,
even where the PE reads the pass's length (dynamic NTK)."""

from __future__ import annotations

import torch

from probe.extrapolation.tasks import score_examples
from probe.models import build_model
from probe.tasks import Tokenizer, get
from probe.tasks.batches import encode


def test_dynamic_ntk_scores_an_example_as_it_would_alone():
    task = get("copy", train_length=4)
    tokenizer = Tokenizer.for_task(task)
    examples = task.examples("test", n=24, seed=0)
    assert len({e.length for e in examples}) > 3
    model = build_model(
        "rotary",
        vocab_size=len(tokenizer),
        n_ctx=128,
        pe_options={"scaling": "dynamic", "factor": 2.0, "original_length": 8},
    )
    data = encode(examples, tokenizer)
    _, together = score_examples(model, data, torch.device("cpu"), batch_size=64)
    _, alone = score_examples(model, data, torch.device("cpu"), batch_size=1)
    assert torch.allclose(together, alone, rtol=0, atol=1e-6)
