"""Plotly figures for every analysis, and how they are written (HTML always, PNG where possible)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probe.models.registry import PE_COLORS


def pe_color(pe: str) -> str:
    return PE_COLORS.get(pe, "#7f7f7f")


PLOTLY_JS = "plotly.min.js"  # one copy per output folder, beside the figures that load it
_told: set[str] = set()  # notes said once a process


def write_figure(figure, path: str | Path) -> list[Path]:
    """Write ``path``.html, and ``path``.png if a static renderer (kaleido + Chrome) is available
    (where it is not, one line on stderr says so, once).

    The HTML loads plotly.js from ``plotly.min.js`` beside it, written once per folder (about 4 MB):
    it draws with no network, and a folder of figures holds the library once, not once a figure.
    Copy the folder, or the figure with that file, to take it elsewhere."""
    import plotly

    from probe.files import atomic_write, atomic_write_text

    path = Path(path)
    library = path.parent / PLOTLY_JS
    source = plotly.offline.get_plotlyjs()
    if not library.is_file() or library.stat().st_size != len(source.encode()):
        atomic_write_text(library, source)
    written = [path.with_suffix(".html")]
    atomic_write(written[0], lambda tmp: figure.write_html(tmp, include_plotlyjs=PLOTLY_JS))
    try:
        figure.write_image(path.with_suffix(".png"), scale=2)
        written.append(path.with_suffix(".png"))
    except Exception as error:  # kaleido or its browser missing: the HTML is the figure
        if "png" not in _told:
            _told.add("png")
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            print(f"probe: figures are written as HTML only: no PNG ({reason}; pip install kaleido)", file=sys.stderr)
    return written


def accuracy_by_length(curves: Sequence[Mapping[str, Any]], train_range: tuple[float, float] | None, title: str):
    """Figure showcase: exact match against length, one line per run, the training range shaded.

    ``curves``: dicts with ``label``, ``pe``, ``lengths``, ``accuracy`` (0..1).
    """
    import plotly.graph_objects as go

    figure = go.Figure()
    if train_range is not None:
        figure.add_vrect(
            x0=train_range[0] - 0.5,
            x1=train_range[1] + 0.5,
            fillcolor="lightgray",
            opacity=0.35,
            line_width=0,
            annotation_text="seen lengths",
            annotation_position="top left",
        )
    for curve in curves:
        figure.add_trace(
            go.Scatter(
                x=list(curve["lengths"]),
                y=[100 * a for a in curve["accuracy"]],
                mode="lines+markers",
                name=curve["label"],
                line=dict(color=pe_color(curve["pe"]), dash="dot" if curve.get("dashed") else "solid"),
                hovertemplate="length %{x}<br>exact match %{y:.1f}%<extra>" + curve["label"] + "</extra>",
            )
        )
    figure.update_layout(
        title=title,
        xaxis_title="length bucket λ",
        yaxis_title="exact match (%)",
        yaxis_range=[-2, 102],
        template="plotly_white",
        legend_title="model",
    )
    return figure


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def layer_distance_figure(curves: Sequence[Mapping[str, Any]], title: str, metric_label: str = "D^(l) (JSD)"):
    """Figure similarity_per_layer: distance per layer (left) and averaged over layers (right).

    ``curves``: dicts with ``label``, ``pe``, per-layer ``mean``, ``low``, ``high`` (bootstrap
    interval), ``average`` = [mean, low, high], and ``dashed`` (the NoPE' seed baseline).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.7, 0.3],
        horizontal_spacing=0.1,
        subplot_titles=("distance per layer", "average over layers"),
    )
    for curve in curves:
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
    figure.update_xaxes(title_text="layer", dtick=1, row=1, col=1)
    figure.update_yaxes(title_text=metric_label, rangemode="tozero", row=1, col=1)
    figure.update_yaxes(rangemode="tozero", row=1, col=2)
    figure.update_layout(title=title, template="plotly_white", legend_title="compared with")
    return figure


def head_matrix_figure(matrix, argmin: Sequence[int], title: str, labels: tuple[str, str] = ("A", "B")):
    """Heatmap of D_AT for every head pair of one layer ([head_A, head_B]), the arg-min pair circled."""
    import plotly.graph_objects as go

    values = [[float(v) for v in row] for row in (matrix.tolist() if hasattr(matrix, "tolist") else matrix)]
    figure = go.Figure(
        go.Heatmap(
            z=values,
            colorscale="Viridis_r",
            colorbar=dict(title="D_AT"),
            hovertemplate=f"{labels[1]} head %{{x}}<br>{labels[0]} head %{{y}}<br>D_AT %{{z:.4f}}<extra></extra>",
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
    figure.update_layout(
        title=f"{title} (min at {labels[0]} head {row}, {labels[1]} head {col})", template="plotly_white"
    )
    return figure


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


def attention_heatmaps(tokens: Sequence[str], patterns, layer: int, title: str | None = None):
    """One heatmap per head of ``layer``: queries down, keys across, tokens on the axes, values on hover.

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
    size = max(250, min(500, 10 * n + 100))  # pixels per head
    figure.update_layout(
        title=title or f"attention, layer {layer}", template="plotly_white", height=size * rows + 80, width=size * cols
    )
    return figure


def perplexity_figure(rows: Sequence[Mapping[str, Any]], train_context: int, title: str, buckets: int = 8):
    """Figure pretraining:ppl: perplexity against context size, one line per run, one panel per
    file-length bucket (the "all" panel first: files of at least 2.5x the training context),
    the training context marked. ``rows``: :meth:`probe.perplexity.PerplexityReport.table`."""
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
