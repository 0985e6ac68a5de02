"""Training precision (``--precision``): float32, bf16 autocast, or auto (bf16 on CUDA only); what a
run trains in is a setting of the run, so resuming or reusing it in another precision is refused."""

from __future__ import annotations

import pytest
import torch

from probe.cli import main
from probe.errors import ProbeError
from probe.training.config import TrainConfig, settings_differ
from probe.training.loop import Trainer

CPU = torch.device("cpu")
SMALL = dict(n_layers=1, d_model=32, n_heads=2, d_head=16, d_mlp=64)


def forward_dtypes(precision: str, tmp_path) -> set[torch.dtype]:
    """Dtypes of the first MLP's pre-activation over two training steps: a linear layer's output is
    bf16 under autocast and float32 without it."""
    config = TrainConfig(task="copy", pe="nope", steps=2, batch_size=8, precision=precision, model=SMALL)
    trainer = Trainer(config, tmp_path, CPU)
    seen: set[torch.dtype] = set()
    trainer.model.blocks[0].mlp.hook_pre.add_hook(lambda x, hook: seen.add(x.dtype))
    loss, _ = trainer.train()
    assert loss == loss  # finite: a bf16 step trains
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # autocast keeps float32 weights
    return seen


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("float32", torch.float32)])
def test_training_runs_the_forward_pass_in_the_precision_asked(tmp_path, precision, dtype):
    assert forward_dtypes(precision, tmp_path) == {dtype}


def test_auto_is_float32_on_a_cpu_and_bf16_on_cuda(tmp_path):
    assert forward_dtypes("auto", tmp_path) == {torch.float32}
    config = TrainConfig(precision="auto")
    assert config.autocast_dtype("cuda") is torch.bfloat16 and config.autocast_dtype("cpu") is None
    assert TrainConfig(precision="float32").autocast_dtype("cuda") is None


def test_an_unknown_precision_is_one_line():
    with pytest.raises(ProbeError, match="unknown precision 'fp8'"):
        TrainConfig(precision="fp8")


def test_runs_saved_before_precision_was_a_setting_are_auto():
    stored = TrainConfig().to_dict()
    del stored["precision"]
    assert not settings_differ(stored, TrainConfig(precision="auto").to_dict())
    assert settings_differ(stored, TrainConfig(precision="bf16").to_dict()) == ["precision 'auto', asked 'bf16'"]


def test_the_cli_refuses_an_unknown_precision(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--precision", "half"])
    assert exit_.value.code == 2
    assert "invalid choice: 'half'" in capsys.readouterr().err
