"""The PEs' ranks by OOD accuracy per category of tasks, as bars (Figures teaser and mrr-per-category)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from probe.figures.bars import grouped_bars
from probe.figures.style import pe_color

if TYPE_CHECKING:
    import plotly.graph_objects as go


def rank_figure(
    ranks: Mapping[str, Mapping[str, float]],
    title: str,
    axis: str,
    y_range: tuple[float, float] | None = None,
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
) -> go.Figure:
    """``ranks``: {category: {pe: rank}}; one group of bars per category, a bar per PE in the paper's figure
    order, coloured as every figure colours it; ``intervals`` ({category: {pe: (low, high)}}) as error bars."""
    from probe.models.registry import FIGURE_ORDER, PE_LABELS

    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    pes = sorted({pe for scores in ranks.values() for pe in scores}, key=lambda pe: (order.get(pe, 99), pe))
    figure = grouped_bars(ranks, intervals, [(pe, PE_LABELS.get(pe, pe), pe_color(pe)) for pe in pes])
    figure.update_layout(title=title, yaxis_title=axis)
    if y_range is not None:
        figure.update_layout(yaxis_range=list(y_range))
    return figure
