"""Perplexity against context size (Appendix "Pretraining at 1.3B Scale")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import pe_color

if TYPE_CHECKING:
    import plotly.graph_objects as go


def perplexity_figure(rows: Sequence[Mapping[str, Any]], train_context: int, title: str, buckets: int = 8) -> go.Figure:
    """Figure pretraining:ppl: perplexity against context size, one line per run, one panel per
    file-length bucket (the "all" panel first: files of at least 2.5x the training context),
    the training context marked. ``rows``: :meth:`probe.analysis.perplexity.PerplexityReport.to_rows`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = list(dict.fromkeys(row["bucket"] for row in rows))
    names = names[:1] + names[1:][-buckets:] if len(names) > buckets + 1 else names  # the longest buckets
    columns = min(3, len(names))
    figure = make_subplots(
        rows=-(-len(names) // columns),
        cols=columns,
        shared_yaxes=False,
        subplot_titles=[f"files {name} tokens" if name != "all" else "all files ≥ 2.5x context" for name in names],
    )
    runs = list(dict.fromkeys((row["run"], row["pe"]) for row in rows))
    for index, name in enumerate(names):
        row_index, column = index // columns + 1, index % columns + 1
        for run, pe in runs:
            cells = [row for row in rows if row["bucket"] == name and row["run"] == run]
            figure.add_trace(
                go.Scatter(
                    x=[c["context"] for c in cells],
                    y=[c["perplexity"] for c in cells],
                    mode="lines+markers",
                    name=run,
                    legendgroup=run,
                    showlegend=index == 0,
                    line=dict(color=pe_color(pe)),
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=[c["high"] - c["perplexity"] for c in cells],
                        arrayminus=[c["perplexity"] - c["low"] for c in cells],
                        thickness=1,
                        width=2,
                    ),
                    hovertemplate="context %{x}<br>perplexity %{y:.2f}<extra>" + run + "</extra>",
                ),
                row=row_index,
                col=column,
            )
        figure.add_vline(x=train_context, line_dash="dash", line_color="gray", row=row_index, col=column)
    figure.update_yaxes(type="log", title_text="perplexity")
    figure.update_xaxes(title_text="context size (tokens)")
    figure.update_layout(
        title=title, template="plotly_white", legend_title="model", height=320 * (-(-len(names) // columns))
    )
    return figure
