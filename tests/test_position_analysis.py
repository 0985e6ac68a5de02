"""`probe positions` and :mod:`probe.metrics.position_stats` on answers known without the code under test:
hand-worked numbers, exact additive logits, the Theorem 1 and 2 constructions, a hand-set ALiBi head,
a T5 head and an APE model with the content path zeroed, hand-made attention patterns, and a model
with no position information."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from helpers import tiny_model

from probe.analysis.position_hooks import probe_positions
from probe.analysis.positions import analyse_positions
from probe.cli import main
from probe.metrics.position_stats import (
    bootstrap_probe_scores,
    decompose_logits,
    fit_ridge,
    log_slope,
    logit_sums,
    moment_sums,
    position_variance,
    probe_scores,
    probe_statistics,
    row_entropy,
    sink_share,
)
from probe.models import build_model
from probe.subjects.inputs import PositionInput
from probe.subjects.run_info import RunInfo
from probe.subjects.settings import ReadSettings
from probe.theorems.constructions import Content, alibi_target, theorem_model

INFO = RunInfo("test", "nope", 0, "test")


def _random_inputs(
    vocab: int, seen: range, unseen: range, per_length: int = 3, seed: int = 0, first: int | None = 0
) -> list[PositionInput]:
    """Random token sequences (``first`` at position 0 where given) of each length, seen and unseen."""
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for lengths, seen_flag in ((seen, True), (unseen, False)):
        for length in lengths:
            for _ in range(per_length):
                tokens = torch.randint(1, vocab, (length,), generator=generator)
                if first is not None:
                    tokens[0] = first
                inputs.append(PositionInput(tokens, seen_flag, length))
    return inputs


def _shares(result, layer: int, head: int, view: str = "seen") -> dict[str, float]:
    seen = result.decomposition[view]
    return {name: seen[name][layer][head] for name in seen}


# -- ridge and probe scores ------------------------------------------------------------------------
def test_ridge_recovers_a_linear_map_and_reads_nothing_from_constant_features():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=generator, dtype=torch.float64)
    w = torch.tensor([1.5, -2.0, 0.0, 0.25, 3.0], dtype=torch.float64)
    ridge = fit_ridge(x, x @ w + 7.0, alpha=1e-12)
    assert torch.allclose(ridge.weight, w, atol=1e-9) and abs(ridge.bias.item() - 7.0) < 1e-9
    y = torch.arange(10, dtype=torch.float64)
    constant = fit_ridge(torch.ones(10, 3), y)
    assert torch.equal(constant.weight, torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(constant.predict(torch.ones(4, 3)), torch.full((4,), 4.5, dtype=torch.float64))


def test_probe_scores_match_a_hand_worked_example():
    """ŷ = 0.4, 1.6, 2 for y = 0, 1, 2: SSE = 0.52, SST = 2, R² = 0.74; MAE = 1/3; round(ŷ) right twice."""
    per_example = probe_statistics(
        torch.tensor([0.4, 1.6, 2.0], dtype=torch.float64), torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0, 0, 1]), 2
    )
    scores = probe_scores(per_example.sum(0))
    assert scores["r2"].item() == pytest.approx(0.74, abs=1e-12)
    assert scores["mae"].item() == pytest.approx(1 / 3, abs=1e-12)
    assert scores["accuracy"].item() == pytest.approx(2 / 3, abs=1e-12)


def test_bootstrap_interval_lies_between_the_best_and_worst_example():
    """Example 0 is read exactly, example 1 never: every resample's accuracy lies in [0, 1] and the
    interval of 20 such examples is neither a point nor outside the per-example extremes."""
    target = torch.arange(4.0).repeat(20)
    example = torch.arange(20).repeat_interleave(4)
    predicted = torch.where(example % 2 == 0, target, target + 0.7)
    per_example = probe_statistics(predicted, target, example, 20)
    value, low, high = bootstrap_probe_scores(per_example, n_resamples=500)["accuracy"]
    assert value == pytest.approx(0.5) and 0.0 < low < 0.5 < high < 1.0


# -- the decomposition of logits ---------------------------------------------------------------------
def test_decomposition_matches_a_hand_worked_example():
    """Two sequences of 3 tokens, logits = d and 2d (d = i − j): pooled over the 12 causal logits, SST = 18;
    per distance SSE = 3 (R² 5/6); per key SSE = 14.25 (R² 0.2083); cell means SSE = 3 over 6 cells,
    adjusted 1 − (3/6)/(18/11) = 25/36; f(d) + g(j) can do no better than the cell means nor worse than f(d)."""
    d = torch.arange(3.0)[:, None] - torch.arange(3.0)[None, :]  # [query, key]
    scores = torch.stack([d, 2 * d])[:, None].masked_fill(d < 0, float("-inf"))  # [batch, head, query, key]
    shares = decompose_logits(logit_sums(scores, torch.tensor([3, 3])))
    assert shares["relative"].item() == pytest.approx(5 / 6, abs=1e-12)
    assert shares["absolute"].item() == pytest.approx(1 - 14.25 / 18, abs=1e-12)
    assert shares["both"].item() == pytest.approx(5 / 6, abs=1e-12)
    assert shares["position"].item() == pytest.approx(25 / 36, abs=1e-12)
    assert shares["content"].item() == pytest.approx(1 / 6, abs=1e-12)


def _r2_by_lstsq(scores: np.ndarray, lengths: list[int], within_rows: bool) -> dict[str, np.ndarray]:
    """The oracle: per head, R² of least squares (numpy) on the explicit one-hot designs of the distance, the
    key and both, over every causal logit of every example's valid rows (centred within each row if asked)."""
    batch, heads, T, _ = scores.shape
    out = {name: np.zeros(heads) for name in ("relative", "absolute", "both")}
    for h in range(heads):
        x, design = [], []
        for b in range(batch):
            for i in range(lengths[b]):
                js = np.arange(i + 1)
                onehot = np.zeros((i + 1, 2 * T))
                onehot[js, i - js] = 1.0
                onehot[js, T + js] = 1.0
                values = scores[b, h, i, : i + 1]
                if within_rows:
                    values, onehot = values - values.mean(), onehot - onehot.mean(0)
                x.append(values)
                design.append(onehot)
        x, design = np.concatenate(x), np.concatenate(design)
        sst = ((x - (0 if within_rows else x.mean())) ** 2).sum()
        for name, cols in (("relative", slice(0, T)), ("absolute", slice(T, 2 * T)), ("both", slice(0, 2 * T))):
            fit, *_ = np.linalg.lstsq(design[:, cols], x, rcond=None)
            out[name][h] = 1 - ((x - design[:, cols] @ fit) ** 2).sum() / sst
    return out


@pytest.mark.parametrize("within_rows", [False, True])
def test_every_fit_is_numpys_least_squares_on_the_explicit_design(within_rows):
    """Random logits, right padding: each share equals numpy's lstsq R² on the one-hot designs written out
    (the additive fit is read through the Schur complement, never the 2T x 2T pseudo-inverse)."""
    generator = torch.Generator().manual_seed(3)
    lengths, T = [9, 5, 7], 9
    scores = torch.randn(3, 2, T, T, generator=generator, dtype=torch.float64)
    shares = decompose_logits(logit_sums(scores, torch.tensor(lengths)), within_rows=within_rows)
    oracle = _r2_by_lstsq(scores.numpy(), lengths, within_rows)
    for name, expected in oracle.items():
        np.testing.assert_allclose(shares[name].numpy(), expected, rtol=1e-9, atol=1e-10, err_msg=name)


def test_additive_logits_are_explained_by_both_and_by_neither_alone():
    """x = f(i − j) + g(j) with random f, g, sequences of several lengths and right padding: R²_both = 1,
    each basis alone < 1."""
    generator = torch.Generator().manual_seed(1)
    T = 12
    f, g = (
        torch.randn(T, generator=generator, dtype=torch.float64),
        torch.randn(T, generator=generator, dtype=torch.float64),
    )
    i = torch.arange(T)
    x = f[(i[:, None] - i[None, :]).clamp(min=0)] + g[None, :]  # [query, key]
    lengths = torch.tensor([12, 7, 9, 4])
    scores = x.expand(4, 2, T, T).clone()  # [batch, head, query, key]
    scores[:, 1] = 3 * scores[:, 1] + 1  # an affine copy: the same shares
    for b, length in enumerate(lengths):
        scores[b, :, length:] = 1e6  # padding rows must not count
    shares = decompose_logits(logit_sums(scores, lengths))
    assert torch.allclose(shares["both"], torch.ones(2, dtype=torch.float64), atol=1e-10)
    assert (shares["relative"] < 0.95).all() and (shares["absolute"] < 0.95).all()
    assert torch.allclose(shares["relative"][0], shares["relative"][1], atol=1e-10)


def test_row_offsets_leave_the_within_row_view_and_only_it():
    """x = c(example, i) + f(i − j) with random row offsets c and a random f: softmax ignores c, so within
    rows f(i − j) explains everything (R² = 1), while on the raw logits c counts against it."""
    generator = torch.Generator().manual_seed(2)
    T = 10
    f = torch.randn(T, generator=generator, dtype=torch.float64)
    i = torch.arange(T)
    offsets = 3 * torch.randn(5, 1, T, 1, generator=generator, dtype=torch.float64)  # [batch, head, query, 1]
    scores = offsets + f[(i[:, None] - i[None, :]).clamp(min=0)]  # [batch, head, query, key]
    stats = logit_sums(scores, torch.tensor([10, 8, 6, 10, 3]))
    rows, raw = decompose_logits(stats, within_rows=True), decompose_logits(stats)
    assert rows["relative"].item() == pytest.approx(1.0, abs=1e-10)
    assert rows["both"].item() == pytest.approx(1.0, abs=1e-10) and rows["absolute"].item() < 0.95
    assert raw["relative"].item() < 0.5


def test_alibi_head_is_relative(tmp_path):
    """A hand-set ALiBi head: with no content its logits are −m(i − j): R²_rel = 1 and it is "relative";
    with random content, f(d) = −m d is one candidate, so 1 − R²_rel <= Var(content) / Var(logits)."""
    rng = np.random.default_rng(0)
    zero = Content(
        embed=np.zeros((8, 4)),
        W_Q=rng.normal(size=(4, 4)),
        W_K=rng.normal(size=(4, 4)),
        b_Q=np.zeros(4),
        b_K=np.zeros(4),
    )
    inputs = _random_inputs(8, range(6, 20, 2), range(24, 30, 2))
    result = analyse_positions(alibi_target(zero, 0.5, 64, dtype=torch.float64), inputs, INFO, n_resamples=10)
    shares = _shares(result, 0, 0)
    assert shares["relative"] == pytest.approx(1.0, abs=1e-10) and shares["absolute"] < 0.9
    assert result.kinds == [["relative"]]
    rows = _shares(result, 0, 0, "seen_rows")  # within a row, −m(i − j) = m j − m i: key position explains it too
    assert rows["relative"] == pytest.approx(1.0, abs=1e-10) and rows["absolute"] == pytest.approx(1.0, abs=1e-10)

    content = Content(
        embed=rng.normal(size=(8, 4)),
        W_Q=rng.normal(size=(4, 4)) / 4,
        W_K=rng.normal(size=(4, 4)) / 4,
        b_Q=np.zeros(4),
        b_K=np.zeros(4),
    )
    model = alibi_target(content, 0.5, 64, dtype=torch.float64)
    result = analyse_positions(model, inputs, INFO, n_resamples=10)
    q, k = content.embed @ content.W_Q, content.embed @ content.W_K  # [vocab, d_head]
    cells, totals = [], []
    for x in (x for x in inputs if x.seen):
        ids = x.tokens.numpy()
        c = q[ids] @ k[ids].T  # [query, key] content logits
        d = np.arange(len(ids))[:, None] - np.arange(len(ids))[None, :]
        causal = d >= 0
        cells.append(c[causal])
        totals.append((c - 0.5 * d)[causal])
    content_var, total_var = np.concatenate(cells).var(), np.concatenate(totals).var()
    shares = _shares(result, 0, 0)
    assert 1 - shares["relative"] <= content_var / total_var + 1e-9
    assert shares["relative"] > shares["absolute"] and result.kinds == [["relative"]]


def test_t5_head_without_content_is_relative():
    """A T5 layer whose queries are zero: its logits are the bucket bias of i − j alone."""
    model = build_model("t5", vocab_size=10, n_layers=1, n_heads=2, seed=0).double()
    with torch.no_grad():
        model.blocks[0].attn.W_Q.zero_()
        model.pe.relative_attention_bias.normal_(generator=torch.Generator().manual_seed(0))
    result = analyse_positions(model, _random_inputs(10, range(8, 40, 4), range(44, 50, 3)), INFO, n_resamples=10)
    for head in range(2):
        shares = _shares(result, 0, head)
        assert shares["relative"] == pytest.approx(1.0, abs=1e-10) and shares["absolute"] < 0.99
        rows = _shares(result, 0, head, "seen_rows")  # T5's buckets are not linear in i − j
        assert rows["relative"] == pytest.approx(1.0, abs=1e-10) and rows["absolute"] < 0.99
    assert result.kinds == [["relative", "relative"]]


def test_ape_model_with_the_content_path_zeroed_is_absolute():
    """Sinusoidal APE, no token embedding, constant queries (b_Q only): logits = b_Q · k(p_j), a function of
    the key position alone: R²_abs = 1, the head is "absolute"."""
    model = build_model("ape", vocab_size=10, n_layers=1, n_heads=2, bias=True, seed=0).double()
    with torch.no_grad():
        model.W_E.zero_()
        model.blocks[0].attn.W_Q.zero_()
        model.blocks[0].attn.b_Q.normal_(generator=torch.Generator().manual_seed(0))
    result = analyse_positions(model, _random_inputs(10, range(8, 30, 4), range(34, 40, 3)), INFO, n_resamples=10)
    for head in range(2):
        shares = _shares(result, 0, head)
        assert shares["absolute"] == pytest.approx(1.0, abs=1e-9) and shares["relative"] < 0.99
        rows = _shares(result, 0, head, "seen_rows")
        assert rows["absolute"] == pytest.approx(1.0, abs=1e-9) and rows["relative"] < 0.99
    assert result.kinds == [["absolute", "absolute"]]


# -- the Theorem 1 and 2 constructions -------------------------------------------------------------------
@pytest.fixture(scope="module")
def theorem():
    model = theorem_model(64, dtype=torch.float64)
    inputs = _random_inputs(model.cfg.d_vocab, range(4, 33, 2), range(40, 65, 6))
    return model, inputs, analyse_positions(model, inputs, INFO, n_resamples=50, alpha=1e-12)


def test_theorem_1_position_is_read_exactly_after_layer_1(theorem):
    """Theorem 1: layer 1 writes t into residual dim 3, so a linear read-out of stream 1 is exact on held-out
    seen lengths, on unseen lengths and beyond the positions it was fitted on (it extrapolates); with the
    ridge penalty near zero, to rounding."""
    _, _, result = theorem
    rows = {(r["set"]): r for r in result.probes if r["target"] == "position" and r["stream"] == 1}
    for name in ("heldout", "unseen", "beyond"):
        assert rows[name]["accuracy"] == 1.0 and rows[name]["mae"] < 1e-6 and rows[name]["r2"] > 1 - 1e-9
    embedding = next(
        r for r in result.probes if r["target"] == "position" and r["stream"] == 0 and r["set"] == "heldout"
    )
    assert embedding["r2"] < 0.5  # tokens are random: only <bos> at 0 tells position


def test_theorem_2_heads_are_relative(theorem):
    """Theorem 2: layer 2's logits are f_cnt − (t − i); f(d) = −d is one candidate for the distance basis,
    so 1 − R²_rel <= Var(f_cnt) / Var(logits), f_cnt = logits + (t − i) read from the model."""
    model, inputs, result = theorem
    content, total = [], []
    for x in (x for x in inputs if x.seen):
        _, cache = model.run_with_cache(x.tokens[None], names_filter="blocks.1.attn.hook_attn_scores")
        scores = cache["blocks.1.attn.hook_attn_scores"][0].numpy()  # [head, query, key]
        d = np.arange(len(x.tokens))[:, None] - np.arange(len(x.tokens))[None, :]
        causal = d >= 0
        content.append((scores + d)[:, causal])
        total.append(scores[:, causal])
    content, total = np.concatenate(content, 1), np.concatenate(total, 1)
    for head in range(model.cfg.n_heads):
        shares = _shares(result, 1, head)
        assert 1 - shares["relative"] <= content[head].var() / total[head].var() + 1e-9
        assert shares["relative"] > shares["absolute"]
    assert result.kinds[1] == ["relative"] * model.cfg.n_heads


def test_no_position_information_gives_r2_zero():
    """NoPE, every token the same: the embedding is the same vector everywhere, so the probe on stream 0
    predicts the mean position: R² = 0 where it was fitted, <= 0 elsewhere, and it reads no distance."""
    model = build_model("nope", vocab_size=6, n_layers=1, seed=0).double()
    inputs = [PositionInput(torch.full((n,), 3), n < 20, n) for n in range(6, 30, 2) for _ in range(2)]
    result = analyse_positions(model, inputs, INFO, n_resamples=10)
    rows = {r["set"]: r for r in result.probes if r["target"] == "position" and r["stream"] == 0}
    assert abs(rows["fit"]["r2"]) < 1e-12
    assert rows["heldout"]["r2"] <= 1e-12 and rows["unseen"]["r2"] < 0


# -- sinks and variance --------------------------------------------------------------------------------
def test_sink_share_of_hand_made_patterns():
    """Example 0 (length 3): query 1 gives 0.5 to key 0, query 2 gives 0.2: share 0.35; uniform (1/2 + 1/3)/2.
    Example 1 (length 4, all on key 0): share 1. First 2 keys of example 1: queries 2, 3 give 1."""
    patterns = torch.zeros(2, 1, 4, 4)  # [batch, head, query, key]
    patterns[0, 0, 0, 0] = 1
    patterns[0, 0, 1, :2] = torch.tensor([0.5, 0.5])
    patterns[0, 0, 2, :3] = torch.tensor([0.2, 0.3, 0.5])
    patterns[0, 0, 3] = 9.0  # padding: beyond length 3
    patterns[1, 0, :, 0] = 1
    share, uniform = sink_share(patterns, torch.tensor([3, 4]))
    assert share[:, 0].tolist() == pytest.approx([0.35, 1.0])
    assert uniform.tolist() == pytest.approx([(1 / 2 + 1 / 3) / 2, (1 / 2 + 1 / 3 + 1 / 4) / 3])
    share, uniform = sink_share(patterns, torch.tensor([3, 4]), first=2)
    assert share[:, 0].tolist() == pytest.approx([0.2 + 0.3, 1.0])
    assert uniform.tolist() == pytest.approx([2 / 3, (2 / 3 + 2 / 4) / 2])


def test_row_entropy_is_scipys_entropy_of_each_real_row_averaged():
    from scipy.stats import entropy

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 6, 6, generator=generator, dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    patterns = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1)  # [batch, head, query, key]
    lengths = torch.tensor([4, 6])
    got, uniform = row_entropy(patterns, lengths)
    for b, n in enumerate(lengths.tolist()):
        for h in range(3):
            rows = [entropy(patterns[b, h, i, : i + 1].numpy()) for i in range(n)]
            assert float(got[b, h]) == pytest.approx(sum(rows) / n, rel=1e-12)
        assert float(uniform[b]) == pytest.approx(np.mean([np.log(i + 1) for i in range(n)]), rel=1e-12)
    flat = torch.where(causal, 1.0 / torch.arange(1, 7, dtype=torch.float64)[:, None], 0.0).expand(2, 3, 6, 6)
    torch.testing.assert_close(row_entropy(flat, lengths)[0], uniform[:, None].expand(2, 3))  # uniform: its own


def test_variance_against_position_of_hand_made_values():
    """Value ±t^(-1/2) (half the examples each sign): variance n/(n − 1) · 1/t; the log-log slope is −1."""
    n, T = 6, 10
    t = torch.arange(1, T + 1, dtype=torch.float64)
    sign = torch.tensor([1.0, -1.0] * (n // 2), dtype=torch.float64)
    values = (sign[:, None] * t.rsqrt()[None, :])[:, :, None].expand(n, T, 3)  # [batch, pos, d]
    variance = position_variance(moment_sums(values, torch.full((n,), T)))
    assert torch.allclose(variance, n / (n - 1) / t)
    assert log_slope(t, variance).item() == pytest.approx(-1.0, abs=1e-12)
    same = position_variance(moment_sums(torch.full((n, T, 3), 0.1), torch.full((n,), T)))
    assert torch.equal(same, torch.zeros(T, dtype=torch.float64))


def test_uniform_attention_over_iid_values_shrinks_as_one_over_t():
    """Chi et al. 2023: a NoPE layer with zero queries attends uniformly, so its output at t is the mean of
    t i.i.d. value vectors (random tokens, no <bos>): variance ∝ 1/t, log-log slope near −1 (sampling error
    of 400 sequences is a few percent)."""
    model = build_model("nope", vocab_size=50, n_layers=1, seed=0, normalization=None).double()
    with torch.no_grad():
        model.blocks[0].attn.W_Q.zero_()
    inputs = _random_inputs(50, range(24, 25), range(0), per_length=400, first=None)
    result = analyse_positions(model, inputs, INFO, n_resamples=10)
    assert result.variance["slope"][0] == pytest.approx(-1.0, abs=0.1)


def test_probe_positions_keeps_all_or_evenly_spaced():
    assert probe_positions(5, 8).tolist() == [0, 1, 2, 3, 4]
    kept = probe_positions(1000, 5).tolist()
    assert kept == [0, 250, 500, 749, 999] or kept == [0, 250, 500, 750, 999]


# -- the command ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three-step runs of reverse with L = 4: NoPE and ALiBi."""
    from probe.runs.folders import run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    root = tmp_path_factory.mktemp("positions")
    tiny = tiny_model(2)
    for pe in ("nope", "alibi"):
        config = TrainConfig(
            task="reverse",
            pe=pe,
            seed=0,
            task_options={"train_length": 4},
            steps=3,
            batch_size=16,
            model=tiny,
            eval_examples=4,
        )
        train_run(config, run_dir(root, "reverse", pe, 0, {"train_length": 4}), torch.device("cpu"))
    return root


def test_command_writes_json_csv_and_figures(runs, capsys):
    code = main(
        [
            "positions",
            "--task",
            "reverse",
            "-o",
            "train_length=4",
            "--checkpoints",
            str(runs),
            "--n-per-bucket",
            "3",
            "--resamples",
            "20",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["run"]["pe"] for m in data["models"]] == ["nope", "alibi"]
    model = data["models"][0]
    assert {r["target"] for r in model["probes"]} == {"position", "landmark_distance"}
    assert {r["stream"] for r in model["probes"]} == {0, 1, 2}
    assert len(model["decomposition"]["seen"]["relative"]) == 2 and len(model["kinds"][0]) == 2
    assert {s["layer"] for s in model["sinks"]} == {0, 1}  # blocks.0, blocks.1: TransformerLens' numbering
    entropy = model["entropy"]
    assert len(entropy["seen"]["heads"]) == 2 and len(entropy["unseen"]["heads"][0]) == 2
    assert 0 < entropy["seen"]["mean"] <= entropy["seen"]["uniform"] + 1e-9  # no row spreads wider than uniform
    assert entropy["unseen"]["uniform"] > entropy["seen"]["uniform"]  # longer rows
    table = next(p for p in data["files"] if p.endswith("/positions.csv"))
    assert {row["layer"] for row in csv.DictReader(open(table))} == {"0", "1"}
    names = {p.rsplit("/", 1)[-1] for p in data["files"]}
    assert {
        "positions.json",
        "positions.csv",
        "positions_probes.csv",
        "positions_heads.html",
        "positions_sinks.html",
        "positions_variance.html",
        "positions_probes.html",
    } <= names


@pytest.mark.parametrize(
    "argv, message",
    [
        (["positions", "/nonexistent/run"], "is not a run folder"),
        (["positions", "--task", "reverse", "-o", "train_length=4", "--pe", "rotary"], "no complete runs of rotary"),
        (["positions", "--task", "reverse", "-o", "train_length=4", "--alpha", "0"], "--alpha must be positive"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, argv, message, capsys):
    assert main([*argv, "--checkpoints", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_sequences_longer_than_the_model_are_one_error():
    from probe.errors import ProbeError

    model = build_model("ape", vocab_size=10, n_layers=1, n_ctx=16)
    with pytest.raises(ProbeError, match="more than this model's context"):
        analyse_positions(model, [PositionInput(torch.zeros(20, dtype=torch.long), True, 20)], INFO)


# -- a model TransformerLens loads from Hugging Face files --------------------------------------------------
@pytest.fixture(scope="module")
def bloom(tmp_path_factory):
    """A corpus of small Python files and a tiny BLOOM (ALiBi) whose query, key and value weights are zero:
    its logits are ALiBi's bias alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import BloomConfig, BloomForCausalLM, PreTrainedTokenizerFast

    base = tmp_path_factory.mktemp("hf-positions")
    source = base / "src"
    source.mkdir()
    for i in range(20):
        (source / f"m{i:02d}.py").write_text("".join(f"def f{j}(x):\n    return x * {j} + {i}\n\n" for j in range(4)))
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        [p.read_text() for p in source.iterdir()],
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    model = BloomForCausalLM(
        BloomConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            n_layer=2,
            n_head=4,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )
    )
    with torch.no_grad():
        for block in model.transformer.h:
            block.self_attention.query_key_value.weight.zero_()
            block.self_attention.query_key_value.bias.zero_()
    model.eval().save_pretrained(base / "bloom")
    tokenizer.save_pretrained(base / "bloom")
    return f"hf:{base / 'bloom'}", {"corpus": str(source), "heldout": 0.5, "context": 12}


def test_hf_bloom_adds_alibi_by_key_position_and_within_rows_it_is_relative(bloom):
    """BLOOM's code adds ALiBi as m_h · j (the key position; softmax drops the row's −m_h i), so its raw
    logits are absolute; within rows they are −m_h (i − j) as well: relative and absolute both explain all."""
    from probe.analysis.positions import positions_report

    name, options = bloom
    [result] = positions_report([name], ReadSettings(options=options, n_per_bucket=4), n_resamples=20).results
    assert result.n_inputs == {"seen": 4, "unseen": 4}  # windows of 12 (1x) and 24 (2x) tokens
    share = lambda view, name: torch.tensor(result.decomposition[view][name], dtype=torch.float64)  # noqa: E731  [layer, head]
    ones = torch.ones(2, 4, dtype=torch.float64)
    assert torch.allclose(share("seen", "absolute"), ones, atol=1e-6) and (share("seen", "relative") < 0.5).all()
    assert result.kinds == [["absolute"] * 4] * 2
    for name in ("relative", "absolute"):
        assert torch.allclose(share("seen_rows", name), ones, atol=1e-6)


def test_code_run_reads_held_out_windows_at_1x_and_2x(tmp_path):
    """A `probe pretrain`-style NoPE code run (two steps at T = 16): windows of 16 (seen) and 32 (unseen)
    tokens; no landmark, so only position probes; streams 0 .. n_layers."""
    from probe.analysis.positions import positions_report
    from probe.corpus import CorpusSpec
    from probe.runs.folders import run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    corpus = tmp_path / "src"
    corpus.mkdir()
    for i in range(16):
        (corpus / f"m{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n" for j in range(6)))
    options = {"corpus": str(corpus), "vocab_size": 300, "context": 16, "heldout": 0.25}
    config = TrainConfig(
        task="code",
        pe="nope",
        steps=2,
        batch_size=4,
        eval_examples=4,
        task_options=options,
        model=tiny_model(2, n_ctx=64),
    )
    path = train_run(
        config,
        run_dir(tmp_path / "runs", "code", "nope", 0, CorpusSpec.from_options(options).given()),
        torch.device("cpu"),
    ).path
    [result] = positions_report([path], ReadSettings(n_per_bucket=3), n_resamples=20).results
    assert result.n_inputs == {"seen": 3, "unseen": 3}
    assert {r["target"] for r in result.probes} == {"position"}
    assert {r["stream"] for r in result.probes} == {0, 1, 2}
    assert len(result.variance["position"]) == 32
