"""Histograms of the normalized attended distance (the paper's Figure on attention distance)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from probe.figures.style import pe_color, rgba

WEIGHTING_TITLES = {"argmax": "attended key (arg-max)", "attention": "attention-weighted"}


def attended_distance_figure(series: Sequence[Mapping[str, Any]], title: str):
    """Figure attended_distance: the distribution of d̄ per PE, overlaid, one panel per weighting.

    ``series``: dicts with ``label``, ``pe`` and ``histograms`` = {weighting: {``edges``, ``mass``,
    ``bimodality``}}.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    weightings = list(dict.fromkeys(w for s in series for w in s["histograms"]))
    figure = make_subplots(
        rows=1,
        cols=max(1, len(weightings)),
        shared_yaxes=True,
        subplot_titles=[WEIGHTING_TITLES.get(w, w) for w in weightings],
    )
    for s in series:
        color = pe_color(s["pe"])
        for col, weighting in enumerate(weightings, start=1):
            h = s["histograms"].get(weighting)
            if h is None:
                continue
            edges, mass = list(h["edges"]), list(h["mass"])
            figure.add_trace(
                go.Scatter(
                    x=edges,
                    y=mass + mass[-1:],
                    mode="lines",
                    line=dict(color=color, shape="hv", width=2),
                    fill="tozeroy",
                    fillcolor=rgba(color, 0.08),
                    name=s["label"],
                    legendgroup=s["label"],
                    showlegend=col == 1,
                    hovertemplate="d̄ from %{x:.2f}<br>mass %{y:.3f}<extra>"
                    + s["label"]
                    + f" (bimodality {h.get('bimodality', float('nan')):.3f})</extra>",
                ),
                row=1,
                col=col,
            )
        for col in range(1, len(weightings) + 1):
            figure.update_xaxes(title_text="normalized distance d̄", range=[0, 1], row=1, col=col)
    figure.update_yaxes(title_text="fraction of attention", row=1, col=1)
    figure.update_layout(title=title, template="plotly_white", legend_title="positional encoding")
    return figure
