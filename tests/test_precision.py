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


def test_a_sweep_measures_each_precision_and_says_which(tmp_path, monkeypatch):
    """bf16 and float32 steps cost different times: the estimate measures each once, and the dry run
    names the precision beside the shape."""
    from probe import sweep
    from probe.sweep import cost as cost_module
    from probe.sweep.console import _shape

    measured = []
    monkeypatch.setattr(
        cost_module,
        "measure_tokens_per_second",
        lambda run, *args: (
            measured.append(run.config.precision) or (2000.0 if run.config.precision == "bf16" else 1000.0)
        ),
    )
    grid = {"task": "reverse", "pe": ["nope"], "seed": [0, 1], "steps": 40, "batch_size": 16, "model": SMALL}
    runs = [
        run
        for precision in ("auto", "bf16")
        for run in sweep.expand_grid({**grid, "precision": precision}, tmp_path / precision)
    ]
    cost = sweep.estimate_cost(runs)
    assert measured == ["auto", "bf16"]  # once per precision, not once per run
    assert cost["seconds"][2] == pytest.approx(cost["seconds"][0] / 2)
    shapes = sorted(_shape(key) for key in cost["tokens_per_second"])
    assert shapes == ["tiny d_head=16 d_mlp=64 d_model=32 n_heads=2 n_layers=1" + tail for tail in ("", " bf16")]
