"""Training precision (``--precision``): float32, bf16 autocast, or auto (bf16 on CUDA, and on a CPU at
the presets of ``probe.presets.CPU_BF16``); what a run trains in is a setting of the run, so resuming
or reusing it in another precision is refused, and a run keeps what ``auto`` chose when it started."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
from helpers import tiny_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import probe.device
import probe.tasks.decoding
import probe.training.train_config as training_config
from probe.analysis.evaluation import evaluate_run
from probe.cli import main
from probe.corpus import CODE_TASK
from probe.errors import ProbeError
from probe.precision import BF16, FLOAT32, TF32
from probe.presets import CPU_BF16
from probe.runs.folders import Run
from probe.tasks.decoding import scoring_numerics, scoring_precision
from probe.tasks.decoding import scoring_numerics as decoding_scoring_numerics
from probe.training.bookkeeping import train_run
from probe.training.loop import STATE, Trainer
from probe.training.stacked import train_alone, train_stack
from probe.training.train_config import TrainConfig, settings_differ

CPU = torch.device("cpu")
SMALL = tiny_model(1)


def forward_dtypes(precision: str, path, preset: str = "tiny", stop_at: int | None = None) -> set[torch.dtype]:
    """Dtypes of the first MLP's pre-activation over a 4-step run's training steps (resumed from its
    state in ``path`` if there is one; stopped as by Ctrl-C after step ``stop_at``): a linear layer's
    output is bf16 under autocast and float32 without it."""
    config = TrainConfig(
        task="copy", pe="nope", preset=preset, steps=4, batch_size=8, log_every=1, precision=precision, model=SMALL
    )
    path.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config, path, CPU)
    trainer.load_state()
    seen: set[torch.dtype] = set()
    trainer.model.blocks[0].mlp.hook_pre.add_hook(lambda x, hook: seen.add(x.dtype))

    def stop(step: int, loss: float, tokens_per_s: float) -> None:
        if step == stop_at:
            raise KeyboardInterrupt

    try:
        loss, _ = train_alone(trainer, stop)
        assert loss == loss  # finite: a bf16 step trains
    except KeyboardInterrupt:
        assert (path / STATE).is_file()
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # autocast keeps float32 weights
    return seen


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("float32", torch.float32)])
def test_training_runs_the_forward_pass_in_the_precision_asked(tmp_path, precision, dtype):
    assert forward_dtypes(precision, tmp_path / "run") == {dtype}


@pytest.fixture(autouse=True)
def cpu_with_bf16(monkeypatch):
    """The rule at the presets measured for it, on a CPU with bf16 arithmetic (as the EPYC it was measured
    on); the test of a CPU without it says so."""
    monkeypatch.setattr(probe.device, "cpu_computes_bf16", lambda: True)


def test_auto_stays_float32_on_a_cpu_that_only_emulates_bf16(monkeypatch):
    """Where the CPU has no bf16 arithmetic, a bf16 step is slower than float32's: ``auto`` keeps float32."""
    monkeypatch.setattr(probe.device, "cpu_computes_bf16", lambda: False)
    config = TrainConfig(preset="small", precision="auto")
    assert config.numerics("cpu").autocast_dtype is None and config.numerics("cuda").autocast_dtype is torch.bfloat16
    assert TrainConfig(preset="small", precision="bf16").numerics("cpu").autocast_dtype is torch.bfloat16  # asked: kept


@pytest.mark.parametrize("avx512_bf16, amx, native", [(True, False, True), (False, True, True), (False, False, False)])
def test_a_cpu_computes_bf16_where_torch_finds_avx512_bf16_or_amx(monkeypatch, avx512_bf16, amx, native):
    monkeypatch.undo()  # the real check, over torch.cpu's answers
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert probe.device.cpu_computes_bf16() is native


def test_auto_is_bf16_on_cuda_and_on_a_cpu_only_at_the_presets_measured_for_it(tmp_path):
    assert forward_dtypes("auto", tmp_path / "tiny") == {torch.float32}
    assert forward_dtypes("auto", tmp_path / "small", preset="small") == {torch.bfloat16}
    for preset in ("tiny", "small", "base"):
        config = TrainConfig(preset=preset, precision="auto")
        assert config.numerics("cuda").autocast_dtype is torch.bfloat16
        assert config.numerics("cpu").autocast_dtype is (torch.bfloat16 if preset in CPU_BF16 else None)
        assert TrainConfig(preset=preset, precision="float32").numerics("cuda").autocast_dtype is None
        assert TrainConfig(preset=preset, precision="bf16").numerics("cpu").autocast_dtype is torch.bfloat16
    assert CPU_BF16 == {"small"}  # tiny's default `probe train` and its 10-minute target stay float32
    code = TrainConfig(task=CODE_TASK, preset="small", precision="auto")
    assert code.numerics("cpu") is FLOAT32 and code.numerics("cuda") is BF16  # not measured


def test_a_resumed_auto_run_keeps_the_precision_it_started_with(tmp_path, monkeypatch):
    """A state records what ``auto`` chose; a later version choosing otherwise does not switch a run
    midway. States saved before the choice was recorded resume under the rule of their time."""
    assert forward_dtypes("auto", tmp_path / "run", preset="small", stop_at=2) == {torch.bfloat16}
    monkeypatch.setattr(training_config, "CPU_BF16", frozenset())  # a version that thinks otherwise
    assert forward_dtypes("auto", tmp_path / "run", preset="small") == {torch.bfloat16}
    assert forward_dtypes("auto", tmp_path / "fresh", preset="small") == {torch.float32}

    monkeypatch.setattr(training_config, "CPU_BF16", frozenset({"small"}))
    assert forward_dtypes("auto", tmp_path / "old", preset="small", stop_at=2) == {torch.bfloat16}
    state = tmp_path / "old" / STATE
    tensors = load_file(str(state))
    with safe_open(str(state), "pt") as handle:
        meta = json.loads(handle.metadata()["probe"])
    del meta["forward"]  # as written before the choice was recorded, when auto was float32 on a CPU
    save_file(tensors, str(state), metadata={"probe": json.dumps(meta)})
    assert forward_dtypes("auto", tmp_path / "old", preset="small") == {torch.float32}


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
    from probe.studies import sweep
    from probe.studies.sweep import cost as cost_module
    from probe.studies.sweep.console import _shape

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
    rows = f", rows ~{cost_module.row_class(cost_module.batch_geometry(runs[0])[1])}, vocabulary ~"
    rows += str(cost_module.row_class(cost_module.vocabulary_size(runs[0])))
    assert shapes == sorted(
        "tiny d_head=16 d_mlp=64 d_model=32 n_heads=2 n_layers=1" + t + rows + ", nope" for t in ("", " bf16")
    )


@pytest.mark.parametrize(
    ("device", "precision", "scored"),
    [
        ("cuda", "bf16", "bf16"),
        ("cuda", None, "bf16"),  # a run that recorded none: bf16 on a GPU, as before precision was recorded
        ("cuda", "float32", "float32"),  # a float32 run is scored in float32
        ("cuda", "tf32", "tf32"),  # and a run with TF32 products in them
        ("cpu", "bf16", "float32"),
        ("cpu", "float32", "float32"),
        ("cpu", "tf32", "float32"),  # a GPU's run scored on a CPU: float32, which has no TF32
    ],
)
def test_a_score_on_a_gpu_autocasts_unless_its_model_trained_in_float32_or_tf32(device, precision, scored):
    assert scoring_precision(torch.device(device), precision).name == scored


@pytest.mark.parametrize("precision", ["bf16", "float32"])
def test_every_score_of_a_run_is_asked_in_the_precision_it_trained_in(tmp_path, monkeypatch, precision):
    """Selection's passes, the held-out numbers at publishing (the selected and the last step's) and `probe eval`
    (teacher-forced and decoded) all name the run's precision to the scoring autocast, which decides by it on a
    GPU: a float32 run scored under bf16 reads its argmaxes through rounding it never trained with."""
    asked: list[tuple[str, str | None]] = []

    def recording(device, precision=None):
        asked.append((torch.device(device).type, precision))
        return decoding_scoring_numerics(device, precision)

    monkeypatch.setattr(probe.tasks.decoding, "scoring_numerics", recording)
    config = TrainConfig(
        task="copy", pe="nope", steps=4, batch_size=8, eval_every=2, eval_examples=4, precision=precision, model=SMALL
    )
    train_run(config, tmp_path / "run", CPU)
    selection_and_publishing = len(asked)
    assert selection_and_publishing >= 3  # two selection passes and at least one held-out decode
    run = Run(tmp_path / "run", json.loads((tmp_path / "run" / "config.json").read_text()))
    evaluate_run(run, n_test=4, n_valid=4)
    assert len(asked) > selection_and_publishing
    assert asked == [("cpu", precision)] * len(asked)


def test_tf32_products_are_on_only_while_entered_and_restored_after_an_error():
    assert torch.backends.cuda.matmul.allow_tf32 is False  # torch's default: float32 products in float32
    with TF32.products():
        assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 is False
    with pytest.raises(RuntimeError), TF32.scoring("cpu"):
        assert torch.backends.cuda.matmul.allow_tf32 is True
        raise RuntimeError
    assert torch.backends.cuda.matmul.allow_tf32 is False
    with FLOAT32.products(), BF16.products():
        assert torch.backends.cuda.matmul.allow_tf32 is False


def test_tf32_keeps_activations_float32_where_bf16_autocasts_them():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    for precision, dtype in ((TF32, torch.float32), (FLOAT32, torch.float32), (BF16, torch.bfloat16)):
        with precision.scoring("cpu"):
            assert (x @ w).dtype is dtype


def tf32_reader(trainer: Trainer, seen: list[tuple[str, bool]], name: str) -> None:
    """Record, from inside the first MLP's forward and backward passes, whether TF32 products are on."""

    def reads(direction: str) -> Callable[[torch.Tensor, object], None]:
        return lambda tensor, hook: seen.append((f"{name} {direction}", torch.backends.cuda.matmul.allow_tf32))

    trainer.model.blocks[0].mlp.hook_pre.add_hook(reads("forward"))
    trainer.model.blocks[0].mlp.hook_pre.add_hook(reads("backward"), dir="bwd")


def cpu_trainers(tmp_path, *names: str) -> list[Trainer]:
    config = TrainConfig(task="copy", pe="nope", steps=2, batch_size=8, log_every=1, precision="float32", model=SMALL)
    trainers = []
    for name in names:
        (tmp_path / name).mkdir()
        trainers.append(Trainer(config, tmp_path / name, CPU))
    return trainers


def test_a_tf32_step_rounds_its_forward_and_backward_products_alike(tmp_path):
    """TF32 is a process setting that autograd's backward reads when it runs: the step must hold it over the
    backward pass and the optimizer, not only the forward pass that autocast covers. Checked on a CPU (where the
    setting changes no arithmetic) by reading it from inside the forward and the backward passes."""
    (trainer,) = cpu_trainers(tmp_path, "run")
    trainer.numerics = TF32  # as a GPU run would train; a CPU run may not ask for it (below)
    seen: list[tuple[str, bool]] = []
    tf32_reader(trainer, seen, "run")
    train_alone(trainer)
    assert sorted(set(seen)) == [("run backward", True), ("run forward", True)]
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_a_tf32_run_stacked_with_a_float32_one_leaves_the_other_in_float32(tmp_path):
    tf32, plain = cpu_trainers(tmp_path, "tf32", "plain")
    tf32.numerics = TF32
    seen: list[tuple[str, bool]] = []
    tf32_reader(tf32, seen, "tf32")
    tf32_reader(plain, seen, "plain")
    train_stack([tf32, plain])
    assert sorted(set(seen)) == [
        ("plain backward", False),
        ("plain forward", False),
        ("tf32 backward", True),
        ("tf32 forward", True),
    ]


def test_a_tf32_run_is_scored_with_tf32_products_on_a_gpu_and_without_on_a_cpu():
    with scoring_numerics(torch.device("cuda"), "tf32"):  # no autocast to enter: this runs on a CPU too
        assert torch.backends.cuda.matmul.allow_tf32 is True
    with scoring_numerics(CPU, "tf32"):
        assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_a_state_in_a_precision_this_probe_does_not_know_is_one_line(tmp_path):
    forward_dtypes("float32", tmp_path / "run", stop_at=2)
    state = tmp_path / "run" / STATE
    tensors = load_file(str(state))
    with safe_open(str(state), "pt") as handle:
        meta = json.loads(handle.metadata()["probe"])
    save_file(tensors, str(state), metadata={"probe": json.dumps(meta | {"forward": "fp8"})})
    with pytest.raises(ProbeError, match="trained in precision 'fp8', which this probe does not know"):
        forward_dtypes("float32", tmp_path / "run")


def test_tf32_is_refused_on_a_cpu_in_one_line_before_anything_is_written(tmp_path, capsys):
    config = TrainConfig(task="copy", pe="nope", steps=2, batch_size=8, precision="tf32", model=SMALL)
    assert config.numerics("cuda") is TF32
    with pytest.raises(ProbeError, match="precision tf32 rounds a GPU's float32 products; on cpu train float32"):
        Trainer(config, tmp_path / "run", CPU)
    with pytest.raises(ProbeError, match="precision tf32"):
        train_run(config, tmp_path / "run", CPU)
    assert not (tmp_path / "run").exists()
    argv = ["train", "--task", "copy", "--pe", "nope", "--steps", "2", "--precision", "tf32", "--device", "cpu"]
    assert main([*argv, "--checkpoints", str(tmp_path / "ckpt")]) != 0
    err = capsys.readouterr().err
    assert "precision tf32" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*"))
