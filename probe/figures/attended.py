"""Histograms of the normalized attended distance (the paper's Figure on attention distance)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import pe_color, rgba

if TYPE_CHECKING:
    import plotly.graph_objects as go

WEIGHTING_TITLES = {"argmax": "attended key (arg-max)", "attention": "attention-weighted"}
MASS_TITLES = {"argmax": "fraction of query rows", "attention": "fraction of attention"}
"""What a column's mass is a fraction of: each (example, layer, head, query)'s arg-max key counts once, or every
key by its attention."""


OVERLAID = 3
"""At most this many distributions share a panel; more are drawn as small multiples (one row per model):
five translucent fills overlaid mix into one brown."""


def attended_distance_figure(series: Sequence[Mapping[str, Any]], title: str, panels: bool | None = None) -> go.Figure:
    """Figure attended_distance: the distribution of d̄ per PE, one column per weighting; overlaid for up to
    :data:`OVERLAID` models, else (or with ``panels``) one row per model on shared axes.

    ``series``: dicts with ``label``, ``pe`` and ``histograms`` = {weighting: {``edges``, ``mass``,
    ``bimodality``}}.
    """
    from plotly.subplots import make_subplots

    weightings = list(dict.fromkeys(w for s in series for w in s["histograms"]))
    panels = len(series) > OVERLAID if panels is None else panels
    columns = [WEIGHTING_TITLES.get(w, w) for w in weightings] or [""]
    rows = len(series) if panels and series else 1
    figure = make_subplots(
        rows=rows,
        cols=len(columns),
        shared_xaxes=True,
        shared_yaxes="all" if panels else True,
        subplot_titles=columns,
        row_titles=[s["label"] for s in series] if panels and series else None,
        vertical_spacing=min(0.08, 0.3 / rows),
    )
    for index, s in enumerate(series):
        for col, weighting in enumerate(weightings, start=1):
            h = s["histograms"].get(weighting)
            if h is None:
                continue
            _add_histogram(figure, s, h, row=index + 1 if panels else 1, col=col, panels=panels)
    figure.update_xaxes(range=[0, 1])
    top = max((m for s in series for h in s["histograms"].values() for m in h["mass"]), default=1.0)
    figure.update_yaxes(range=[0, 1.08 * top])  # the tallest bar whole, every panel on one scale
    for col in range(1, len(columns) + 1):
        figure.update_xaxes(title_text="normalized distance d̄", row=rows, col=col)
    for col, weighting in enumerate(weightings, start=1):
        figure.update_yaxes(title_text=MASS_TITLES.get(weighting, "fraction"), row=(rows + 1) // 2, col=col)
    figure.update_layout(
        title=title,
        template="plotly_white",
        legend_title="positional encoding",
        height=max(450, 170 * rows + 150) if panels else None,
    )
    return figure


def _add_histogram(
    figure: Any, s: Mapping[str, Any], h: Mapping[str, Any], *, row: int, col: int, panels: bool
) -> None:
    """One model's histogram of one weighting as a filled step line, more opaque in a panel of its own than
    overlaid; the model named in the legend from its first column only."""
    import plotly.graph_objects as go

    color = pe_color(s["pe"])
    edges, mass = list(h["edges"]), list(h["mass"])
    figure.add_trace(
        go.Scatter(
            x=edges,
            y=mass + mass[-1:],
            mode="lines",
            line=dict(color=color, shape="hv", width=2),
            fill="tozeroy",
            fillcolor=rgba(color, 0.3 if panels else 0.08),
            name=s["label"],
            legendgroup=s["label"],
            showlegend=col == 1,
            hovertemplate="d̄ from %{x:.2f}<br>mass %{y:.3f}<extra>"
            + s["label"]
            + f" (bimodality {h.get('bimodality', float('nan')):.3f})</extra>",
        ),
        row=row,
        col=col,
    )
