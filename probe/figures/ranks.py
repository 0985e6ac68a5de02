"""The PEs' ranks by OOD accuracy per category of tasks, as bars (Figures teaser and mrr-per-category)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from probe.figures.style import pe_color


def rank_figure(
    ranks: Mapping[str, Mapping[str, float]],
    title: str,
    axis: str,
    y_range: tuple[float, float] | None = None,
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
):
    """``ranks``: {category: {pe: rank}}; one group of bars per category, a bar per PE in the paper's figure
    order, coloured as every figure colours it; ``intervals`` ({category: {pe: (low, high)}}) as error bars."""
    from probe.models.registry import FIGURE_ORDER, PE_LABELS

    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    pes = sorted({pe for scores in ranks.values() for pe in scores}, key=lambda pe: (order.get(pe, 99), pe))
    figure = _grouped_bars(ranks, intervals, [(pe, PE_LABELS.get(pe, pe), pe_color(pe)) for pe in pes])
    figure.update_layout(title=title, yaxis_title=axis)
    if y_range is not None:
        figure.update_layout(yaxis_range=list(y_range))
    return figure


def format_rank_figure(groups: Mapping[str, Mapping[str, Any]], title: str):
    """Figure scratchpad_formats_per_ds (a group per task) or scratchpad_formats_per_model (a group per PE): a bar
    per scratchpad format, its mean reciprocal rank with its interval over seeds. ``groups``:
    :func:`probe.studies.formats.format_ranks`' or :func:`~probe.studies.formats.format_ranks_per_pe`' output
    ({group: {"formats": {format: {"mrr", "low", "high"}}}}); no scratchpad is grey, drawn last."""
    import plotly.colors

    ranks = {group: {f: r["mrr"] for f, r in entry["formats"].items()} for group, entry in groups.items()}
    spans = {group: {f: (r["low"], r["high"]) for f, r in entry["formats"].items()} for group, entry in groups.items()}
    formats = sorted({f for scores in ranks.values() for f in scores}, key=lambda f: (f == "none", f != "full", f))
    palette = plotly.colors.qualitative.Safe
    series = [
        (f, "no scratchpad" if f == "none" else f, "#9e9e9e" if f == "none" else palette[i % len(palette)])
        for i, f in enumerate(formats)
    ]
    figure = _grouped_bars(ranks, spans, series)
    figure.update_layout(title=title, yaxis_title="mean reciprocal rank (higher is better)", yaxis_range=[0, 1.05])
    figure.update_layout(legend_title="scratchpad format")
    return figure


def _grouped_bars(
    ranks: Mapping[str, Mapping[str, float]],
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None,
    series: list[tuple[str, str, str]],
):
    """A group of bars per key of ``ranks``, one bar per ``series`` entry (key, legend name, colour) present
    in it; ``intervals`` as asymmetric error bars."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for key, name, color in series:
        groups = [group for group, scores in ranks.items() if key in scores]
        values = [ranks[g][key] for g in groups]
        bars = None
        if intervals is not None:
            spans = [intervals.get(g, {}).get(key, (v, v)) for g, v in zip(groups, values)]
            bars = dict(
                type="data",
                symmetric=False,
                array=[high - v for (_, high), v in zip(spans, values)],
                arrayminus=[v - low for (low, _), v in zip(spans, values)],
            )
        figure.add_trace(go.Bar(x=groups, y=values, name=name, marker_color=color, error_y=bars))
    figure.update_layout(barmode="group", template="plotly_white")
    return figure
