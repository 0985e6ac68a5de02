"""Nothing users saved is lost: checkpoints written by probe on TransformerLens 3.x load with
today's code and give the logits they gave then (``tests/fixtures/make_legacy_checkpoints.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from probe.models import load_checkpoint
from probe.runs.folders import load_run

ROOT = Path(__file__).resolve().parent / "fixtures" / "legacy_checkpoints"
LOGITS = load_file(str(ROOT / "logits.safetensors"))


@pytest.mark.parametrize("run", sorted(LOGITS))
def test_a_checkpoint_from_transformer_lens_3_gives_its_logits(run):
    tokens = torch.tensor(json.loads((ROOT / "tokens.json").read_text()))
    model = load_checkpoint(ROOT / run)
    with torch.no_grad():  # as the fixture's logits were taken
        logits = model(tokens)
    # to float32 rounding, not to the bit: the same code at the commit that wrote the fixture gives up to
    # 1.2e-6 off on this machine's CPU (its kernels round the sums otherwise); a wrong weight, layout or
    # norm is orders of magnitude more
    torch.testing.assert_close(logits, LOGITS[run], rtol=0, atol=4e-6)


def test_a_legacy_run_keeps_its_tokenizer():
    """Runs from before runs carried a tokenizer file: load_run rebuilds it from the task's vocabulary."""
    assert load_checkpoint(ROOT / "t5").tokenizer is None
    model = load_run(ROOT / "t5")
    assert model.to_str_tokens("walk twice <sep>") == ["<bos>", "walk", "twice", "<sep>"]
