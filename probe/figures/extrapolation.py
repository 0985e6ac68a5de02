"""Exact match against length (or perplexity against context) of one PE's runs under each intervention."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.figures.style import bucket_symbols, bucket_ticks

if TYPE_CHECKING:
    import plotly.graph_objects as go

DASH = {"none": "solid", "fixed": "dash", "tuned": "dot"}
TITLE = 40  # characters of a panel's title: an hf: model's folder keeps its end


def _short(label: str) -> str:
    return label if len(label) <= TITLE else "…" + label[-(TITLE - 1) :]


def _name(outcome: Mapping[str, Any]) -> str:
    """The intervention as the report prints it (a tuned temperature of 1 as ``temperature=1``)."""
    return outcome.get("shown") or outcome["intervention"]["name"]


def extrapolation_figure(runs: Sequence[Mapping[str, Any]], measure: str) -> go.Figure:
    """One panel per run of a PE (as :meth:`probe.extrapolation.report.RunExtrapolation.to_json` gives
    it): a line per intervention with its 95% interval as error bars; untouched solid, fixed rules dashed,
    tuned dotted. Perplexity on a log axis: past the context it grows by orders of magnitude. Each curve is
    named in the legend, once (a tuned value differs from run to run); each tick gives its bucket's examples
    (files), tiny buckets hollow."""
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=len(runs), subplot_titles=[_short(r["label"]) for r in runs], shared_yaxes=True)
    names = list(dict.fromkeys(_name(o) for r in runs for o in r["outcomes"]))
    colours = {name: qualitative.D3[i % len(qualitative.D3)] for i, name in enumerate(names)}
    scale = 100 if measure == "exact match" else 1
    named: set[str] = set()
    for column, run in enumerate(runs, start=1):
        counts: dict[float, list[int]] = {}
        for o in run["outcomes"]:
            label = _add_outcome(figure, o, column, colours[_name(o)], scale, named=named)
            for b in o["buckets"]:
                counts.setdefault(b["at"], []).append(b["n"])
            named.add(label)
        figure.update_xaxes(**bucket_ticks(counts), row=1, col=column)
        if measure != "exact match":
            figure.add_vline(x=1.0, line_dash="dash", line_color="gray", row=1, col=column)
    figure.update_yaxes(title_text="exact match (%)" if measure == "exact match" else "perplexity", col=1)
    if measure != "exact match":
        figure.update_yaxes(type="log")
    figure.update_xaxes(title_text="length (unseen)" if measure == "exact match" else "context (x T)")
    pe = runs[0]["pe"] if runs else ""
    figure.update_layout(
        title=f"{pe}: {'exact match per unseen length' if measure == 'exact match' else 'perplexity per context'} "
        "under each intervention",
        template="plotly_white",
        height=420 + 24 * len(names),
        legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
    )
    return figure


def _add_outcome(
    figure: Any, outcome: Mapping[str, Any], column: int, colour: str, scale: float, *, named: set[str]
) -> str:
    """One intervention's line in a run's panel, its 95% interval as error bars, named in the legend
    unless its label is in ``named`` already; returns the label."""
    import plotly.graph_objects as go

    name, buckets = _name(outcome), outcome["buckets"]
    n = [b["n"] for b in buckets]
    label = f"{name} ({outcome['kind']}{', IID dropped' if outcome.get('iid_dropped') else ''})"
    figure.add_trace(
        go.Scatter(
            x=[b["at"] for b in buckets],
            y=[scale * b["mean"] for b in buckets],
            mode="lines+markers",
            name=label,
            legendgroup=label,
            showlegend=label not in named,
            line=dict(color=colour, dash=DASH.get(outcome["kind"], "solid")),
            marker=dict(symbol=bucket_symbols(n), size=7),
            customdata=n,
            hovertemplate="%{x}: %{y:.3g} (n=%{customdata})<extra>" + label + "</extra>",
            error_y=dict(
                type="data",
                symmetric=False,
                array=[scale * (b["high"] - b["mean"]) for b in buckets],
                arrayminus=[scale * (b["mean"] - b["low"]) for b in buckets],
                thickness=1,
                width=2,
            ),
        ),
        row=1,
        col=column,
    )
    return label
