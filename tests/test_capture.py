"""The captured step's safety on a GPU, shown on the CPU (issue 49): what cannot be captured is known
when a run is built, a step that syncs stays eager, a broken capture stops the program with its cause,
captured runs resume with the masks an uninterrupted run draws, biased attention keeps its float32
mask under autocast, evaluation builds no graph, and `--capture/--no-capture` is recorded."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from helpers import tiny_model
from test_stacked import CapturedOnCPU, HostSyncs, _config
from torch.utils._python_dispatch import TorchDispatchMode

from probe.errors import ProbeError
from probe.models import build_model
from probe.models.checkpoint import load_checkpoint
from probe.models.registry import PE_CLASSES, REGISTRY
from probe.tasks.batches import fixed_geometry
from probe.training.loop import Trainer
from probe.training.steps import CapturedStep, CaptureFailed, Engine, cause_of

CPU = torch.device("cpu")


def _option_sets() -> list:
    """Every registered PE, with its defaults and each option set its contract tests check."""
    return [
        pytest.param(pe, options, id=pe + "".join(f"+{k}={v}" for k, v in options.items()))
        for pe, cls in PE_CLASSES.items()
        for options in ({}, *cls.examples)
    ]


def _capturable(pe: str, options: dict, **model) -> bool:
    return _config(pe, pe_options=options, model=tiny_model(2, **model)).model_config(20).eager_because is None


@pytest.mark.parametrize(("pe", "options"), _option_sets())
@pytest.mark.parametrize("pack", [False, True])
def test_every_step_said_capturable_reads_nothing_back_to_the_host(tmp_path, pe, options, pack, monkeypatch):
    """Each registered PE and option set that claims a capturable step (``eager_because`` None): forward
    with dropout, backward and clipping, after a first pass that fills the PE's caches as the warm-up does."""
    if pack and not PE_CLASSES[pe].packable():
        pytest.skip("not packable")
    extra = dict(protocol="authors", pack=True) if pack else {}
    config = _config(pe, dropout=0.1, pe_options=options, **extra)
    trainer = Trainer(config, tmp_path, CPU, engine=Engine(compile=False))
    if trainer.model.config.eager_because:
        pytest.skip(f"eager by design: {trainer.model.config.eager_because}")
    monkeypatch.setattr(trainer.optimizer, "step", lambda: None)  # a CPU foreach AdamW reads its step count
    data = trainer.source.training_set(0)
    batch = fixed_geometry(data, 8, 0, 5, grouped=not pack, packed=pack).cut(data, torch.arange(8))
    from probe.training.dropout import dropout

    trainer.model.train()
    with dropout(trainer.model, 0.1, trainer.config.protocol):
        trainer._compute(batch)
        with HostSyncs() as watch:
            trainer._compute(batch)
    assert watch.seen == []


def test_random_positions_train_eagerly_by_design_and_do_read_the_host(tmp_path, capsys):
    """The one option that cannot be captured says so when its run is built (one line), and it is
    honest: its step does read the host (a CPU draw copied in, positions compared)."""
    config = _config("nope", model=tiny_model(2, random_positions=64))
    trainer = Trainer(config, tmp_path, CPU, engine=Engine(capture=True))
    assert trainer.eager_because == "random_positions draws each pass's positions on the host"
    assert not trainer.captures and trainer.step_engine["eager_because"] == trainer.eager_because
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trains eagerly, not captured: random_positions" in err
    data = trainer.source.training_set(0)
    batch = fixed_geometry(data, 8, 0, 5, grouped=True, packed=False).cut(data, torch.arange(8))
    trainer.model.train()
    trainer._compute(batch)
    with HostSyncs() as watch:
        trainer._compute(batch)
    assert watch.seen
    assert _capturable("nope", {}) and not _capturable("nope", {}, random_positions=64)
    assert all(cls.eager_because({}) is None for cls in PE_CLASSES.values()) and REGISTRY


BIASED = [pe for pe, cls in PE_CLASSES.items() if cls.adds_bias]


class MaskDtypes(TorchDispatchMode):
    """The dtype of every attention mask an attention kernel receives, below autocast."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "scaled_dot_product" in func.__name__:
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            if isinstance(mask, torch.Tensor):
                self.seen.append(mask.dtype)
        return func(*args, **kwargs)


@pytest.mark.parametrize("pe", BIASED)
def test_a_biased_layer_hands_attention_a_float32_mask_under_bf16_autocast(pe):
    """Under autocast SDPA is a lower-precision op: the float32 bias mask must reach the kernel as float32
    (a bf16 ALiBi bias loses adjacent keys' differences), as on the GPU, where every biased PE takes SDPA."""
    assert BIASED and {"t5", "alibi"} <= set(BIASED)
    torch.manual_seed(0)
    model = build_model(pe, vocab_size=20, preset="tiny", n_layers=1)
    tokens = torch.randint(0, 20, (2, 9))
    padding = torch.ones(2, 9, dtype=torch.long)  # a mask: the SDPA path, not the CPU flash one
    # without grad the CPU's SDPA is one kernel the watch sees (a learned mask's gradient would take its
    # math path, decomposed before the watch); training takes the same autocast-free SDPA call
    with torch.no_grad(), MaskDtypes() as watch, torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens, attention_mask=padding)
    assert watch.seen and set(watch.seen) == {torch.float32}, watch.seen
    assert torch.isfinite(logits).all()


class Watched(CapturedOnCPU):
    """The stand-in with a sync check: the ops that read the host (the CPU's sign of a GPU sync)."""

    def _sync_check(self, step):
        with HostSyncs() as watch:
            loss = step()
        return loss, (f"{watch.seen[0]} called" if watch.seen else None)


def _step_of(weight: torch.Tensor, syncs: bool):
    """A step with no optimizer of its own: weight -= lr * gradient of (weight x batch).sum(), reading the
    host when ``syncs``."""
    optimizer = torch.optim.SGD([weight], lr=0.1)

    def eager(batch):
        loss = (weight * batch[0]).sum()
        if syncs:
            bool(loss > 0)
        (grad,) = torch.autograd.grad(loss, weight)
        with torch.no_grad():
            weight.sub_(optimizer.param_groups[0]["lr"] * grad)
        return loss.detach()

    return eager, optimizer


@pytest.mark.parametrize("syncs", [False, True])
def test_a_step_that_syncs_in_its_last_warm_up_stays_eager_with_one_line(syncs, capsys):
    """Found eagerly, before any capture: the member says where in one line and takes every step
    eagerly (the same weights as steps never captured); a step that does not sync is captured."""
    weight = torch.ones(3, dtype=torch.float64, requires_grad=True)
    eager, optimizer = _step_of(weight, syncs)
    step = Watched(eager, optimizer, [0.1] * 8, 0, CPU, name="runs/x")
    for i in range(8):
        step((torch.full((3,), float(i + 1), dtype=torch.float64),))
    assert step.captured is not syncs and (step.failed is not None) is syncs
    err = capsys.readouterr().err
    if syncs:
        assert err.count("\n") == 1 and err.startswith("probe: runs/x: its training step waits on the host")
        assert "_local_scalar_dense called" in err and "runs eagerly" in err
    expected = 1 - 0.1 * sum(range(1, 9))
    torch.testing.assert_close(weight.detach(), torch.full((3,), expected, dtype=torch.float64))


class SyncDebugMode:
    """torch.cuda's sync debug mode as an H200 showed it (torch 2.11): setting a mode other than "default"
    warns once that the mode is a prototype, and a synchronising call warns while the mode is "warn"."""

    PROTOTYPE = "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
    SYNC = "called a synchronizing CUDA operation"

    def __init__(self) -> None:
        self.mode = 0

    def get(self) -> int:
        return self.mode

    def set(self, mode) -> None:
        self.mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)
        if self.mode:
            warnings.warn(self.PROTOTYPE, stacklevel=2)

    def sync(self) -> None:
        if self.mode == 1:
            warnings.warn(self.SYNC, stacklevel=2)


@pytest.mark.parametrize("syncs", [False, True])
def test_the_sync_check_counts_the_steps_syncs_not_torchs_notice_about_the_mode(syncs, monkeypatch):
    """The GPU's first chance left NoPE eager on torch's "prototype feature" notice, which setting the mode
    prints once per process: only a warning raised by the step itself marks it as syncing."""
    cuda = SyncDebugMode()
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", cuda.get)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", cuda.set)

    def step() -> torch.Tensor:
        if syncs:
            cuda.sync()
        return torch.ones(())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing of the check's own reaches the user
        loss, where = CapturedStep._sync_check(None, step)
    assert loss.item() == 1 and cuda.mode == 0
    assert (where is not None) is syncs
    if syncs:
        assert where.startswith(SyncDebugMode.SYNC)


def _for_loop_adamw(monkeypatch) -> None:
    """A tensor learning rate needs the for-loop AdamW on a CPU (the GPU's is fused)."""
    import probe.training.loop as loop

    real = loop.make_optimizer

    def make(*args, **kwargs):
        groups = real(*args, **kwargs).param_groups
        return torch.optim.AdamW([{**g, "foreach": False} for g in groups])

    monkeypatch.setattr(loop, "make_optimizer", make)


class BreaksOnCapture(CapturedOnCPU):
    """A capture that breaks as torch's does: an op fails inside the graph, then ``capture_end`` raises its
    own error while that one is handled."""

    def _record(self, body):
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\\nmore detail")
        finally:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B012


def test_a_capture_that_breaks_stops_every_member_with_one_line_naming_its_cause(tmp_path, monkeypatch):
    """No member goes on in the spoilt process (the others neither), and the line says what broke, not
    what broke after it, and which flag avoids it."""
    import probe.training.loop as loop
    from probe.training.bookkeeping import train_stacked

    monkeypatch.setattr(loop, "CapturedStep", BreaksOnCapture)
    _for_loop_adamw(monkeypatch)
    runs = [(_config(pe, steps=12, checkpoint_every=100), tmp_path / pe) for pe in ("nope", "t5")]
    steps = []
    with pytest.raises(CaptureFailed) as error:
        train_stacked(
            runs, CPU, engine=Engine(capture=True), on_step=lambda path, step, *_: steps.append((path.name, step))
        )
    message = str(error.value)
    assert "\n" not in message and isinstance(error.value, ProbeError)
    assert "operation not permitted when stream is capturing" in message and "previous error" not in message
    assert message.endswith("train with --no-capture") and "nope" in message
    assert steps == []  # the first member broke at its 4th step: no member took a step after it
    assert not (tmp_path / "t5" / "config.json").exists()


def test_cause_of_follows_the_chain_to_the_first_error():
    try:
        try:
            raise ValueError("the op")
        except ValueError as inner:
            raise RuntimeError("capture_end") from inner
    except RuntimeError as outer:
        assert cause_of(outer) == "ValueError: the op"


def test_a_captured_study_killed_midway_resumes_with_the_masks_an_uninterrupted_one_draws(tmp_path, monkeypatch):
    """Dropout on, each member captured (the CPU stand-in): each member draws from its own generators,
    swapped in around its step as the eager loop does, and its state file keeps them, so the resumed
    runs end on the uninterrupted runs' weights; the process's own random state is left alone."""
    import probe.training.loop as loop
    from probe.training.bookkeeping import train_stacked

    monkeypatch.setattr(loop, "CapturedStep", CapturedOnCPU)
    _for_loop_adamw(monkeypatch)
    pes = ("nope", "alibi")
    runs = lambda root: [(_config(pe, dropout=0.1, steps=20), root / pe) for pe in pes]  # noqa: E731
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_stacked(runs(tmp_path / "whole"), CPU, engine=Engine(capture=True))
    assert torch.equal(torch.rand(3), expected)

    def interrupt(path, step, loss, speed):
        if path.name == "nope" and step == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_stacked(runs(tmp_path / "split"), CPU, engine=Engine(capture=True), on_step=interrupt)
    resumed = train_stacked(runs(tmp_path / "split"), CPU, engine=Engine(capture=True))
    assert [r.status for r in resumed] == ["resumed"] * len(pes)
    for pe in pes:
        whole, split = (load_checkpoint(tmp_path / part / pe) for part in ("whole", "split"))
        assert whole.config.pe == pe
        a, b = whole.state_dict(), split.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), pe
        stored = json.loads((tmp_path / "split" / pe / "config.json").read_text())
        assert stored["metrics"]["step_engine"]["captured"], pe


def test_evaluation_builds_no_autograd_graph(tmp_path):
    """Selection's teacher-forced pass and the held-out greedy decoding, on a model in training mode whose
    weights require grad: no layer's output carries a graph."""
    from probe.tasks.decoding import teacher_forced_exact_match

    trainer = Trainer(_config("t5", eval_every=10), tmp_path, CPU)
    graphs = []
    for block in trainer.model.blocks:
        block.register_forward_hook(lambda module, args, out: graphs.append(out.requires_grad))
    trainer.model.train()
    teacher_forced_exact_match(trainer.model, trainer.validation, device=CPU)
    trainer.model.train()
    trainer.source.validate(trainer.model, 4, CPU)
    assert len(graphs) > 2 * len(trainer.model.blocks) and not any(graphs)


def test_capture_flags_are_parsed_recorded_and_refused_on_a_cpu(tmp_path, capsys):
    from probe.cli import main

    common = ["--task", "reverse", "-o", "train_length=4", "--checkpoints", str(tmp_path), "--steps", "4"]
    model = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]
    assert main(["train", *common, "--pe", "nope", *model, "--no-capture", "--eval-every", "0"]) == 0
    (config,) = tmp_path.glob("**/nope/**/config.json")
    engine = json.loads(config.read_text())["metrics"]["step_engine"]
    assert engine == {"compile": False, "capture": False, "captured": False}
    capsys.readouterr()
    for command in (["train", *common, "--pe", "nope"], ["reproduce", "--steps", "4", "--checkpoints", str(tmp_path)]):
        assert main([*command, "--capture"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "CUDA graphs need a GPU; pass --no-capture" in err
    assert main(["sweep", "--task", "reverse", "--pe", "nope", "--capture", "--checkpoints", str(tmp_path)]) == 2
    assert "--capture needs --gpus-per-run above 0" in capsys.readouterr().err
