"""Bad input to training and its checkpoints, from a user's seat: a nonsense flag, a damaged or wrong-shaped run
folder is one line (a ProbeError; the CLI's exit 2, or the run's own failure beside the others), never a
traceback, and never costs a finished run: ``--force`` replaces one only once the new run has published."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import reverse_config, tiny_model
from safetensors.torch import save_file

import probe.training.loop as loop
from probe.atomic import atomic_write_text
from probe.cli import main
from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.models.checkpoint import read_checkpoint_config, save_checkpoint
from probe.models.model_config import ModelConfig
from probe.runs.folders import run_dir
from probe.training.bookkeeping import REPLACEMENT, train_run, train_stacked
from probe.training.loop import STATE
from probe.training.train_config import TrainConfig

CPU = torch.device("cpu")
OPTIONS = {"train_length": 4}
STEPS = 6  # the finished run's; a new run asks for 8


def _config(pe: str = "nope", **overrides) -> TrainConfig:
    return reverse_config(pe, **{"steps": 8, **overrides})


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One finished NoPE run (6 steps), with what `probe eval` writes beside it: trained once, copied per test."""
    path = tmp_path_factory.mktemp("trained") / "run"
    train_run(_config(steps=STEPS), path, CPU)
    for name in ("eval.json", "eval.csv", "eval+n=4.json"):
        (path / name).write_text(f"the evaluation of the finished run ({name})\n")
    return path


@pytest.fixture
def finished(trained, tmp_path) -> Path:
    """A copy of the finished run where `probe train --checkpoints tmp_path --task reverse -o train_length=4`
    looks for NoPE seed 0."""
    path = run_dir(str(tmp_path), "reverse", "nope", 0, OPTIONS)
    shutil.copytree(trained, path)
    return path


def _files(path: Path) -> dict[str, bytes]:
    """The run folder's files and their bytes (the lock aside): what must not change."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file() and p.name != ".lock"}


def _one_line(error: BaseException | str) -> str:
    text = str(error)
    assert len(text.strip().splitlines()) == 1, text
    return text


def _train_argv(tmp_path: Path, *flags: str) -> list[str]:
    model = [f"-m{k}={v}" for k, v in tiny_model(1).items()]
    argv = ["train", "--task", "reverse", "-o", "train_length=4", "--pe", "nope", "--steps", "8", "--batch-size", "8"]
    return [*argv, *model, "--checkpoints", str(tmp_path), "--device", "cpu", "--no-eval", *flags]


# -- 1. --force replaces a finished run only once the new one publishes --------------------------------------
@pytest.mark.parametrize(
    "flags",
    [
        ["--lr", "-1"],
        ["--lr", "inf"],
        ["--dropout", "2"],
        ["--checkpoint-every", "0"],
        ["-m", "n_layers=abc"],
        ["-m", "act_fn=bogus"],
        ["-m", "n_layers=0"],
        ["--lr", "nan", "--jobs", "2"],
        ["--dropout", "-0.5", "--stack"],
    ],
    ids=lambda flags: " ".join(flags),
)
def test_force_with_a_flag_that_cannot_train_is_one_line_and_keeps_the_finished_run(finished, tmp_path, capsys, flags):
    before = _files(finished)
    code = main([*_train_argv(tmp_path, "--force", "--jobs", "1"), *flags])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.out + captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and flags[1].split("=")[-1] in captured.err, captured.err
    assert _files(finished) == before


def test_force_keeps_the_finished_run_when_the_first_batch_is_longer_than_the_model_reads(finished, tmp_path, capsys):
    before = _files(finished)
    code = main(_train_argv(tmp_path, "--force", "--jobs", "1", "-m", "n_ctx=4"))
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert code != 0 and "Traceback" not in said
    assert "longer than this model's context" in said and "is kept" in said
    assert _files(finished) == before and not (finished / REPLACEMENT).exists()


def test_force_keeps_the_finished_run_when_the_new_ones_loss_goes_nan(finished, monkeypatch):
    real, calls = loop.target_loss, {"n": 0}

    def nan_at_the_third(model, *batch):
        calls["n"] += 1
        loss = real(model, *batch)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(loop, "target_loss", nan_at_the_third)
    before = _files(finished)
    with pytest.raises(ProbeError, match="loss became nan at step 2.*is kept") as raised:
        train_run(_config(), finished, CPU, force=True)
    _one_line(raised.value)
    assert _files(finished) == before and not (finished / REPLACEMENT).exists()


def test_force_interrupted_keeps_the_finished_run_and_resumes_to_replace_it(finished, tmp_path):
    """Ctrl-C in a --force run: the finished run is as it was (its evaluations too); the same settings again
    resume the new run, which then replaces it whole, as an uninterrupted --force run does."""
    before = _files(finished)

    def stop(step, loss, speed):
        if step == 5:
            raise KeyboardInterrupt

    new = _config(checkpoint_every=4)
    with pytest.raises(KeyboardInterrupt):
        train_run(new, finished, CPU, force=True, on_step=stop)
    assert _files(finished) == before and (finished / REPLACEMENT / STATE).is_file()
    assert train_run(_config(steps=STEPS), finished, CPU).status == "skipped"  # the finished run is still the run
    resumed = train_run(new, finished, CPU)
    assert resumed.status == "resumed" and resumed.path == finished
    whole = train_run(new, tmp_path / "whole", CPU)
    ours, theirs = load_checkpoint(finished).state_dict(), load_checkpoint(tmp_path / "whole").state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours) and whole.final_loss == resumed.final_loss


def test_force_replaces_the_finished_run_and_what_was_derived_from_it(finished):
    result = train_run(_config(), finished, CPU, force=True)
    assert result.status == "trained" and result.path == finished
    names = {p.name for p in finished.iterdir()}
    assert not names & {"eval.json", "eval.csv", "eval+n=4.json", REPLACEMENT, STATE}, names
    assert read_checkpoint_config(finished)["training"]["steps"] == 8
    assert load_checkpoint(finished) is not None  # its weights match its config.json
    steps = [json.loads(line)["step"] for line in (finished / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # the new run's log alone


def test_a_replacement_a_kill_stopped_midway_is_finished_by_the_next_run(finished, tmp_path, monkeypatch):
    """Killed between moving the new weights in and moving its config.json: the folder holds new weights beside
    the old config. The next run of the folder finishes the move, then reads it as the new run, whole."""
    import probe.training.bookkeeping as bookkeeping

    real = bookkeeping.os.replace

    def killed_at_the_config(source, target):
        if Path(source).parent.name == REPLACEMENT != Path(target).parent.name and Path(target).name == "config.json":
            raise KeyboardInterrupt
        real(source, target)

    monkeypatch.setattr(bookkeeping.os, "replace", killed_at_the_config)
    with pytest.raises(KeyboardInterrupt):
        train_run(_config(), finished, CPU, force=True)
    monkeypatch.setattr(bookkeeping.os, "replace", real)
    assert read_checkpoint_config(finished)["training"]["steps"] == STEPS  # the old config, the new weights
    assert (finished / REPLACEMENT / "config.json").is_file()
    again = train_run(_config(), finished, CPU)
    assert again.status == "skipped" and not (finished / REPLACEMENT).exists()
    assert read_checkpoint_config(finished)["training"]["steps"] == 8
    train_run(_config(), tmp_path / "whole", CPU)
    ours, theirs = load_checkpoint(finished).state_dict(), load_checkpoint(tmp_path / "whole").state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


# -- 2. the recipe's numbers ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ({"lr": -1.0}, "--lr"),
        ({"lr": float("nan")}, "--lr"),
        ({"lr": float("inf")}, "--lr"),
        ({"lr": 0.0}, "--lr"),
        ({"dropout": 2.0}, "--dropout"),
        ({"dropout": -0.5}, "--dropout"),
        ({"dropout": 1.0}, "--dropout"),
        ({"checkpoint_every": 0}, "--checkpoint-every"),
        ({"checkpoint_every": -1}, "--checkpoint-every"),
        ({"log_every": 0}, "log_every"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"warmup": float("nan")}, "warmup"),
        ({"warmup": -0.1}, "warmup"),
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"grad_clip": float("inf")}, "grad_clip"),
        ({"beta2": 1.0}, "beta2"),
        ({"lr": "fast"}, "--lr"),
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, dict) else value,
)
def test_a_recipe_number_that_cannot_train_is_one_line_naming_it(setting, said):
    with pytest.raises(ProbeError) as raised:
        _config(**setting)
    (value,) = setting.values()
    assert said in _one_line(raised.value) and repr(value) in str(raised.value)


def test_a_recipe_number_that_trains_is_taken():
    assert _config(grad_clip=0.0).grad_clip == 0.0  # no clipping, as the loop reads it
    assert _config(lr=1, dropout=0, warmup=0.0, weight_decay=0.0).lr == 1


# -- 3. -m model overrides --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override",
    [
        {"n_layers": 0},
        {"d_model": -1},
        {"n_layers": "abc"},
        {"n_heads": 2.5},
        {"d_head": True},
        {"d_mlp": 0},
        {"n_ctx": "8"},
        {"act_fn": "bogus"},
        {"act_fn": ["relu"]},
        {"eps": 0.0},
        {"tie_embeddings": "yes"},
    ],
    ids=lambda value: json.dumps(value),
)
def test_a_model_override_that_builds_no_model_is_one_line_naming_it(override):
    config = _config(model={**tiny_model(1), **override})
    with pytest.raises(ProbeError) as raised:
        config.model_config(vocab_size=10)
    ((name, value),) = override.items()
    assert name in _one_line(raised.value) and repr(value) in str(raised.value)


# -- 4 and 5. weights without their config; a run file that is a folder -----------------------------------
def test_weights_without_a_config_are_a_damaged_run_never_trained_over(finished):
    (finished / "config.json").unlink()
    before = _files(finished)
    with pytest.raises(ProbeError, match="no config.json.*--force") as raised:
        train_run(_config(steps=STEPS), finished, CPU)
    assert str(finished) in _one_line(raised.value)
    assert _files(finished) == before
    assert train_run(_config(steps=STEPS), finished, CPU, force=True).status == "trained"
    assert not (finished / "eval.json").exists()


def test_weights_beside_a_state_without_a_config_resume(tmp_path):
    """A publish killed between the weights and config.json leaves the state: the run resumes, not damaged."""

    def stop(step, loss, speed):
        if step == 4:
            raise KeyboardInterrupt

    path = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        train_run(_config(checkpoint_every=2), path, CPU, on_step=stop)
    (path / "model.safetensors").write_bytes(b"half a publish")
    assert train_run(_config(checkpoint_every=2), path, CPU).status == "resumed"


@pytest.mark.parametrize(
    ("name", "force"),
    [("config.json", False), ("config.json", True), ("tokenizer.json", True)],
    ids=["config", "config-force", "tokenizer-force"],
)
def test_a_run_file_that_is_a_folder_stops_the_run_before_a_step(finished, force, name):
    (finished / name).unlink()
    (finished / name).mkdir()
    before = _files(finished)
    with pytest.raises(ProbeError, match="is a folder.*move it away") as raised:
        train_run(_config(), finished, CPU, force=force)
    assert str(finished / name) in _one_line(raised.value)
    assert _files(finished) == before and not (finished / REPLACEMENT).exists()


def test_save_checkpoint_writes_nothing_where_its_config_is_a_folder(finished, tmp_path):
    model = load_checkpoint(finished)
    (tmp_path / "out" / "config.json").mkdir(parents=True)
    with pytest.raises(ProbeError, match="is a folder") as raised:
        save_checkpoint(model, tmp_path / "out")
    assert "nothing was written" in _one_line(raised.value)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_the_atomic_writers_line_says_what_happened_to_a_folder(tmp_path):
    (tmp_path / "x.json").mkdir()
    with pytest.raises(ProbeError) as raised:
        atomic_write_text(tmp_path / "x.json", "{}")
    assert "is a folder" in _one_line(raised.value) and "nothing there was replaced" not in str(raised.value)
    assert list(tmp_path.iterdir()) == [tmp_path / "x.json"]  # no temporary file left


# -- 6. a damaged finished run is damaged, not skipped -----------------------------------------------------
def _truncate(path: Path) -> str:
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    return "does not match"


def _garbage(path: Path) -> str:
    (path / "model.safetensors").write_bytes(bytes(range(256)) * 400)
    return "does not match"


def _another_models(path: Path) -> str:
    save_file({"embed.W_E": torch.zeros(3, 2)}, str(path / "model.safetensors"))
    return "does not match"


def _no_weights(path: Path) -> str:
    (path / "model.safetensors").unlink()
    return "no model.safetensors"


def _edit_config(change):
    def damage(path: Path) -> str:
        config = json.loads((path / "config.json").read_text())
        said = change(config)
        (path / "config.json").write_text(json.dumps(config))
        return said

    damage.__name__ = change.__name__
    return damage


def _bogus_pe(config) -> str:
    config["pe"] = config["model"]["pe"] = "bogus"
    return "unknown positional encoding 'bogus'"


def _bogus_task(config) -> str:
    config["task"]["name"] = "bogus"
    return "unknown task 'bogus'"


def _negative_context(config) -> str:
    config["model"]["n_ctx"] = -5
    return "n_ctx must be a whole number, at least 1, got -5"


@pytest.mark.parametrize(
    "damage",
    [
        _truncate,
        _garbage,
        _another_models,
        _no_weights,
        _edit_config(_bogus_pe),
        _edit_config(_bogus_task),
        _edit_config(_negative_context),
    ],
    ids=lambda damage: damage.__name__.strip("_"),
)
def test_a_damaged_finished_run_is_its_own_line_not_skipped_and_the_others_train(finished, tmp_path, damage):
    said = damage(finished)
    before = _files(finished)
    results = train_stacked([(_config(steps=STEPS), finished), (_config("t5", steps=STEPS), tmp_path / "t5")], CPU)
    assert isinstance(results[0], ProbeError), results[0]
    message = _one_line(results[0])
    assert "damaged" in message and said in message and "--force" in message and str(finished) in message
    assert results[1].status == "trained" and _files(finished) == before
    assert train_run(_config(steps=STEPS), finished, CPU, force=True).status == "trained"


def test_probe_train_reports_a_damaged_finished_run_as_failed_not_skipped(finished, tmp_path, capsys):
    """`probe eval` would fail on it: `probe train` says so (exit 1) and trains the other run (here T5)."""
    _truncate(finished)
    code = main(_train_argv(tmp_path, "--pe", "t5", "--jobs", "1", "--steps", str(STEPS)))
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.out + captured.err
    assert "skipped" not in captured.out and "damaged" in captured.out and "--force" in captured.out
    assert (finished.parent.parent / "t5" / "seed0" / "config.json").is_file()


def test_a_weights_folder_is_named_and_not_retrained_over(finished):
    (finished / "model.safetensors").unlink()
    (finished / "model.safetensors").mkdir()
    with pytest.raises(ProbeError, match="model.safetensors is a folder.*move it away") as raised:
        train_run(_config(steps=STEPS), finished, CPU)
    _one_line(raised.value)


# -- 7. config.json that is JSON but not a run's shape ---------------------------------------------------------
def _entry(key, value):
    def change(config) -> None:
        config[key] = value

    change.__name__ = f"{key}={json.dumps(value)}"
    return change


def _model_field(key, value=None):
    def change(config) -> None:
        if value is None:
            del config["model"][key]
        else:
            config["model"][key] = value

    change.__name__ = f"model.{key}={json.dumps(value)}" if value is not None else f"no model.{key}"
    return change


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_entry("training", []), "'training' entry is list"),
        (_entry("model", 5), "'model' entry is int"),
        (_entry("task", "copy"), "'task' entry is str"),
        (_entry("metrics", []), "'metrics' entry is list"),
        (_model_field("d_vocab"), "no d_vocab"),
        (_model_field("n_layers", "2"), "n_layers must be a whole number, at least 1, got '2'"),
        (_model_field("pe_options", 5), "pe_options"),
    ],
    ids=lambda value: getattr(value, "__name__", "said"),
)
def test_a_config_json_of_the_wrong_shape_is_one_line_naming_it_for_every_reader(finished, change, said):
    config = json.loads((finished / "config.json").read_text())
    change(config)
    (finished / "config.json").write_text(json.dumps(config))
    before = _files(finished)
    for read in (
        lambda: train_run(_config(steps=STEPS), finished, CPU),
        lambda: load_checkpoint(finished),
    ):
        with pytest.raises(ProbeError) as raised:
            read()
        assert said in _one_line(raised.value) and str(finished / "config.json") in str(raised.value)
    assert _files(finished) == before


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"pe": "nope"}, "no d_vocab"),
        ({"pe": "nope", "d_vocab": 5, "n_layers": "2"}, "n_layers"),
        ({"pe": "nope", "d_vocab": 5, "colour": "red"}, "colour"),
        ([1, 2], "not an object"),
    ],
)
def test_model_config_from_dict_names_the_field_and_the_file(data, said):
    with pytest.raises(ProbeError) as raised:
        ModelConfig.from_dict(data, where="somewhere/config.json")
    assert said in _one_line(raised.value) and "somewhere/config.json" in str(raised.value)
