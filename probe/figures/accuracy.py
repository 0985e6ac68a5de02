"""Exact match against length (Section 3's length-generalization curves)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from probe.figures.style import pe_color


def accuracy_by_length(curves: Sequence[Mapping[str, Any]], train_range: tuple[float, float] | None, title: str):
    """Figure showcase: exact match against length, one line per run, the training range shaded.

    ``curves``: dicts with ``label``, ``pe``, ``lengths``, ``accuracy`` (0..1).
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
    for curve in curves:
        figure.add_trace(
            go.Scatter(
                x=list(curve["lengths"]),
                y=[100 * a for a in curve["accuracy"]],
                mode="lines+markers",
                name=curve["label"],
                line=dict(color=pe_color(curve["pe"]), dash="dot" if curve.get("dashed") else "solid"),
                hovertemplate="length %{x}<br>exact match %{y:.1f}%<extra>" + curve["label"] + "</extra>",
            )
        )
    figure.update_layout(
        title=title,
        xaxis_title="length bucket λ",
        yaxis_title="exact match (%)",
        yaxis_range=[-2, 102],
        template="plotly_white",
        legend_title="model",
    )
    return figure
