"""What the explorer's pages say beside what they draw: each caption, label and table cell is read against the
run or report it describes (a run under the authors' protocol, the paper's split, the reports the commands save).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import FOLDER, run_page, texts, tiny_model

from probe.cli import main

PAPER_OPTIONS = {"train_length": 4, "split": "paper"}  # test: unseen lengths only; the authors' protocol: no <bos>


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory) -> Path:
    """A NoPE run of reverse on the paper's split (trained a few steps), alone under its checkpoint folder."""
    from probe.runs.folders import run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    root = tmp_path_factory.mktemp("paper-checkpoints")
    config = TrainConfig(
        task="reverse",
        pe="nope",
        task_options=PAPER_OPTIONS,
        steps=3,
        batch_size=16,
        model=tiny_model(),
        eval_examples=4,
    )
    return train_run(config, run_dir(root, "reverse", "nope", 0, PAPER_OPTIONS), torch.device("cpu")).path


def test_attention_names_the_sequence_format_of_the_run_it_draws(paper_run, checkpoints, monkeypatch):
    """The authors' protocol opens no sequence with <bos>: neither do the page's words nor its tokens; probe's does."""
    at = run_page("attention", paper_run.parents[2], monkeypatch)
    tokens = next(m.value for m in at.markdown if m.value.startswith("**"))
    assert "`input <sep> output <eos>`" in texts(at.caption) and "<bos>" not in texts(at.caption)
    assert tokens.split("`")[1].split()[0] != "<bos>"
    at = run_page("attention", checkpoints, monkeypatch)
    assert "`<bos> input <sep> output <eos>`" in texts(at.caption)


def test_attention_offers_seen_lengths_under_the_papers_split(paper_run, monkeypatch):
    """The paper's test split holds unseen lengths alone: the seen buckets are drawn from valid, as Compare draws
    them, each labelled, and the longest seen one is preselected."""
    from probe.tasks import get

    task = get("reverse", **PAPER_OPTIONS)
    at = run_page("attention", paper_run.parents[2], monkeypatch)
    lengths = at.selectbox(key="attention-length")
    valid = sorted({e.length for e in task.examples("valid", seed=0)})
    test = sorted({e.length for e in task.examples("test", seed=0)})
    assert lengths.options == [f"{n} (seen, valid split)" for n in valid] + [f"{n} (unseen, test split)" for n in test]
    assert lengths.value == max(valid) == 4
    assert "preselected: the longest seen bucket" in lengths.help
    example = at.selectbox(key="attention-example").options[0]
    assert len(example.split(". ", 1)[1].split()) > 4  # a prompt of four words, drawn from the valid split
    lengths.set_value(min(test)).run()
    assert not at.exception and at.selectbox(key="attention-length").value == min(test)


def test_predictions_show_the_seen_lengths_under_the_papers_split(paper_run, monkeypatch):
    """The paper's split tests on unseen lengths only: the page's predictions (`probe eval --show`'s) read the
    seen lengths from the IID examples eval scores, so both kinds are there."""
    folder = paper_run.parents[1].name
    at = run_page("models", paper_run.parents[2], monkeypatch)
    at.number_input(key=f"show-n-{folder}").set_value(1)
    at.button(key=f"show-{folder}").click().run()
    seen = list(at.dataframe[-1].value["seen"])
    assert not at.exception and any(seen) and not all(seen)


@pytest.fixture(scope="module")
def saved(checkpoints, tmp_path_factory) -> Path:
    """A copy of the explorer's checkpoints with what `probe compare` and `probe positions` save beside them."""
    root = tmp_path_factory.mktemp("saved") / "ck"
    shutil.copytree(checkpoints, root)
    runs = [str(root / FOLDER / run) for run in ("nope/seed0", "t5/seed0")]
    for command in ("compare", "positions"):
        assert main([command, *runs, "--n-per-bucket", "2"]) == 0
    return root


def test_compare_names_what_the_head_matrix_circles_beside_the_layers_distance(saved, monkeypatch):
    """The heatmap averages D_AT over examples and circles its least cell; D^(l) averages each example's own least:
    both are given, for the layer and bucket shown, and the caption says they differ."""
    report = json.loads(next((saved / FOLDER / "compare").glob("*.json")).read_text())
    at = run_page("compare", saved, monkeypatch)
    assert "D^(l) averages each example's own minimum" in texts(at.caption)
    assert "nats, at most ln 2" in texts(at.caption)
    for layer in (0, 1):
        at.selectbox(key="layer").set_value(layer).run()
        titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")[1:]]
        for title, result in zip(titles, [*report["comparisons"], report["baseline"]], strict=True):
            stats = result["overall"]
            row, col = stats["argmin"][layer]
            circled = stats["head_matrix"][layer][row][col]
            assert f"least mean D_AT {circled:.4f} (circled)" in title
            assert f"{result['a']['label']} head {row}, {result['label']} head {col}" in title
            assert f"D^(l) = {stats['per_layer']['mean'][layer]:.4f}" in title
            assert stats["per_layer"]["mean"][layer] <= circled + 1e-12  # the mean of minima is at most the min


def test_positions_table_counts_constant_heads_and_names_the_stream_read(saved, monkeypatch):
    """The table's cells read as `probe positions` prints them: R² @ the best stream, heads r / a / c +n constant;
    and streams are named as the library reads them (s: after layer s − 1)."""
    path = saved / FOLDER / "positions" / "positions.json"
    report = json.loads(path.read_text())
    report["models"][0]["summary"]["kinds"] = {"relative": 1, "absolute": 0, "content": 2, "constant": 1}
    path.write_text(json.dumps(report))  # newer than the runs: still the saved report
    at = run_page("positions", saved, monkeypatch)
    table = at.dataframe[0].value
    assert list(table["heads relative / absolute / content (+constant)"]) == [
        "1 / 0 / 2 +1",
        "{relative} / {absolute} / {content}".format(**report["models"][1]["summary"]["kinds"]),
    ]
    for (_, row), model in zip(table.iterrows(), report["models"], strict=True):
        for split in ("heldout", "unseen"):
            best = model["summary"]["best_probe"][split]
            column = "probe R² held-out @stream" if split == "heldout" else "probe R² unseen @stream"
            assert row[column] == f"{best['r2']:.3f} @{best['stream']}"
    captions = texts(at.caption)
    assert (
        "s the residual stream after layer s − 1" in captions and "l the residual stream after layer l" not in captions
    )


def test_attended_distance_axes_name_what_each_column_counts():
    from probe.figures import attended_distance_figure

    histogram = {"edges": [0.0, 0.5, 1.0], "mass": [0.25, 0.75], "bimodality": 0.5}
    series = [{"label": pe, "pe": pe, "histograms": {"argmax": histogram, "attention": histogram}} for pe in "ab"]
    for panels in (False, True):  # overlaid, or a row per model (two: the titles on the first row)
        layout = attended_distance_figure(series, "t", panels=panels).layout
        axes = {axis.anchor: axis.title.text for axis in (layout.yaxis, layout.yaxis2)}
        assert axes == {"x": "fraction of query rows", "x2": "fraction of attention"}, panels


def test_attention_heatmaps_name_queries_keys_and_the_colour():
    from probe.figures import attention_heatmaps

    maps = torch.softmax(torch.randn(5, 3, 3), -1)  # [head, query, key]: two rows of heads
    layout = attention_heatmaps(["a", "b", "c"], maps, 0).layout
    assert layout.yaxis.title.text == "query" and layout.yaxis5.title.text == "query"
    assert layout.xaxis5.title.text == "key" and layout.xaxis.title.text is None
    heatmaps = attention_heatmaps(["a", "b", "c"], maps, 0).data
    assert heatmaps[0].colorbar.title.text == "attention p"


def test_head_matrix_figure_names_the_circled_value_and_the_layers_distance():
    from probe.figures import head_matrix_figure

    title = head_matrix_figure([[0.3, 0.1], [0.2, 0.4]], [0, 1], "layer 0", ("A", "B"), layer_distance=0.05)
    title = title.layout.title.text
    assert "least mean D_AT 0.1000 (circled)" in title and "A head 0, B head 1" in title
    assert "D^(l) = 0.0500" in title
