"""Stacked runs are the runs trained alone; the fast step's parts (a fixed batch geometry,
no host sync, the compiled forward, weight-decay groups) each against the plain path or a hand-written
expectation."""

from __future__ import annotations

import json
from itertools import islice

import pytest
import torch
from helpers import tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from probe.cli import main
from probe.errors import ProbeError
from probe.models import build_model
from probe.models.checkpoint import load_checkpoint
from probe.tasks.batches import batch_stream, fixed_geometry
from probe.training.bookkeeping import train_run, train_stacked
from probe.training.loop import STATE, Trainer, target_loss
from probe.training.optimizer import decayed
from probe.training.sources import TaskSource
from probe.training.stacked import train_alone
from probe.training.steps import CapturedStep, Engine
from probe.training.train_config import TrainConfig, settings_differ

CPU = torch.device("cpu")
PAPER = ("nope", "t5", "alibi", "rotary", "ape")


def _config(pe: str, **overrides) -> TrainConfig:
    values = dict(
        task="reverse",
        pe=pe,
        steps=30,
        batch_size=8,
        checkpoint_every=10,
        log_every=5,
        eval_examples=16,
        dropout=0.0,
        task_options={"train_length": 4},
        model=tiny_model(2),
    )
    values.update(overrides)
    return TrainConfig(**values)


def _weights(path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path).state_dict()


def _log(path) -> list[dict]:
    """metrics.jsonl without its clock readings."""
    lines = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in ("time", "tokens_per_s")} for line in lines]


PROTOCOLS = [
    pytest.param({}, id="probe"),
    pytest.param({"protocol": "authors", "pack": True, "eval_every": 10}, id="authors-packed-selected"),
]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stacked_runs_are_the_runs_trained_alone(tmp_path, dropout, protocol):
    """Every PE of the paper in one stack: the same weights bit for bit, the same log and selection.
    With dropout too: each member draws its masks from its own generator, swapped in around its step."""
    for pe in PAPER:
        train_run(_config(pe, dropout=dropout, **protocol), tmp_path / "alone" / pe, CPU)
    runs = [(_config(pe, dropout=dropout, **protocol), tmp_path / "together" / pe) for pe in PAPER]
    together = train_stacked(runs, CPU)
    assert [r.status for r in together] == ["trained"] * len(PAPER)
    for pe in PAPER:
        alone, joint = tmp_path / "alone" / pe, tmp_path / "together" / pe
        a, b = _weights(alone), _weights(joint)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), pe
        assert _log(alone) == _log(joint), pe
        stored = [json.loads((folder / "config.json").read_text()) for folder in (alone, joint)]
        assert stored[0]["training"].get("selection") == stored[1]["training"].get("selection")
        assert stored[0]["metrics"]["iid_accuracy"] == stored[1]["metrics"]["iid_accuracy"]


def test_each_member_drops_out_at_its_own_rate(tmp_path):
    rates = {"nope": 0.1, "t5": 0.0, "alibi": 0.3}
    for pe, rate in rates.items():
        train_run(_config(pe, dropout=rate), tmp_path / "alone" / pe, CPU)
    train_stacked([(_config(pe, dropout=rate), tmp_path / "together" / pe) for pe, rate in rates.items()], CPU)
    for pe in rates:
        a, b = _weights(tmp_path / "alone" / pe), _weights(tmp_path / "together" / pe)
        assert all(torch.equal(a[k], b[k]) for k in a), pe


def test_a_rerun_with_dropout_is_bit_identical(tmp_path):
    runs = lambda root: [(_config(pe, dropout=0.1), root / pe) for pe in ("nope", "t5")]  # noqa: E731
    train_stacked(runs(tmp_path / "a"), CPU)
    train_stacked(runs(tmp_path / "b"), CPU)
    for pe in ("nope", "t5"):
        a, b = _weights(tmp_path / "a" / pe), _weights(tmp_path / "b" / pe)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_training_leaves_the_process_random_state_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_stacked([(_config("nope", dropout=0.1), tmp_path / "nope")], CPU)
    assert torch.equal(torch.rand(3), expected)


def test_a_study_killed_midway_resumes_to_where_an_uninterrupted_one_ends(tmp_path):
    """Killed while the first member has taken step 15 and the others 14: each keeps its finished
    steps, and the resumed stack trains each from where it stopped to the uninterrupted weights."""
    pes = ("nope", "t5", "alibi")
    options = dict(dropout=0.1, protocol="authors", pack=True, eval_every=10)
    runs = lambda root: [(_config(pe, **options), root / pe) for pe in pes]  # noqa: E731
    train_stacked(runs(tmp_path / "whole"), CPU)

    def interrupt(path, step, loss, speed):
        if path.name == "nope" and step == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_stacked(runs(tmp_path / "split"), CPU, on_step=interrupt)
    for pe in pes:
        assert (tmp_path / "split" / pe / STATE).is_file() and not (tmp_path / "split" / pe / "config.json").exists()
    steps = {pe: Trainer(*runs(tmp_path / "split")[i], CPU) for i, pe in enumerate(pes)}
    for trainer in steps.values():
        trainer.load_state()
    assert {pe: t.step for pe, t in steps.items()} == {"nope": 15, "t5": 14, "alibi": 14}
    resumed = train_stacked(runs(tmp_path / "split"), CPU)
    assert [r.status for r in resumed] == ["resumed"] * len(pes)
    for pe in pes:
        a, b = _weights(tmp_path / "whole" / pe), _weights(tmp_path / "split" / pe)
        assert all(torch.equal(a[k], b[k]) for k in a), pe
        assert _log(tmp_path / "whole" / pe) == _log(tmp_path / "split" / pe), pe


def test_a_member_whose_loss_goes_non_finite_stops_alone(tmp_path, monkeypatch):
    import probe.training.loop as loop

    real = loop.target_loss
    calls = {"t5": 0}

    def poisoned(model, tokens, mask, *rest):
        loss = real(model, tokens, mask, *rest)
        if model.config.pe == "t5":
            calls["t5"] += 1
            if calls["t5"] == 13:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(loop, "target_loss", poisoned)
    results = train_stacked([(_config(pe), tmp_path / pe) for pe in ("nope", "t5", "alibi")], CPU)
    assert isinstance(results[1], ProbeError) and "loss became nan at step 12" in str(results[1])
    assert "(step 10)" in str(results[1]) and (tmp_path / "t5" / STATE).is_file()
    assert [r.status for r in (results[0], results[2])] == ["trained", "trained"]


def test_a_member_trained_otherwise_is_its_own_error_and_the_others_train(tmp_path):
    train_run(_config("t5", steps=20), tmp_path / "t5", CPU)
    results = train_stacked([(_config(pe), tmp_path / pe) for pe in ("nope", "t5")], CPU)
    assert results[0].status == "trained"
    assert isinstance(results[1], ProbeError) and "steps 20, asked 30" in str(results[1])


def test_only_runs_of_one_batch_stream_are_stacked(tmp_path):
    with pytest.raises(ValueError, match="one stack_key"):
        train_stacked([(_config("nope"), tmp_path / "a"), (_config("t5", seed=1), tmp_path / "b")], CPU)


def _paper_scan():
    return TaskSource("scan", {"split": "paper"}, 0, authors=True).training_set(0)


def test_the_fixed_geometry_holds_every_batch_of_a_paper_scale_run():
    """40,000 random batches of 64 from SCAN's paper split (the paper's run): each fits the grid
    sized once from the data, with every target token it scores unpadded."""
    data = _paper_scan()
    geometry = fixed_geometry(data, 64, 0, 40_000, grouped=False, packed=True)
    assert geometry.packed and geometry.width == 2 * int(data.lengths.max())
    needed = 0
    for _, _, index in islice(batch_stream(data, 64, 0, grouped=False), 40_000):
        tokens, mask, segments = geometry.cut(data, index)
        assert tokens.shape == (geometry.rows, geometry.width) and mask.shape == (geometry.rows, geometry.width - 1)
        assert int(mask.sum()) == int(data.batch(index)[1].sum())
        assert int((segments >= 0).sum()) == int(data.lengths[index].sum())
        needed = max(needed, int((segments >= 0).any(dim=1).sum()))
    assert needed == geometry.rows  # the grid is no larger than the fullest batch needs


@pytest.mark.parametrize("pe", PAPER)
@pytest.mark.parametrize("packed", [False, True])
def test_a_fixed_geometry_scores_what_the_trimmed_batch_scores(pe, packed):
    """Padding rows and columns change nothing a real token sees: the same loss (float64 weights)."""
    data = _paper_scan()
    geometry = fixed_geometry(data, 16, 0, 50, grouped=False, packed=packed)
    model = build_model(pe, vocab_size=int(data.tokens.max()) + 1, preset="tiny", n_layers=2).double()
    for _, _, index in islice(batch_stream(data, 16, 0, grouped=False), 3):
        trimmed = data.packed_batch(index) if packed else data.batch(index)
        fixed = geometry.cut(data, index)
        assert fixed[0].shape == (geometry.rows, geometry.width)
        torch.testing.assert_close(target_loss(model, *fixed), target_loss(model, *trimmed), rtol=1e-6, atol=0)


def test_a_short_last_batch_is_padded_with_rows_that_score_nothing():
    data = _paper_scan()
    geometry = fixed_geometry(data, 64, 0, 10, grouped=False, packed=False)
    tokens, mask = geometry.cut(data, torch.arange(5))
    assert tokens.shape == (64, geometry.width) and not mask[5:].any() and (tokens[5:] == data.pad_id).all()


class HostSyncs(TorchDispatchMode):
    """Records the ops that read a tensor's value on the host (a GPU sync) or build a tensor from host
    data (a copy a captured graph cannot hold)."""

    FORBIDDEN = {"_local_scalar_dense", "equal", "is_nonzero", "item", "lift_fresh", "lift_fresh_copy"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.FORBIDDEN:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("pe", PAPER)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_training_step_reads_nothing_back_to_the_host(tmp_path, pe, protocol, monkeypatch):
    """Forward (dropout on), backward and clipping: what the GPU captures (its fused AdamW too)."""
    trainer = Trainer(_config(pe, dropout=0.1, **protocol), tmp_path, CPU, engine=Engine(compile=False))
    monkeypatch.setattr(trainer.optimizer, "step", lambda: None)  # a CPU foreach AdamW reads its step count
    data = trainer.source.training_set(0)
    geometry = fixed_geometry(data, 8, 0, 5, grouped=True, packed=trainer.config.pack)
    batch = geometry.cut(data, torch.arange(8))
    from probe.training.dropout import dropout

    trainer.model.train()
    with dropout(trainer.model, 0.1, trainer.config.protocol):
        trainer._compute(batch)  # the first pass fills the PE's caches, as a warm-up before capture does
        with HostSyncs() as watch:
            trainer._compute(batch)
    assert watch.seen == []


def test_the_sync_watch_sees_a_host_scalar_and_a_comparison():
    """The watch above can fail: the ops the step used to run (torch.tensor(-inf), torch.equal) are seen."""
    with HostSyncs() as watch:
        torch.where(torch.ones(2) > 0, torch.zeros(()), torch.tensor(float("-inf")))
        torch.equal(torch.arange(3), torch.arange(3))
        bool(torch.ones(()) > 0)
    assert {"lift_fresh", "equal", "_local_scalar_dense"} <= set(watch.seen)


def test_the_compiled_forward_equals_the_eager_one(tmp_path):
    """torch.compile on the fixed geometry: the same loss and gradients within float32 rounding."""
    config = _config("t5", model=tiny_model(1))
    eager = Trainer(config, tmp_path / "eager", CPU)
    compiled = Trainer(config, tmp_path / "compiled", CPU, engine=Engine(compile=True))
    data = eager.source.training_set(0)
    batch = fixed_geometry(data, 8, 0, 5, grouped=True, packed=False).cut(data, torch.arange(8))
    losses = []
    for trainer in (eager, compiled):
        trainer.model.train()
        loss = target_loss(trainer.forward, *batch)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(eager.model.named_parameters(), compiled.model.parameters()):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


class CapturedOnCPU(CapturedStep):
    """:class:`CapturedStep` with its CUDA parts replaced: warm-up steps run in line, the sync check
    finds nothing (the host-sync tests hold the step itself), and "recording" keeps the step's body,
    which each replay then runs on the input buffers."""

    def _warm_up(self, batch):
        self._advance()
        return self.eager(batch)

    def _sync_check(self, step):
        return step(), None

    def _record(self, body):
        return body


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_captured_step_takes_each_step_once_at_its_learning_rate(tmp_path, protocol, monkeypatch):
    """Float64, 12 steps (3 warm-up, the capture, 8 replays) on the fixed geometry against the eager
    loop: the same weights and logged losses, so no step is taken twice or skipped, and the learning
    rate read from the device's table is the schedule's at every step."""
    import probe.training.loop as loop

    monkeypatch.setattr(loop, "CapturedStep", CapturedOnCPU)
    config = _config("t5", steps=12, log_every=2, checkpoint_every=100, **protocol)
    trainers = []
    for name, engine in (("eager", Engine()), ("captured", Engine(capture=True))):
        (tmp_path / name).mkdir()
        trainer = Trainer(config, tmp_path / name, CPU, engine=engine)
        trainer.model.double()
        # a tensor learning rate needs the for-loop AdamW on a CPU (the GPU's is fused)
        trainer.optimizer = torch.optim.AdamW([{**g, "foreach": False} for g in trainer.optimizer.param_groups])
        train_alone(trainer)
        trainers.append(trainer)
    eager, captured = trainers
    assert captured._captured.captured and captured.step == eager.step == 12
    assert int(captured._captured.counter) == 12
    for (name, a), b in zip(eager.model.named_parameters(), captured.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=0, msg=name)
    losses = [[line["loss"] for line in _log(tmp_path / name) if "loss" in line] for name in ("eager", "captured")]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-10, atol=0)


AUTHORS_NO_DECAY = {"pe.relative_attention_bias"}  # their Trainer: names with "bias", nn.LayerNorm's
PROBE_NO_DECAY = {"blocks.0.ln1.w", "blocks.0.ln2.w", "ln_final.w"}  # probe's: every 1-D tensor
EVERY = {
    "embed.W_E",
    "blocks.0.ln1.w",
    "blocks.0.ln2.w",
    "blocks.0.attn.W_Q",
    "blocks.0.attn.W_K",
    "blocks.0.attn.W_V",
    "blocks.0.attn.W_O",
    "blocks.0.mlp.W_in",
    "blocks.0.mlp.W_out",
    "ln_final.w",
    "unembed.W_U",
    "pe.relative_attention_bias",
}


def test_weight_decay_groups_follow_each_protocol():
    """T5 at one layer, written out by hand: the authors' Trainer decays the RMSNorm gains (T5LayerNorm
    is not nn.LayerNorm) and not T5's bias table; probe's decays the table and no gain."""
    model = build_model("t5", vocab_size=20, preset="tiny", n_layers=1)
    authors, probe = decayed(model, "authors"), decayed(model, "probe")
    assert set(authors) == set(probe) == EVERY  # trainable ones only: the frozen b_* are not AdamW's
    assert {n for n, d in authors.items() if not d} == AUTHORS_NO_DECAY
    assert {n for n, d in probe.items() if not d} == PROBE_NO_DECAY
    layer_norm = build_model("nope", vocab_size=20, preset="tiny", n_layers=1, normalization="LN", bias=True)
    no_decay = {n for n, d in decayed(layer_norm, "authors").items() if not d}
    assert {"blocks.0.ln1.w", "blocks.0.ln1.b", "ln_final.w", "blocks.0.attn.b_Q", "unembed.b_U"} <= no_decay
    assert "blocks.0.attn.W_Q" not in no_decay


def test_the_protocol_chooses_the_groups_and_runs_saved_before_were_probes():
    assert _config("t5", protocol="authors").weight_decay_groups == "authors"
    assert _config("t5").weight_decay_groups == "probe"
    stored = {k: v for k, v in _config("t5", protocol="authors").to_dict().items() if k != "weight_decay_groups"}
    assert settings_differ(stored, _config("t5", protocol="authors").to_dict()) == [
        "weight_decay_groups 'probe', asked 'authors'"
    ]


def test_probe_train_stack_writes_the_run_folders_every_command_reads(tmp_path, capsys):
    root = tmp_path / "ck"
    common = ["--task", "reverse", "-o", "train_length=4", "--checkpoints", str(root)]
    model = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]
    argv = ["train", *common, "--pe", "nope", "--pe", "t5", "--steps", "40", "--stack", *model, "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    trained = json.loads(captured.out)
    assert "IID exact match: greedy, on 1000 held-out examples of the training lengths" in captured.err
    assert [(r["pe"], r["status"]) for r in trained] == [("nope", "trained"), ("t5", "trained")]
    assert main(["eval", *common, "--n", "20", "--json"]) == 0
    assert {run["pe"] for run in json.loads(capsys.readouterr().out)["runs"]} == {"nope", "t5"}
    assert main(["compare", "nope", "t5", *common, "--n-per-bucket", "2", "--json"]) == 0
    capsys.readouterr()
    assert main(argv) == 0  # complete: skipped, as alone
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["skipped", "skipped"]


def test_stack_with_jobs_is_one_line(tmp_path, capsys):
    argv = ["train", "--task", "reverse", "--pe", "nope", "--stack", "--jobs", "2", "--checkpoints", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--stack trains its runs in one process" in err and "Traceback" not in err


def test_capture_on_a_cpu_is_one_line():
    with pytest.raises(ProbeError, match="CUDA graphs need a GPU"):
        Engine.for_device(CPU, capture=True)
    assert Engine.for_device(CPU) == Engine() and Engine.for_device(torch.device("cuda")).capture


def test_a_gpu_sweep_gives_each_batch_stream_one_task(tmp_path):
    """The paper's grid shape: PEs x seeds; on a GPU one Ray task per seed holds its PEs, on a CPU one per run."""
    from probe.studies.sweep import expand_grid
    from probe.studies.sweep.cluster import tasks

    grid = {"task": "reverse", "pe": ["nope", "t5", "alibi"], "seed": [0, 1], "steps": 10, "batch_size": 8}
    runs = expand_grid(grid, tmp_path)
    on_gpu = tasks(runs, "cuda")
    assert sorted(sorted((r.config.pe, r.config.seed) for r in task) for task in on_gpu) == [
        [("alibi", 0), ("nope", 0), ("t5", 0)],
        [("alibi", 1), ("nope", 1), ("t5", 1)],
    ]
    assert [len(task) for task in tasks(runs, "cpu")] == [1] * 6
