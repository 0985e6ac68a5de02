"""Grouped bars with asymmetric error bars: what the rank and format figures draw."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go


def bar_traces(
    values: Mapping[str, Mapping[str, float]],
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None,
    series: list[tuple[str, str, str]],
) -> list[Any]:
    """A bar trace per ``series`` entry (key, legend name, colour) present in ``values`` ({group: {key: value}}),
    its bars at the groups that hold it; ``intervals`` ({group: {key: (low, high)}}) as asymmetric error bars."""
    import plotly.graph_objects as go

    traces = []
    for key, name, color in series:
        groups = [group for group, scores in values.items() if key in scores]
        heights = [values[g][key] for g in groups]
        bars = None
        if intervals is not None:
            spans = [intervals.get(g, {}).get(key, (v, v)) for g, v in zip(groups, heights)]
            bars = dict(
                type="data",
                symmetric=False,
                array=[high - v for (_, high), v in zip(spans, heights)],
                arrayminus=[v - low for (low, _), v in zip(spans, heights)],
            )
        traces.append(go.Bar(x=groups, y=heights, name=name, marker_color=color, error_y=bars))
    return traces


def grouped_bars(
    values: Mapping[str, Mapping[str, float]],
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None,
    series: list[tuple[str, str, str]],
) -> go.Figure:
    """:func:`bar_traces` on one figure, grouped."""
    import plotly.graph_objects as go

    figure = go.Figure(bar_traces(values, intervals, series))
    figure.update_layout(barmode="group", template="plotly_white")
    return figure
