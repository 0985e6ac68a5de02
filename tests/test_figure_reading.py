"""Figures a researcher can paste: every curve named in the legend, the window's width, layers from 0,
each bucket's example count on its tick (tiny buckets marked), no curve clipped by a fixed range, and small
multiples where overlaid distributions would muddy."""

from __future__ import annotations

from pathlib import Path

from helpers import bench_script

from probe.figures import (
    accuracy_by_length,
    accuracy_panels,
    attended_distance_figure,
    probe_figure,
    variance_figure,
)
from probe.figures.extrapolation import extrapolation_figure
from probe.figures.output import png_width
from probe.figures.style import TINY_BUCKET


def unnamed(figure) -> list[str]:
    """Traces the legend does not name: a curve whose name no legend entry shows, or a band (a filled outline)
    outside every shown curve's group (so clicking the legend would leave it behind)."""
    shown = [t for t in figure.data if t.showlegend is not False and t.name]
    names, groups = {t.name for t in shown}, {t.legendgroup for t in shown}
    return [
        f"{t.name or 'band'} ({t.legendgroup})"
        for t in figure.data
        if (t.legendgroup not in groups if t.fill == "toself" else t.name not in names)
    ]


def _outcome(name: str, kind: str, means: list[float], counts: list[int], shown: str | None = None) -> dict:
    buckets = [{"at": 5 + i, "mean": m, "low": m, "high": m, "n": n} for i, (m, n) in enumerate(zip(means, counts))]
    return {"intervention": {"name": name}, "kind": kind, "shown": shown, "buckets": buckets}


def _run(label: str, tuned: str, counts: list[int]) -> dict:
    outcomes = [
        _outcome("none", "none", [0.2, 0.1, 1.0], counts),
        _outcome("temperature", "tuned", [0.3, 0.2, 0.0], counts, shown=tuned),
    ]
    return {"label": label, "pe": "t5", "outcomes": outcomes}


def test_the_extrapolation_figure_names_every_curve_and_takes_the_windows_width():
    """Two runs whose tuned temperatures differ: the second run's curve is in the legend too."""
    figure = extrapolation_figure(
        [_run("t5 seed 0", "temperature=0.7", [40, 40, 1]), _run("t5 seed 1", "temperature=0.8", [40, 40, 1])],
        "exact match",
    )
    assert not unnamed(figure)
    assert "temperature=0.8 (tuned)" in {t.name for t in figure.data if t.showlegend is not False}
    assert figure.layout.width is None  # the HTML and the explorer: the window's width
    assert png_width(figure) >= 900  # a pasted PNG keeps both panels legible
    for axis in (figure.layout.xaxis, figure.layout.xaxis2):  # each panel's ticks carry its counts
        assert axis.ticktext[0].endswith("n=40") and "n=1" in axis.ticktext[2]
    assert list(figure.data[0].marker.symbol) == ["circle", "circle", "circle-open"]


def test_accuracy_by_length_shows_counts_and_marks_tiny_buckets():
    """A bucket of one example plunging 100 -> 0 -> 100 reads as what it is: its count on the axis, hollow."""
    curves = [
        {"label": "NoPE", "pe": "nope", "lengths": [4, 5, 6], "accuracy": [1.0, 0.0, 1.0], "counts": [50, 1, 50]},
        {"label": "T5", "pe": "t5", "lengths": [4, 5, 6], "accuracy": [1.0, 0.5, 0.9], "counts": [50, 1, 40]},
    ]
    figure = accuracy_by_length(curves, (4, 4), "exact match")
    ticks = dict(zip(figure.layout.xaxis.tickvals, figure.layout.xaxis.ticktext))
    assert ticks[4] == "4<br>n=50" and "n=1" in ticks[5] and ticks[6] == "6<br>n=40–50"
    assert [t.marker.symbol for t in figure.data] == [("circle", "circle-open", "circle")] * 2
    assert any(f"fewer than {TINY_BUCKET}" in a.text for a in figure.layout.annotations)
    assert not unnamed(figure)


def test_study_panels_take_the_windows_width():
    panel = {"train_range": (1, 2), "curves": [{"pe": "t5", "label": "T5", "lengths": [1, 2], "mean": [1, 0.5]}]}
    figure = accuracy_panels({"a": panel, "b": panel, "c": panel}, "study")
    assert figure.layout.width is None and png_width(figure) == 3 * 450
    assert not unnamed(figure)


def _positions(pe: str, unseen_r2: float) -> dict:
    probes = [
        {"target": "landmark_distance", "set": name, "stream": s, "r2": r2, "r2_low": r2 - 0.1, "r2_high": r2 + 0.1}
        | {"mae": 1.0, "accuracy": 0.5}
        for name, r2 in (("heldout", 0.9), ("unseen", unseen_r2))
        for s in range(3)
    ]
    variance = {"position": [1, 2, 3], "layers": [[1.0, 0.5, 0.3], [1.0, 0.6, 0.4]], "slope": [-1.0, -0.9]}
    return {"run": {"pe": pe, "label": pe.upper()}, "probes": probes, "variance": variance}


def test_the_landmark_probe_figure_clips_no_curve():
    """R² on unseen lengths far below the old fixed floor of -0.5: the axis reaches it."""
    figure = probe_figure([_positions("nope", -3.0), _positions("t5", 0.5)], "landmark_distance")
    low, high = figure.layout.yaxis.range
    drawn = [y for t in figure.data for y in t.y]
    assert low <= min(drawn) and max(drawn) <= high
    assert not unnamed(figure)


def test_layers_are_numbered_from_0_in_the_variance_figure():
    figure = variance_figure([_positions("nope", 0.5)])
    assert [t.name.split(" (")[0] for t in figure.data] == ["NOPE layer 0", "NOPE layer 1"]


def _series(pe: str) -> dict:
    histogram = {"edges": [0.0, 0.5, 1.0], "mass": [0.7, 0.3], "bimodality": 0.5}
    return {"label": pe, "pe": pe, "histograms": {"argmax": histogram, "attention": histogram}}


def test_five_attended_distance_histograms_are_small_multiples():
    """Up to three distributions overlaid; five are one row each, on shared axes, every one named."""
    few = attended_distance_figure([_series(pe) for pe in ("nope", "t5")], "d")
    assert len({t.yaxis for t in few.data}) == 2 and not unnamed(few)  # a panel per weighting
    pes = ("nope", "t5", "alibi", "rotary", "ape")
    many = attended_distance_figure([_series(pe) for pe in pes], "d")
    rows = {pe: {t.yaxis for t in many.data if t.name == pe} for pe in pes}
    assert len({t.yaxis for t in many.data}) == 2 * len(pes)  # a panel per model and weighting
    assert all(len(axes) == 2 for axes in rows.values())
    assert not unnamed(many)
    assert [a.text for a in many.layout.annotations if a.textangle == 90] == list(pes)  # each row says whose


def test_attention_heatmaps_take_the_pages_width():
    """No fixed cell width: the HTML and the explorer stretch the heads across the page, a PNG gives each its
    panel's width."""
    import torch

    from probe.figures import attention_heatmaps

    figure = attention_heatmaps(list("abcde"), torch.rand(2, 4, 5, 5), 1)
    assert figure.layout.width is None and figure.layout.height
    assert png_width(figure) == 4 * 450


def _evaluation(pe: str, seed: int, counts: list[int]):
    from probe.analysis.eval_report import Bucket, EvalReport

    buckets = [Bucket(2 + i, n, n, 1.0, i == 0) for i, n in enumerate(counts)]
    return EvalReport(f"{pe} {seed}", "", "scan", "scan", pe, seed, 1.0, 1.0, buckets, sum(counts))


def test_the_reproduce_reports_accuracy_figure_shows_each_buckets_count():
    """The study report passes the counts its evaluations hold (the fewest over seeds) to the figure."""
    from probe.studies.reproduce_report import figures, report_of

    runs = [_evaluation("nope", 0, [40, 40, 3]), _evaluation("nope", 1, [40, 30, 3]), _evaluation("t5", 0, [40, 40, 3])]
    report = report_of(runs, {}, scale="section3")
    assert report["tasks"]["scan"]["ours"]["nope"]["counts"] == [40, 30, 3]
    figure = figures(report)["accuracy_scan"]
    ticks = dict(zip(figure.layout.xaxis.tickvals, figure.layout.xaxis.ticktext))
    assert ticks[2] == "2<br>n=40" and ticks[3] == "3<br>n=30–40" and "n=3" in ticks[4]
    assert figure.data[0].marker.symbol == ("circle", "circle", "circle-open")


def test_the_section3_showcase_labels_its_tiny_buckets():
    """bench/section3_report.py's panels carry the committed summaries' counts: SCAN at seed 0 has a bucket of
    one example, hollow and labelled in its panel."""
    from probe.studies.reproduce_report import report_of
    from probe.studies.summaries import merge

    section3 = bench_script("section3_report")
    committed = Path(__file__).resolve().parent.parent / "bench" / "results" / "section3"
    paths = sorted(committed.glob("scan+*seed0.json"))  # every rung trained
    merged = merge(paths, study="section3", rule=section3.RULE)
    panels = section3.panels(merged, report_of(merged.evaluations, {}, scale="section3"))
    nope = next(c for c in panels["scan"]["curves"] if c["pe"] == "nope")
    assert min(nope["counts"]) == 1
    figure = accuracy_panels(panels, "study")
    trace = next(t for t in figure.data if t.name == nope["label"] and t.mode)
    tiny = [i for i, n in enumerate(nope["counts"]) if n < TINY_BUCKET]
    assert [trace.text[i] for i in tiny] == [f"n={nope['counts'][i]}" for i in tiny]
    assert {trace.marker.symbol[i] for i in tiny} == {"circle-open"}
    assert not any(text for i, text in enumerate(trace.text) if i not in tiny)
    assert list(trace.customdata) == nope["counts"]
    assert any(f"fewer than {TINY_BUCKET}" in a.text for a in figure.layout.annotations)
    assert not unnamed(figure)
