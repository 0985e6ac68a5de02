"""Plotly figures of `probe positions` (:mod:`probe.analysis.positions`): probes per stream, head shares,
attention sinks and attention-output variance against position. Inputs are the JSON it writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import pe_color, rgba

if TYPE_CHECKING:
    import plotly.graph_objects as go

SHARE_COLORS = {
    "relative only": "#1f77b4",
    "absolute only": "#ff7f0e",
    "relative and absolute": "#9467bd",
    "content and other": "#c7c7c7",
}


def probe_figure(results: Sequence[Mapping[str, Any]], target: str = "position") -> go.Figure:
    """R² of the linear read-out per stream (0: the embedding, s: after layer s - 1, layers from 0), one panel
    per set scored (held-out seen lengths, unseen lengths), one line per model with its bootstrap band. The
    y-axis reaches the lowest R² drawn (on unseen lengths it can fall far below 0): no curve is clipped."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    sets = ("heldout", "unseen")
    lowest = 0.0
    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("held-out seen lengths", "unseen lengths"), shared_yaxes=True
    )
    for result in results:
        pe, label = result["run"]["pe"], result["run"]["label"]
        for col, name in enumerate(sets, start=1):
            rows = sorted(
                (r for r in result["probes"] if r["target"] == target and r["set"] == name), key=lambda r: r["stream"]
            )
            if not rows:
                continue
            x = [r["stream"] for r in rows]
            lowest = min(lowest, *(r["r2_low"] for r in rows), *(r["r2"] for r in rows))
            figure.add_trace(
                go.Scatter(
                    x=x + x[::-1],
                    y=[r["r2_high"] for r in rows] + [r["r2_low"] for r in rows][::-1],
                    mode="lines",
                    fill="toself",
                    fillcolor=rgba(pe_color(pe), 0.15),
                    line=dict(width=0),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=label,
                ),
                row=1,
                col=col,
            )
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=[r["r2"] for r in rows],
                    mode="lines+markers",
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    line=dict(color=pe_color(pe)),
                    customdata=[[r["mae"], 100 * r["accuracy"]] for r in rows],
                    hovertemplate="stream %{x}<br>R² %{y:.3f}<br>MAE %{customdata[0]:.2f}<br>"
                    "exact %{customdata[1]:.1f}%<extra>" + label + "</extra>",
                ),
                row=1,
                col=col,
            )
    what = "absolute position" if target == "position" else "distance to the separator"
    figure.update_xaxes(title_text="stream (0 = embedding, s = after layer s - 1)", dtick=1)
    figure.update_yaxes(title_text="R²", range=[min(-0.5, lowest - 0.05 * (1.05 - lowest)), 1.05], row=1, col=1)
    figure.update_layout(title=f"Linear read-out of {what} per layer", template="plotly_white")
    return figure


def head_share_figure(results: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Per model, per layer and head: the variance of the causal logits explained by distance only,
    by key position only, by either, and the rest (seen lengths)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=len(results),
        cols=1,
        subplot_titles=[r["run"]["label"] for r in results],
        vertical_spacing=0.08 if len(results) > 1 else 0.2,
    )
    for row, result in enumerate(results, start=1):
        seen = result["decomposition"].get("seen")
        if not seen:
            continue
        labels, parts = [], {name: [] for name in SHARE_COLORS}
        for layer, (rel, abs_, both) in enumerate(zip(seen["relative"], seen["absolute"], seen["both"])):
            for head, (r, a, b) in enumerate(zip(rel, abs_, both)):
                labels.append(f"L{layer}H{head}")
                parts["relative only"].append(b - a)
                parts["absolute only"].append(b - r)
                parts["relative and absolute"].append(r + a - b)
                parts["content and other"].append(1 - b)
        for name, values in parts.items():
            figure.add_trace(
                go.Bar(
                    x=labels,
                    y=values,
                    name=name,
                    marker_color=SHARE_COLORS[name],
                    legendgroup=name,
                    showlegend=row == 1,
                ),
                row=row,
                col=1,
            )
    figure.update_layout(
        barmode="relative",
        template="plotly_white",
        height=260 * len(results) + 120,
        title="What explains each head's attention logits (variance shares, seen lengths)",
    )
    return figure


def _per_layer_figure(series: Sequence[dict[str, Any]], uniform: Mapping[str, float], title: str, y_title: str):
    """A line per (model, lengths) of a per-layer mean with its interval (``series``: label, pe, lengths, mean,
    low, high), seen solid and unseen dashed, and uniform attention's value per set of lengths dotted."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for line in series:
        figure.add_trace(
            go.Scatter(
                x=list(range(len(line["mean"]))),
                y=line["mean"],
                name=f"{line['label']} ({line['lengths']})",
                mode="lines+markers",
                line=dict(color=pe_color(line["pe"]), dash="solid" if line["lengths"] == "seen" else "dash"),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[h - m for h, m in zip(line["high"], line["mean"])],
                    arrayminus=[m - lo for m, lo in zip(line["mean"], line["low"])],
                ),
            )
        )
    for lengths, value in uniform.items():
        figure.add_hline(y=value, line_dash="dot", line_color="gray", annotation_text=f"uniform ({lengths})")
    figure.update_layout(title=title, xaxis_title="layer", yaxis_title=y_title, template="plotly_white", xaxis_dtick=1)
    return figure


def sink_figure(results: Sequence[Mapping[str, Any]], first: int = 1) -> go.Figure:
    """Attention on the first ``first`` tokens per layer, at seen and unseen lengths, beside uniform attention's."""
    series, uniform = [], {}
    for result in results:
        for lengths in ("seen", "unseen"):
            rows = sorted(
                (r for r in result["sinks"] if r["first"] == first and r["lengths"] == lengths),
                key=lambda r: r["layer"],
            )
            if rows:
                series.append(
                    {
                        "label": result["run"]["label"],
                        "pe": result["run"]["pe"],
                        "lengths": lengths,
                        "mean": [r["share"] for r in rows],
                        "low": [r["share_low"] for r in rows],
                        "high": [r["share_high"] for r in rows],
                    }
                )
                uniform[lengths] = rows[0]["uniform"]
    title = f"Attention on the first {first} token(s), mean over heads and queries"
    return _per_layer_figure(series, uniform, title, "share of attention")


def entropy_figure(results: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Attention-row entropy per layer (mean over heads, with its interval over inputs) at seen and unseen
    lengths, beside uniform attention's: distraction is the unseen line climbing towards its uniform line."""
    series, uniform = [], {}
    for result in results:
        for lengths, found in result.get("entropy", {}).items():
            if lengths in ("seen", "unseen"):
                run = {"label": result["run"]["label"], "pe": result["run"]["pe"], "lengths": lengths}
                series.append({**run, "mean": found["layers"], "low": found["low"], "high": found["high"]})
                uniform[lengths] = found["uniform"]
    title = "Attention entropy per layer (nats), mean over heads and query rows"
    return _per_layer_figure(series, uniform, title, "entropy (nats)")


def variance_figure(results: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Variance of each layer's attention output across examples against position (log-log), per model;
    layers numbered from 0, as in every other figure and table."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for result in results:
        pe, label = result["run"]["pe"], result["run"]["label"]
        variance = result["variance"]
        for layer, (values, slope) in enumerate(zip(variance["layers"], variance["slope"])):
            figure.add_trace(
                go.Scatter(
                    x=variance["position"],
                    y=values,
                    mode="lines",
                    name=f"{label} layer {layer} (slope {slope:.2f})",
                    line=dict(color=pe_color(pe), dash=("solid", "dash", "dot", "dashdot")[layer % 4]),
                )
            )
    figure.update_layout(
        title="Variance of the attention output across examples (Chi et al. 2023: ~1/t for uniform attention)",
        xaxis_title="position t (1-based)",
        yaxis_title="variance",
        xaxis_type="log",
        yaxis_type="log",
        template="plotly_white",
    )
    return figure
