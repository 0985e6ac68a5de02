"""Attention maps of one example, a heatmap per head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from torch import Tensor


def attention_heatmaps(tokens: Sequence[str], patterns: Tensor, layer: int, title: str | None = None) -> go.Figure:
    """One heatmap per head of ``layer``: queries down, keys across, tokens on the axes, values on hover; the
    heads side by side across the page's width, four to a row.

    ``patterns``: [layer, head, query, key] (or [head, query, key] for the layer itself).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    maps = patterns[layer] if patterns.dim() == 4 else patterns  # [head, query, key]
    n_heads, n = maps.shape[0], len(tokens)
    cols = min(n_heads, 4)
    rows = -(-n_heads // cols)
    figure = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"head {h}" for h in range(n_heads)],
        horizontal_spacing=0.04,
        vertical_spacing=0.08,
    )
    labels = [f"{i}: {token}" for i, token in enumerate(tokens)]
    hover = [[(labels[q], labels[k]) for k in range(n)] for q in range(n)]
    for head in range(n_heads):
        figure.add_trace(
            go.Heatmap(
                z=maps[head].tolist(),
                zmin=0,
                zmax=1,
                colorscale="Blues",
                showscale=head == 0,
                colorbar=dict(title="attention p"),
                customdata=hover,
                hovertemplate="query %{customdata[0]}<br>key %{customdata[1]}<br>p %{z:.3f}<extra>head "
                + str(head)
                + "</extra>",
            ),
            row=head // cols + 1,
            col=head % cols + 1,
        )
    axis = dict(tickmode="array", tickvals=list(range(n)), ticktext=list(tokens), tickfont=dict(size=8))
    figure.update_xaxes(**axis, tickangle=-90)
    figure.update_yaxes(**axis, autorange="reversed")
    figure.update_xaxes(title_text="key", row=rows)
    figure.update_yaxes(title_text="query", col=1)
    size = max(250, min(500, 10 * n + 100))  # pixels per row of heads: tall enough to read every token
    figure.update_layout(title=title or f"attention, layer {layer}", template="plotly_white", height=size * rows + 80)
    return figure  # no width: the HTML and the explorer take the page's, a PNG PANEL_WIDTH per head across
