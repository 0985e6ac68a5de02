"""Plotly figures for every analysis, and how they are written (HTML always, PNG where possible)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

PE_COLORS = {"nope": "#1f77b4", "t5": "#2ca02c", "alibi": "#ff7f0e", "rotary": "#d62728", "ape": "#9467bd"}
PE_NAMES = {"nope": "NoPE", "t5": "T5's Relative Bias", "alibi": "ALiBi", "rotary": "Rotary", "ape": "APE"}


def pe_color(pe: str) -> str:
    return PE_COLORS.get(pe, "#7f7f7f")


def write_figure(figure, path: str | Path) -> list[Path]:
    """Write ``path``.html, and ``path``.png if a static renderer (kaleido + Chrome) is available."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = [path.with_suffix(".html")]
    figure.write_html(written[0], include_plotlyjs="cdn")
    try:
        figure.write_image(path.with_suffix(".png"), scale=2)
        written.append(path.with_suffix(".png"))
    except Exception:  # kaleido or its browser missing: the HTML is the figure
        pass
    return written


def accuracy_by_length(curves: Sequence[Mapping[str, Any]], train_range: tuple[float, float] | None, title: str):
    """Figure showcase: exact match against length, one line per run, the training range shaded.

    ``curves``: dicts with ``label``, ``pe``, ``lengths``, ``accuracy`` (0..1).
    """
    import plotly.graph_objects as go

    figure = go.Figure()
    if train_range is not None:
        figure.add_vrect(x0=train_range[0] - 0.5, x1=train_range[1] + 0.5, fillcolor="lightgray", opacity=0.35,
                         line_width=0, annotation_text="seen lengths", annotation_position="top left")
    for curve in curves:
        figure.add_trace(go.Scatter(
            x=list(curve["lengths"]), y=[100 * a for a in curve["accuracy"]], mode="lines+markers",
            name=curve["label"], line=dict(color=pe_color(curve["pe"]), dash="dot" if curve.get("dashed") else "solid"),
            hovertemplate="length %{x}<br>exact match %{y:.1f}%<extra>" + curve["label"] + "</extra>",
        ))
    figure.update_layout(title=title, xaxis_title="length bucket λ", yaxis_title="exact match (%)",
                         yaxis_range=[-2, 102], template="plotly_white", legend_title="model")
    return figure
