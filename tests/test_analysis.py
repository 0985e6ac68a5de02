"""`probe compare` / `probe distances` and the library calls behind them, on tiny runs made here."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_model

from probe.analysis import attended_distance_report, compare_report, compare_runs
from probe.analysis.patterns import collect_patterns
from probe.cli import main
from probe.errors import ProbeError
from probe.metrics import layer_distances
from probe.models import load_checkpoint
from probe.runs.folders import run_dir
from probe.subjects import sample_buckets, task_runs
from probe.subjects.settings import ReadSettings
from probe.tasks import Tokenizer
from probe.tasks import get as get_task
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

SMALL = tiny_model(2)
CPU = torch.device("cpu")


def make_run(root, pe: str, seed: int = 0, **model):
    config = TrainConfig(
        task="scan", pe=pe, seed=seed, steps=4, batch_size=8, eval_examples=2, model={**SMALL, **model}
    )
    path = run_dir(root, "scan", pe, seed)
    train_run(config, path, CPU)
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """checkpoints/scan/{nope seed 0, nope seed 1, t5 seed 0} and, apart, a one-layer alibi run."""
    base = tmp_path_factory.mktemp("runs")
    for pe, seed in (("nope", 0), ("nope", 1), ("t5", 0)):
        make_run(base / "checkpoints", pe, seed)
    make_run(base / "shallow", "alibi", n_layers=1)
    return base


def test_buckets_cover_seen_lengths_from_valid_and_unseen_from_test():
    scan = get_task("scan")
    buckets = sample_buckets(scan, n_per_bucket=3, seed=0)
    seen = [b for b in buckets if b.seen]
    unseen = [b for b in buckets if not b.seen]
    assert seen and unseen and {b.split for b in seen} == {"valid"} and {b.split for b in unseen} == {"test"}
    assert all(len(b.examples) <= 3 and all(e.length == b.length for e in b.examples) for b in buckets)
    assert [b.length for b in buckets] == sorted(b.length for b in buckets)
    assert sample_buckets(scan, 3, seed=0) == buckets and sample_buckets(scan, 3, seed=1) != buckets
    assert all(not b.seen for b in sample_buckets(scan, 3, lengths="unseen"))
    reverse = get_task("reverse", train_length=4)
    generated = sample_buckets(reverse, 2)
    assert {b.split for b in generated} == {"test"} and {b.seen for b in generated} == {True, False}


def test_compare_shapes_schema_and_determinism(root):
    ckpt = root / "checkpoints"
    a, b = run_dir(ckpt, "scan", "nope", 0), run_dir(ckpt, "scan", "t5", 0)
    result = compare_runs(a, b, ReadSettings(n_per_bucket=2), baseline=run_dir(ckpt, "scan", "nope", 1))
    n_buckets = len(sample_buckets(get_task("scan"), 2))
    assert len(result.buckets) == n_buckets and result.n_layers == 2
    assert result.values.shape == (result.overall.n_examples, 2)
    assert result.overall.head_matrix.shape == (2, 2, 2) and result.overall.argmin.shape == (2, 2)
    for stats in [*result.buckets, result.overall]:
        assert (stats.per_layer.low <= stats.per_layer.mean + 1e-12).all()
        assert (stats.per_layer.mean <= stats.per_layer.high + 1e-12).all()
        assert stats.average.low <= stats.average.mean <= stats.average.high
        # D^(l) is a min over pairs per example: at most the pair matrix's min after averaging
        assert (stats.per_layer.mean <= stats.head_matrix.flatten(-2).min(-1).values + 1e-12).all()
    assert result.baseline is not None and result.baseline.b.seed == 1 and result.baseline.b.label == "NoPE'"
    data = result.to_json()
    assert set(data) >= {"a", "b", "metric", "overall", "buckets", "baseline", "n_layers"}
    assert set(data["overall"]) == {
        "length",
        "seen",
        "split",
        "n_examples",
        "per_layer",
        "average",
        "head_matrix",
        "argmin",
    }
    rows = result.to_rows()
    assert len(rows) == 2 * (n_buckets + 1) * 3  # (buckets + all) × (2 layers + average), baseline too
    sides = {(r["pe_a"], r["seed_a"], r["pe_b"], r["seed_b"]) for r in rows}  # each joins eval.csv's pe, seed
    assert sides == {("nope", 0, "t5", 0), ("nope", 0, "nope", 1)}
    assert json.dumps(data) == json.dumps(
        compare_runs(a, b, ReadSettings(n_per_bucket=2), baseline=run_dir(ckpt, "scan", "nope", 1)).to_json()
    )


def test_bucket_means_are_per_example_layer_distances(root):
    ckpt = root / "checkpoints"
    a, b = load_checkpoint(run_dir(ckpt, "scan", "nope", 0)), load_checkpoint(run_dir(ckpt, "scan", "t5", 0))
    result = compare_runs(
        run_dir(ckpt, "scan", "nope", 0), run_dir(ckpt, "scan", "t5", 0), ReadSettings(n_per_bucket=3)
    )
    bucket = result.buckets[-1]
    examples = next(x for x in sample_buckets(get_task("scan"), 3) if x.length == bucket.length).examples
    tokenizer = Tokenizer.from_dict(a.metadata["tokenizer"])
    per_example = []
    for example in examples:  # one at a time, unpadded, straight into the metric
        (pa,), (pb,) = collect_patterns(a, tokenizer, [example]), collect_patterns(b, tokenizer, [example])
        per_example.append(layer_distances(pa.patterns[0].double(), pb.patterns[0].double()).per_layer)
    torch.testing.assert_close(bucket.per_layer.mean, torch.stack(per_example).mean(0))


def test_a_model_against_itself_is_zero_at_a_same_index_pair(root):
    t5 = run_dir(root / "checkpoints", "scan", "t5", 0)
    result = compare_runs(t5, t5, ReadSettings(n_per_bucket=1))
    assert result.values.abs().max() < 1e-12  # zero up to float64 rounding
    for stats in [*result.buckets, result.overall]:
        assert stats.per_layer.mean.abs().max() < 1e-12
        assert (stats.argmin[:, 0] == stats.argmin[:, 1]).all()
        assert (stats.head_matrix.diagonal(dim1=-2, dim2=-1) < 1e-12).all()


def test_reference_code_metric_visits_pairs_below_the_diagonal(root):
    ckpt = root / "checkpoints"
    result = compare_runs(
        run_dir(ckpt, "scan", "nope", 0),
        run_dir(ckpt, "scan", "t5", 0),
        ReadSettings(n_per_bucket=1),
        metric="reference-code",
    )
    assert result.metric == "reference-code"
    assert (result.overall.argmin[:, 1] < result.overall.argmin[:, 0]).all()


def test_models_of_different_depth_pair_layers_at_the_same_relative_depth(root):
    nope, shallow = run_dir(root / "checkpoints", "scan", "nope", 0), run_dir(root / "shallow", "scan", "alibi", 0)
    result = compare_runs(nope, shallow, ReadSettings(n_per_bucket=1))
    assert result.n_layers == 2 and result.paired == [0, 0]  # both layers of NoPE against ALiBi's only one
    examples = [e for bucket in sample_buckets(get_task("scan"), n_per_bucket=1, seed=0) for e in bucket.examples]
    a, b = load_checkpoint(nope), load_checkpoint(shallow)
    tokenizer = Tokenizer.from_dict(a.metadata["tokenizer"])
    expected = []
    for example in examples:
        (pa,), (pb,) = collect_patterns(a, tokenizer, [example]), collect_patterns(b, tokenizer, [example])
        expected.append(layer_distances(pa.patterns[0].double(), pb.patterns[0][[0, 0]].double()).per_layer)
    torch.testing.assert_close(result.values, torch.stack(expected))
    assert compare_runs(shallow, nope, ReadSettings(n_per_bucket=1)).paired == [0]


def test_compare_report_finds_every_other_pe_and_the_seed_baseline(root):
    report = compare_report("nope", root=root / "checkpoints", task="scan", settings=ReadSettings(n_per_bucket=1))
    assert [r.b.pe for r in report.comparisons] == ["t5"]
    assert report.baseline is not None and report.baseline.b.seed == 1
    assert [c["label"] for c in report.curves()] == ["T5's Relative Bias", "NoPE'"]
    assert report.curves()[-1]["dashed"] and len(report.curves()[0]["mean"]) == 2
    assert {"load", "collect", "metric"} <= set(report.timings)
    with pytest.raises(ProbeError, match="probe train"):
        compare_report("t5", ["alibi"], root=root / "checkpoints", task="scan")


def test_cli_compare_json_files_and_exit_codes(root, tmp_path, capsys, no_png):
    ckpt = str(root / "checkpoints")
    out = tmp_path / "out"
    assert (
        main(
            [
                "compare",
                "nope",
                "--task",
                "scan",
                "--checkpoints",
                ckpt,
                "--n-per-bucket",
                "1",
                "--json",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["pe"] == "nope" and [c["b"]["pe"] for c in data["comparisons"]] == ["t5"]
    assert data["baseline"]["b"]["seed"] == 1 and data["metric"] == "jsd"
    assert len(data["comparisons"][0]["overall"]["per_layer"]["mean"]) == 2
    written = {p.name for p in out.iterdir()}
    assert {"nope_vs_t5.json", "nope_vs_t5.csv", "nope_vs_t5_layers.html"} <= written
    assert all(path in data["files"] for path in (str(out / "nope_vs_t5.json"), str(out / "nope_vs_t5.csv")))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope", "sinusoid"], "neither a run folder nor a PE"),
        (["nope", "t5", "--task", "scan", "--seed", "7"], "probe train --task scan --pe nope --seed 7"),
        (["nope", "t5", "--n-per-bucket", "0"], "--n-per-bucket must be at least 1"),
        (["nope", "t5", "--task", "addition", "--scratchpad", "I+X"], "scratchpad='I+X' is not accepted"),
    ],
)
def test_cli_compare_bad_input_is_one_line_and_exit_2(root, capsys, argv, message):
    shallow = str(run_dir(root / "shallow", "scan", "alibi", 0))
    argv = [arg.format(shallow=shallow) for arg in argv]
    assert main(["compare", *argv, "--checkpoints", str(root / "checkpoints")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_attended_distance_report_and_cli(root, tmp_path, capsys, no_png):
    ckpt = root / "checkpoints"
    runs = task_runs(ckpt, "scan", seed=0)
    assert [r.pe for r in runs] == ["nope", "t5"]
    report = attended_distance_report(runs, ReadSettings(n_per_bucket=1), bins=10)
    for result in report.results:
        assert not result.run.label.endswith("'") and result.n_examples == len(result.lengths)
        for stats in result.stats.values():
            assert stats.histogram.mass.shape == (10,) and float(stats.histogram.mass.sum()) == pytest.approx(1.0)
            assert 0 < stats.bimodality < 1.5 and 0 < stats.mean <= 1
            assert float(stats.weights.sum()) == pytest.approx(result.n_queries)  # every (query, head): weight 1
            assert (stats.values > 0).all() and (stats.values <= 1).all()  # the text's d̄ ∈ (0, 1]
    reference = attended_distance_report(runs[:1], ReadSettings(n_per_bucket=1), normalization="reference-code")
    assert (reference.results[0].stats["argmax"].values < 1).all()

    out = tmp_path / "distances"
    assert (
        main(
            [
                "distances",
                "--task",
                "scan",
                "--checkpoints",
                str(ckpt),
                "--n-per-bucket",
                "1",
                "--json",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert [r["run"]["pe"] for r in data["runs"]] == ["nope", "t5"]
    assert set(data["runs"][0]["weightings"]) == {"argmax", "attention"}
    assert (out / "attended_distance.html").is_file() and (out / "attended_distance.csv").is_file()

    assert main(["distances", "--paper", "--checkpoints", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert f"probe train --task addition --scratchpad full --checkpoints {ckpt}" in err
    assert main(["distances", "--task", "addition", "--scratchpad", "I+X", "--checkpoints", str(ckpt)]) == 2  # a typo
    err = capsys.readouterr().err
    assert "scratchpad='I+X' is not accepted" in err and len(err.strip().splitlines()) == 1


def test_compare_applies_rope_scaling_at_inference_to_the_runs_that_have_it(tmp_path, capsys, no_png):
    ckpt = tmp_path / "checkpoints"
    nope, rotary = make_run(ckpt, "nope"), make_run(ckpt, "rotary")
    plain = compare_runs(nope, rotary, ReadSettings(n_per_bucket=1))
    scaled = compare_runs(nope, rotary, ReadSettings(n_per_bucket=1, pe_options={"scaling": "linear", "factor": 4.0}))
    assert scaled.a.inference_options == {} and scaled.b.inference_options == {"scaling": "linear", "factor": 4.0}
    assert scaled.b.label == "Rotary+factor=4+scaling=linear" and scaled.a.label == plain.a.label
    assert not torch.allclose(plain.values, scaled.values)  # positions 4x closer: other attention
    assert (
        main(
            [
                "compare",
                "nope",
                "rotary",
                "--task",
                "scan",
                "-p",
                "scaling=linear",
                "-p",
                "factor=4",
                "--checkpoints",
                str(ckpt),
                "--n-per-bucket",
                "1",
                "--no-baseline",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert (tmp_path / "out" / "nope_vs_rotary+factor=4+scaling=linear.json").is_file()
    assert main(["compare", "nope", "rotary", "--task", "scan", "-p", "scaling=bogus", "--checkpoints", str(ckpt)]) == 2
    assert "scaling" in capsys.readouterr().err
