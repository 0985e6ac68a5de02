"""A run that cannot go on fails alone, in one line, and never costs finished work: its own or the other runs'."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import reverse_config, tiny_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import probe.training.loop as loop
from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.runs.folders import run_dir
from probe.training.bookkeeping import train_run, train_stacked
from probe.training.loop import STATE
from probe.training.parallel import RunFailure, train_runs
from probe.training.sources import TaskSource

CPU = torch.device("cpu")


_config = reverse_config


def _same_weights(a, b) -> bool:
    ours, theirs = load_checkpoint(a).state_dict(), load_checkpoint(b).state_dict()
    return all(torch.equal(ours[k], theirs[k]) for k in ours)


def _interrupted(path, at: int = 12, **overrides) -> None:
    """A run stopped by Ctrl-C at step ``at``: its state kept to resume from."""

    def stop(step, loss, speed):
        if step == at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(_config(**overrides), path, CPU, on_step=stop)
    assert (path / STATE).is_file()


def _state_step(path) -> int:
    with safe_open(str(path / STATE), "pt") as handle:
        return json.loads(handle.metadata()["probe"])["step"]


def _rename_a_weight(path) -> None:
    """The state as another version of probe, which named a weight otherwise, would have written it."""
    with safe_open(str(path / STATE), "pt") as handle:
        meta = handle.metadata()
    tensors = load_file(str(path / STATE))
    name = next(k for k in tensors if k.startswith("model."))
    tensors["model.renamed_elsewhere"] = tensors.pop(name)
    save_file(tensors, str(path / STATE), metadata=meta)


def _other_settings(path) -> str:
    _interrupted(path, lr=2e-3)
    return "lr 0.002, asked 0.001"


def _truncated(path) -> str:
    _interrupted(path)
    (path / STATE).write_bytes((path / STATE).read_bytes()[:1000])
    return "cannot resume from"


def _another_version(path) -> str:
    _interrupted(path)
    _rename_a_weight(path)
    return "renamed_elsewhere"


@pytest.mark.parametrize("damage", [_other_settings, _truncated, _another_version])
def test_a_members_state_it_cannot_resume_from_is_its_own_error_and_the_others_train(tmp_path, damage):
    """Resuming one member of a stack can fail (its settings changed, its state is damaged or another
    version's): that member's result is the one line saying which and how to start over; the others train."""
    said = damage(tmp_path / "t5")
    results = train_stacked([(_config("nope"), tmp_path / "nope"), (_config("t5"), tmp_path / "t5")], CPU)
    assert results[0].status == "trained" and (tmp_path / "nope" / "config.json").is_file()
    assert isinstance(results[1], ProbeError), results[1]
    message = str(results[1])
    assert said in message and str(tmp_path / "t5" / STATE) in message and "--force" in message
    assert len(message.splitlines()) == 1


def test_one_runs_unresumable_state_does_not_stop_the_runs_after_it(tmp_path):
    """One after another (no stack, one job): the failed run is reported, the runs after it still train."""
    _another_version(tmp_path / "t5")
    runs = [(_config("t5"), tmp_path / "t5"), (_config("nope"), tmp_path / "nope")]
    results = train_runs(runs, CPU, stack=False, jobs=1)
    assert isinstance(results[0], RunFailure) and "--force" in results[0].error
    assert results[1].status == "trained"


def test_probe_train_reports_a_state_from_another_version_in_one_line_and_trains_the_rest(tmp_path, capsys):
    config = _config("t5", precision="float32")
    path = run_dir(str(tmp_path), config.task, config.pe, config.seed, config.task_options, config.pe_options)
    _interrupted(path, precision="float32")
    _rename_a_weight(path)
    model = [f"-m{k}={v}" for k, v in tiny_model(1).items()]
    argv = ["train", "--task", "reverse", "-o", "train_length=4", "--pe", "t5", "--pe", "nope", "--steps", "24"]
    argv += ["--batch-size", "8", *model, "--checkpoints", str(tmp_path), "--jobs", "1", "--no-eval"]
    code = main([*argv, "--precision", "float32", "--checkpoint-every", "10"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.out + captured.err
    assert "renamed_elsewhere" in captured.out and (path.parent.parent / "nope" / "seed0" / "config.json").is_file()


def test_a_finished_runs_damaged_config_is_one_line_and_its_weights_stay(tmp_path):
    """A config.json that cannot be read is never a run to train again over its weights; --force retrains."""
    train_run(_config(steps=5), tmp_path / "r", CPU)
    weights = (tmp_path / "r" / "model.safetensors").read_bytes()
    config = tmp_path / "r" / "config.json"
    config.write_text(config.read_text()[:200])
    with pytest.raises(ProbeError, match="config.json.*--force") as raised:
        train_run(_config(steps=6), tmp_path / "r", CPU)
    assert str(config) in str(raised.value) and len(str(raised.value).splitlines()) == 1
    assert (tmp_path / "r" / "model.safetensors").read_bytes() == weights
    assert train_run(_config(steps=6), tmp_path / "r", CPU, force=True).status == "trained"


class _InfiniteGradient(torch.autograd.Function):
    """The loss as it is, its gradient infinite: a step with a finite loss whose update spoils the weights."""

    @staticmethod
    def forward(ctx, loss: torch.Tensor) -> torch.Tensor:
        return loss.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")


@pytest.mark.parametrize(("spoilt", "kept"), [(20, 10), (24, 20)], ids=["at-a-periodic-save", "at-the-last-step"])
def test_weights_gone_non_finite_are_never_kept_as_the_last_good_state(tmp_path, monkeypatch, spoilt, kept):
    """Step ``spoilt`` has a finite loss and makes the weights non-finite: the run stops there, naming the
    step and the state kept (step ``kept``, finite), nothing is published, and the other member trains."""
    real, calls = loop.target_loss, {"n": 0}

    def poisoned(model, *batch):
        loss = real(model, *batch)
        if model.config.pe == "t5":
            calls["n"] += 1
            return _InfiniteGradient.apply(loss) if calls["n"] == spoilt else loss
        return loss

    monkeypatch.setattr(loop, "target_loss", poisoned)
    results = train_stacked([(_config(pe), tmp_path / pe) for pe in ("nope", "t5")], CPU)
    assert results[0].status == "trained" and isinstance(results[1], ProbeError), results[1]
    assert f"step {spoilt}" in str(results[1]) and f"(step {kept})" in str(results[1])
    assert not (tmp_path / "t5" / "config.json").exists() and _state_step(tmp_path / "t5") == kept
    state = load_file(str(tmp_path / "t5" / STATE))
    assert all(torch.isfinite(v).all() for k, v in state.items() if k.startswith("model."))


def _strict_json(text: str) -> dict:
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_run_stopped_at_its_last_step_publishes_its_last_loss(tmp_path):
    """Ctrl-C while the last step is logged or evaluated: the resumed run publishes that step's loss, in
    strict JSON."""
    options = dict(protocol="authors", eval_every=6)
    whole = train_run(_config(**options), tmp_path / "whole", CPU)
    _interrupted(tmp_path / "split", at=24, **options)
    resumed = train_run(_config(**options), tmp_path / "split", CPU)
    stored = _strict_json((tmp_path / "split" / "config.json").read_text())
    assert resumed.final_loss == whole.final_loss == stored["metrics"]["final_loss"]
    assert _same_weights(tmp_path / "whole", tmp_path / "split")


@pytest.mark.parametrize("where", ["validate", "publish"])
def test_ctrl_c_while_a_finished_run_is_validated_or_published_keeps_every_finished_step(tmp_path, monkeypatch, where):
    """Its 24 steps are kept (not the last periodic state's 20), and resuming publishes the run an
    uninterrupted one publishes."""
    train_run(_config(), tmp_path / "whole", CPU)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        if where == "validate":
            patched.setattr(TaskSource, "validate", ctrl_c)
        else:
            patched.setattr(loop, "save_checkpoint", ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            train_run(_config(), tmp_path / "split", CPU)
    assert _state_step(tmp_path / "split") == 24
    assert train_run(_config(), tmp_path / "split", CPU).status == "resumed"
    assert _same_weights(tmp_path / "whole", tmp_path / "split")
