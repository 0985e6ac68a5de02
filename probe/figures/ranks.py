"""The PEs' ranks by OOD accuracy per category of tasks, as bars (Figures teaser and mrr-per-category)."""

from __future__ import annotations

from collections.abc import Mapping

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
    import plotly.graph_objects as go

    from probe.models.registry import FIGURE_ORDER, PE_LABELS

    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    figure = go.Figure()
    for pe in sorted({pe for scores in ranks.values() for pe in scores}, key=lambda pe: (order.get(pe, 99), pe)):
        names = [name for name, scores in ranks.items() if pe in scores]
        values = [ranks[n][pe] for n in names]
        bars = None
        if intervals is not None:
            spans = [intervals.get(n, {}).get(pe, (v, v)) for n, v in zip(names, values)]
            bars = dict(
                type="data",
                symmetric=False,
                array=[high - v for (_, high), v in zip(spans, values)],
                arrayminus=[v - low for (low, _), v in zip(spans, values)],
            )
        figure.add_trace(go.Bar(x=names, y=values, name=PE_LABELS.get(pe, pe), marker_color=pe_color(pe), error_y=bars))
    figure.update_layout(title=title, yaxis_title=axis, barmode="group", template="plotly_white")
    if y_range is not None:
        figure.update_layout(yaxis_range=list(y_range))
    return figure
