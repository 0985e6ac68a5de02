"""Exact match against length (Section 3's length-generalization curves)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import TINY_BUCKET, bucket_symbols, bucket_ticks, pe_color

if TYPE_CHECKING:
    import plotly.graph_objects as go


def accuracy_by_length(
    curves: Sequence[Mapping[str, Any]], train_range: tuple[float, float] | None, title: str
) -> go.Figure:
    """Figure showcase: exact match against length, one line per run, the training range shaded.

    ``curves``: dicts with ``label``, ``pe``, ``lengths``, ``accuracy`` (0..1), and optionally ``counts`` (examples
    per bucket): then each tick says its bucket's count and tiny buckets are hollow, so a bucket of one example
    jumping 100 -> 0 reads as what it is.
    """
    import plotly.graph_objects as go

    figure = go.Figure()
    if train_range is not None:
        figure.add_vrect(
            x0=train_range[0] - 0.5,
            x1=train_range[1] + 0.5,
            fillcolor="lightgray",
            opacity=0.35,
            line_width=0,
            annotation_text="seen lengths",
            annotation_position="top left",
        )
    counts: dict[float, list[int]] = {}
    for curve in curves:
        for length, count in zip(curve["lengths"], curve.get("counts") or ()):
            counts.setdefault(length, []).append(count)
        figure.add_trace(_accuracy_trace(curve))
    if counts:
        _mark_bucket_counts(figure, counts)
    figure.update_layout(
        title=title,
        xaxis_title="length bucket λ" + (" (n: its examples)" if counts else ""),
        yaxis_title="exact match (%)",
        yaxis_range=[-2, 102],
        template="plotly_white",
        legend_title="model",
    )
    return figure


def _accuracy_trace(curve: Mapping[str, Any]):
    """One run's line of exact match against length; with bucket counts, hollow markers on tiny
    buckets and the count in the hover."""
    import plotly.graph_objects as go

    n = curve.get("counts")
    return go.Scatter(
        x=list(curve["lengths"]),
        y=[100 * a for a in curve["accuracy"]],
        mode="lines+markers",
        name=curve["label"],
        line=dict(color=pe_color(curve["pe"]), dash="dot" if curve.get("dashed") else "solid"),
        marker=dict(symbol=bucket_symbols(n), size=8) if n else None,
        customdata=n,
        hovertemplate="length %{x}<br>exact match %{y:.1f}%"
        + ("<br>%{customdata} examples" if n else "")
        + "<extra>"
        + curve["label"]
        + "</extra>",
    )


def _mark_bucket_counts(figure: Any, counts: Mapping[float, list[int]]) -> None:
    """Ticks that say each bucket's example count, and a note on what a hollow marker means when some
    bucket is tiny."""
    figure.update_xaxes(**bucket_ticks(counts))
    if min(min(c) for c in counts.values()) < TINY_BUCKET:
        _note_tiny(figure)


def _note_tiny(figure: Any) -> None:
    """The note, above the plot's top right, on what a hollow marker means."""
    figure.add_annotation(
        text=f"hollow: a bucket of fewer than {TINY_BUCKET} examples",
        xref="paper",
        yref="paper",
        x=1,
        y=1.02,
        xanchor="right",
        yanchor="bottom",
        showarrow=False,
        font=dict(size=11, color="#d62728"),
    )


def accuracy_panels(panels: Mapping[str, Mapping[str, Any]], title: str, columns: int = 3) -> go.Figure:
    """Figure showcase for a whole study, one small panel per scenario: exact match against length per PE,
    the mean over seeds as a line and the seeds' range as a band, the training lengths shaded. Small
    multiples rather than one crowded overlay.

    ``panels``: {scenario: {"train_range": (low, high) | None, "curves": [{pe, label, lengths, mean, low, high}]}};
    a curve may carry ``counts`` (examples per bucket, the fewest over its seeds): its hover then says each
    bucket's count, and a tiny bucket is a hollow marker labelled with its count.
    """
    import math

    from plotly.subplots import make_subplots

    names = list(panels)
    rows = math.ceil(len(names) / columns)
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=names, vertical_spacing=0.3 / rows)
    named: set[str] = set()
    for index, name in enumerate(names):
        row, col = index // columns + 1, index % columns + 1
        panel = panels[name]
        if panel.get("train_range") is not None:
            _shade_panel(figure, index, panel["train_range"])
        for curve in panel["curves"]:
            _add_panel_curve(figure, curve, row, col, show_legend=curve["label"] not in named)
            named.add(curve["label"])
    figure.update_yaxes(range=[-3, 103])
    if any(n < TINY_BUCKET for p in panels.values() for c in p["curves"] for n in c.get("counts") or ()):
        _note_tiny(figure)
    figure.update_layout(
        title=title,
        template="plotly_white",
        height=230 * rows + 120,
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="center", x=0.5),
        font=dict(size=10),
    )
    return figure


def _shade_panel(figure: Any, index: int, train_range: tuple[float, float]) -> None:
    """Shade the training lengths of the ``index``-th panel (a shape on that subplot's axes)."""
    low, high = train_range
    axis = "" if index == 0 else str(index + 1)  # the subplot's axes: x, y, then x2, y2 ...
    figure.add_shape(
        type="rect",
        xref=f"x{axis}",
        yref=f"y{axis} domain",
        x0=low - 0.5,
        x1=high + 0.5,
        y0=0,
        y1=1,
        fillcolor="lightgray",
        opacity=0.35,
        line_width=0,
        layer="below",
    )


def _add_panel_curve(figure: Any, curve: Mapping[str, Any], row: int, col: int, *, show_legend: bool) -> None:
    """One PE's mean over seeds in a panel, with the seeds' range as a band where they differ; a PE is
    named in the legend once for all panels."""
    import plotly.graph_objects as go

    from probe.figures.style import rgba

    color = pe_color(curve["pe"])
    x = list(curve["lengths"])
    if curve.get("low") is not None and any(h > lo for lo, h in zip(curve["low"], curve["high"])):
        figure.add_trace(
            go.Scatter(
                x=x + x[::-1],
                y=[100 * v for v in curve["high"]] + [100 * v for v in curve["low"][::-1]],
                fill="toself",
                fillcolor=rgba(color, 0.15),
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                legendgroup=curve["label"],
            ),
            row=row,
            col=col,
        )
    n = curve.get("counts")
    figure.add_trace(
        go.Scatter(
            x=x,
            y=[100 * v for v in curve["mean"]],
            mode="lines+markers+text" if n else "lines",
            name=curve["label"],
            legendgroup=curve["label"],
            showlegend=show_legend,
            line=dict(color=color, width=1.5),
            **(_tiny_markers(n) if n else {}),
            hovertemplate="length %{x}<br>exact match %{y:.1f}%"
            + ("<br>%{customdata} examples" if n else "")
            + "<extra>"
            + curve["label"]
            + "</extra>",
        ),
        row=row,
        col=col,
    )


def _tiny_markers(counts: Sequence[int]) -> dict[str, Any]:
    """A small panel's markers: none on buckets of enough examples, a hollow one labelled ``n=`` (red) on a
    tiny bucket; every bucket's count in the hover."""
    tiny = [c < TINY_BUCKET for c in counts]
    return {
        "marker": dict(symbol=bucket_symbols(counts), size=[8 if t else 0 for t in tiny]),
        "text": [f"n={c}" if t else "" for c, t in zip(counts, tiny)],
        "textposition": "top center",
        "textfont": dict(size=9, color="#d62728"),
        "customdata": list(counts),
    }
