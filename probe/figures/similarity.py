"""Layerwise attention distance D^(l) between models (Eq. similarity), and the head-pair matrix behind a
layer's minimum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import pe_color, rgba

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from torch import Tensor


def layer_distance_figure(
    curves: Sequence[Mapping[str, Any]], title: str, metric_label: str = "D^(l) (JSD)"
) -> go.Figure:
    """Figure similarity_per_layer: distance per layer (left) and averaged over layers (right).

    ``curves``: dicts with ``label``, ``pe``, per-layer ``mean``, ``low``, ``high`` (bootstrap
    interval), ``average`` = [mean, low, high], and ``dashed`` (the NoPE' seed baseline).
    """
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.7, 0.3],
        horizontal_spacing=0.1,
        subplot_titles=("distance per layer", "average over layers"),
    )
    for curve in curves:
        _add_layer_curve(figure, curve)
        _add_average_bar(figure, curve)
    figure.update_xaxes(title_text="layer", dtick=1, row=1, col=1)
    figure.update_yaxes(title_text=metric_label, rangemode="tozero", row=1, col=1)
    figure.update_yaxes(rangemode="tozero", row=1, col=2)
    figure.update_layout(title=title, template="plotly_white", legend_title="compared with")
    return figure


def _add_layer_curve(figure: Any, curve: Mapping[str, Any]) -> None:
    """One model's distance per layer (left panel), its bootstrap interval as a band behind it."""
    import plotly.graph_objects as go

    color, name = pe_color(curve["pe"]), curve["label"]
    layers = list(range(len(curve["mean"])))
    dash = "dash" if curve.get("dashed") else "solid"
    figure.add_trace(
        go.Scatter(
            x=layers + layers[::-1],
            y=list(curve["high"]) + list(curve["low"])[::-1],
            mode="lines",
            fill="toself",
            fillcolor=rgba(color, 0.15),
            line=dict(width=0),
            hoverinfo="skip",
            showlegend=False,
            legendgroup=name,
        ),
        row=1,
        col=1,
    )
    figure.add_trace(
        go.Scatter(
            x=layers,
            y=list(curve["mean"]),
            mode="lines+markers",
            name=name,
            legendgroup=name,
            line=dict(color=color, dash=dash),
            customdata=list(zip(curve["low"], curve["high"])),
            hovertemplate="layer %{x}<br>%{y:.4f} [%{customdata[0]:.4f}, %{customdata[1]:.4f}]<extra>"
            + name
            + "</extra>",
        ),
        row=1,
        col=1,
    )


def _add_average_bar(figure: Any, curve: Mapping[str, Any]) -> None:
    """One model's distance averaged over layers (right panel), with its interval as error bars; the
    seed baseline hatched."""
    import plotly.graph_objects as go

    color, name = pe_color(curve["pe"]), curve["label"]
    mean, low, high = curve["average"]
    figure.add_trace(
        go.Bar(
            x=[name],
            y=[mean],
            marker=dict(color=color, pattern_shape="/" if curve.get("dashed") else ""),
            error_y=dict(type="data", symmetric=False, array=[high - mean], arrayminus=[mean - low]),
            showlegend=False,
            legendgroup=name,
            hovertemplate=f"{mean:.4f} [{low:.4f}, {high:.4f}]<extra>{name}</extra>",
        ),
        row=1,
        col=2,
    )


def head_matrix_figure(
    matrix: Tensor | Sequence[Sequence[float]],
    argmin: Sequence[int],
    title: str,
    labels: tuple[str, str] = ("A", "B"),
    layer_distance: float | None = None,
) -> go.Figure:
    """Heatmap of D_AT for every head pair of one layer ([head_A, head_B], averaged over examples), the arg-min
    pair circled. ``layer_distance``, the layer's D^(l) (the mean of each example's own minimum, which can be
    below the circled cell), is named beside the circled value."""
    import plotly.graph_objects as go

    values = [[float(v) for v in row] for row in (matrix.tolist() if hasattr(matrix, "tolist") else matrix)]
    figure = go.Figure(
        go.Heatmap(
            z=values,
            colorscale="Viridis_r",
            colorbar=dict(title="mean D_AT"),
            hovertemplate=f"{labels[1]} head %{{x}}<br>{labels[0]} head %{{y}}<br>mean D_AT %{{z:.4f}}<extra></extra>",
        )
    )
    row, col = int(argmin[0]), int(argmin[1])
    figure.add_trace(
        go.Scatter(
            x=[col],
            y=[row],
            mode="markers",
            showlegend=False,
            hoverinfo="skip",
            marker=dict(symbol="circle-open", size=22, color="red", line=dict(width=3)),
        )
    )
    figure.update_xaxes(title_text=f"{labels[1]} head", dtick=1)
    figure.update_yaxes(title_text=f"{labels[0]} head", dtick=1, autorange="reversed")
    where = f"at {labels[0]} head {row}, {labels[1]} head {col}"
    if layer_distance is not None:
        where += f"; D^(l) = {layer_distance:.4f}, the mean of each example's own least"
    figure.update_layout(
        title=f"{title}: least mean D_AT {values[row][col]:.4f} (circled)<br><sup>{where}</sup>",
        template="plotly_white",
        margin=dict(t=90),
    )
    return figure
