"""Memory bounded by design: the analyses read attention one layer (or one block of layers) at a time, so the
largest tensor any of them makes, seen by a dispatch hook on every op, is one layer's maps of one batch;
and reading a long input by blocks of layers gives exactly what reading every layer at once gives."""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import LargestTensor

from probe.analysis.distances import attended_results
from probe.analysis.layerwise import group_distances
from probe.analysis.patterns import capture_layers, read_layers, read_pairs, run_patterns
from probe.analysis.position_hooks import collect, layer_blocks
from probe.metrics import layer_distances
from probe.models.transformer import build_model
from probe.subjects.inputs import Inputs, PositionInput, WindowGroup
from probe.subjects.memory import WORKING_BYTES, batches_within, layer_bytes, per_batch
from probe.subjects.run_info import RunInfo
from probe.subjects.subject import Loaded, Subject
from probe.subjects.windows import ContextWindows

LAYERS, HEADS, C = 4, 4, 320  # the window: one layer's float64 maps (3.3 MB) pass the JSD's 2 MiB blocks
VOCAB = 50


def _model(seed: int = 0):
    return build_model("rotary", vocab_size=VOCAB, seed=seed, n_layers=LAYERS, n_heads=HEADS, d_head=8, d_model=32)


def _windows(n: int = 3, context: int = C) -> WindowGroup:
    tokens = torch.randint(VOCAB, (n, context), generator=torch.Generator().manual_seed(1))
    return WindowGroup(ContextWindows(context, 2.0, False, tuple(f"f{i}.py" for i in range(n)), tokens))


def _loaded(model) -> Loaded:
    return Loaded(Subject("r", None), model, RunInfo("rotary", "rotary", 0, "r"))


ONE_LAYER = HEADS * C * C * 8  # one input's maps of one layer, in float64: the bound every analysis keeps to
EVERY_LAYER = LAYERS * HEADS * C * C * 4  # what holding all layers' float32 maps of one input costs


def test_the_bound_can_fail():
    """Holding every layer's maps of one window (what run_patterns does for a figure) passes the bound."""
    with LargestTensor() as seen:
        run_patterns(_model(), _windows(1).windows.tokens)
    assert seen.largest >= EVERY_LAYER > ONE_LAYER


def test_distances_compare_and_positions_make_no_tensor_larger_than_one_layers_maps():
    """(compare's B runs in a thread of its own, where a dispatch mode does not reach: its ops are A's, on a
    model of the same shape.)"""
    model, other, group = _model(), _model(seed=1), _windows()
    inputs = Inputs([group], 0, "code", {})
    settings = dict(weightings=["argmax", "attention"], normalization="text", bins=10, device=torch.device("cpu"))
    with LargestTensor() as seen:
        attended_results(_loaded(model), inputs, batch_size=1, **settings)
    assert 0 < seen.largest <= ONE_LAYER
    with LargestTensor() as seen:
        group_distances(model, other, group, list(range(LAYERS)), "jsd", torch.device("cpu"), 1, 2**30, {})
    assert 0 < seen.largest <= ONE_LAYER
    with LargestTensor() as seen:
        collect(
            model,
            group.position_inputs(),
            pad_id=0,
            batch_size=1,
            max_probe_positions=16,
            device=torch.device("cpu"),
            sink_first=(1,),
        )
    assert 0 < seen.largest <= ONE_LAYER


def test_compare_reads_both_models_in_lockstep_as_each_would_alone():
    """read_pairs runs B in a second thread that meets A layer by layer: each pair is the maps each model makes
    alone (any pairing, B's layers repeated or skipped), and group_distances equals the metric on them."""
    model, other, group = _model(), _model(seed=1), _windows()
    tokens = group.windows.tokens
    layers_b = [0, 1, 1, 3]  # any non-decreasing pairing of A's layers with B's
    alone_a, alone_b = run_patterns(model, tokens), run_patterns(other, tokens)
    met: list[int] = []

    def fold(layer: int, maps_a, maps_b) -> None:
        met.append(layer)
        torch.testing.assert_close(maps_a, alone_a[:, layer], rtol=0, atol=0)
        torch.testing.assert_close(maps_b, alone_b[:, layers_b[layer]], rtol=0, atol=0)

    read_pairs(model, other, tokens, layers_b, fold)
    assert met == [0, 1, 2, 3]
    values, pairwise = group_distances(model, other, group, layers_b, "jsd", torch.device("cpu"), 16, 2**30, {})
    for layer, other_layer in enumerate(layers_b):
        expected = layer_distances(
            alone_a[:, layer : layer + 1].double(), alone_b[:, other_layer : other_layer + 1].double()
        )
        torch.testing.assert_close(values[:, layer], expected.per_layer[:, 0], rtol=0, atol=0)
        torch.testing.assert_close(pairwise[:, layer], expected.pairwise[:, 0], rtol=0, atol=0)


def test_an_error_in_either_model_ends_both_passes():
    model, other, group = _model(), _model(seed=1), _windows(1, 16)

    def fails(layer: int, maps_a, maps_b) -> None:
        if layer == 1:
            raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        read_pairs(model, other, group.windows.tokens, [0, 1, 2, 3], fails)
    broken = _model(seed=2)
    broken.blocks[2].attn.hook_pattern.add_hook(lambda value, hook: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        read_pairs(model, broken, group.windows.tokens, [0, 1, 2, 3], lambda *args: None)
    broken.reset_hooks()
    assert not any(t.name == "probe-model-b" for t in threading.enumerate())  # no pass left running


def test_positions_by_blocks_of_layers_equal_every_layer_at_once():
    model, group = _model(), _windows(4, 48)
    inputs = [
        PositionInput(x.tokens[: 24 if i % 2 else 48], bool(i % 2), 24 if i % 2 else 48)
        for i, x in enumerate(group.position_inputs())
    ]
    settings = dict(pad_id=0, batch_size=2, max_probe_positions=16, device=torch.device("cpu"), sink_first=(1, 4))
    assert len(layer_blocks(LAYERS, 10**6, 0, 1)) == LAYERS and len(layer_blocks(LAYERS, 1, 0, 2**30)) == 1
    one = collect(model, inputs, budget=1, **{**settings, "batch_size": 1})
    every = collect(model, inputs, budget=2**30, **{**settings, "batch_size": 1})
    for view in ("seen", "unseen", "seen_rows", "unseen_rows"):
        for name, value in one.decomposition(view).items():
            torch.testing.assert_close(value, every.decomposition(view)[name], rtol=0, atol=0, equal_nan=True)
    for a, b in zip(one.rows, every.rows):
        torch.testing.assert_close(torch.cat(a), torch.cat(b), rtol=0, atol=0)
    torch.testing.assert_close(one.moment_sums().sums, every.moment_sums().sums, rtol=0, atol=0)
    for k in (1, 4):
        for a, b in zip(one.sinks[k], every.sinks[k]):
            torch.testing.assert_close(torch.cat(a), torch.cat(b), rtol=0, atol=0)


def test_read_layers_hands_over_each_layer_as_run_patterns_holds_it_and_stops_early():
    model, tokens = _model(), _windows(2, 32).windows.tokens
    every = run_patterns(model, tokens)  # [batch, layer, head, query, key]
    seen: list[int] = []
    read_layers(model, tokens, lambda layer, maps: seen.append(layer), layers=[2, 1])
    assert seen == [1, 2]
    kept = capture_layers(model, tokens, [3])
    torch.testing.assert_close(kept[3], every[:, 3], rtol=0, atol=0)
    lengths = torch.tensor([32, 20])
    masked = capture_layers(model, tokens, [0], lengths)[0]
    assert masked[1, :, 20:].abs().sum() == 0 and masked[1, :, :, 20:].abs().sum() == 0


def test_batches_stay_within_the_budget():
    one = layer_bytes(HEADS, C)
    assert one == HEADS * C * C * WORKING_BYTES
    assert per_batch(one, 16, 3 * one + 1) == 3 and per_batch(one, 16, 1) == 1 and per_batch(one, 2, 10 * one) == 2
    sizes = [10, 20, 30, 40]
    spans = list(batches_within(sizes, 1, 16, 2 * 30 * 30))
    assert spans == [(0, 2), (2, 3), (3, 4)]  # 2 x 20² fits 1,800 bytes; 3 x 30² and 2 x 40² do not
