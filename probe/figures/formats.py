"""Section 6's figures of scratchpad formats: their ranks per task or per PE, and each PE's OOD exact match per
format and task (Figures scratchpad_formats_per_ds, scratchpad_formats_per_model and its per-task panels)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from probe.figures.bars import bar_traces, grouped_bars
from probe.figures.style import pe_color

if TYPE_CHECKING:
    import plotly.graph_objects as go

NONE_LABEL = "no scratchpad"


def format_rank_figure(groups: Mapping[str, Mapping[str, Any]], title: str) -> go.Figure:
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
        (f, NONE_LABEL if f == "none" else f, "#9e9e9e" if f == "none" else palette[i % len(palette)])
        for i, f in enumerate(formats)
    ]
    figure = grouped_bars(ranks, spans, series)
    figure.update_layout(title=title, yaxis_title="mean reciprocal rank (higher is better)", yaxis_range=[0, 1.05])
    figure.update_layout(legend_title="scratchpad format")
    return figure


def format_accuracy_figure(
    per_task: Mapping[str, Mapping[str, Any]],
    title: str,
    floors: Mapping[str, float | None] | None = None,
) -> go.Figure:
    """The appendix's Figures scratchpad_formats_per_model:<task>, one panel per task: a group of bars per format
    (no scratchpad first), a bar per PE, its OOD exact match (%) as the mean over seeds with their range as error
    bars, each panel on its own scale (a task whose PEs all score little is not drawn flat); where ``floors``
    gives a task's constant-guess score above 0, a dashed line at it, since two PEs at that floor differ by
    chance, not by how they generalize.

    ``per_task``: :func:`probe.studies.formats.format_accuracy`' output ({task: {"formats": [...], "pes": {pe:
    {format: {"mean", "min", "max", "seeds"}}}}})."""
    from plotly.subplots import make_subplots

    from probe.models.registry import FIGURE_ORDER, PE_LABELS

    tasks = list(per_task)
    figure = make_subplots(rows=len(tasks), cols=1, subplot_titles=tasks, vertical_spacing=0.25 / max(len(tasks), 1))
    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    pes = sorted({pe for entry in per_task.values() for pe in entry["pes"]}, key=lambda pe: (order.get(pe, 99), pe))
    series = [(pe, PE_LABELS.get(pe, pe), pe_color(pe)) for pe in pes]
    named: set[str] = set()
    for row, task in enumerate(tasks, start=1):
        values, spans = _by_format(per_task[task])
        for trace in bar_traces(values, spans, [s for s in series if s[0] in per_task[task]["pes"]]):
            trace.update(legendgroup=trace.name, showlegend=trace.name not in named, hovertemplate="%{x}: %{y:.1f}%")
            figure.add_trace(trace, row=row, col=1)
            named.add(trace.name)
        floor = 100 * ((floors or {}).get(task) or 0.0)
        if floor:
            figure.add_hline(y=floor, line_dash="dash", line_color="gray", row=row, col=1)
        top = max([floor, *(high for by_pe in spans.values() for _, high in by_pe.values())])
        figure.update_yaxes(range=[0, 1.12 * max(top, 1.0)], row=row, col=1)  # each task on its own scale
    figure.update_yaxes(title_text="OOD exact match (%)")
    figure.update_layout(
        title=title,
        barmode="group",
        template="plotly_white",
        height=260 * len(tasks) + 140,
        legend_title="positional encoding",
    )
    return figure


def _by_format(entry: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, tuple]]]:
    """One task's bars as :func:`~probe.figures.bars.bar_traces` reads them, a group per format in the task's
    order: heights and seed ranges in %, {format label: {pe: ...}}."""
    values: dict[str, dict[str, float]] = {}
    spans: dict[str, dict[str, tuple]] = {}
    for fmt in entry["formats"]:
        label = NONE_LABEL if fmt == "none" else fmt
        measured = {pe: formats[fmt] for pe, formats in entry["pes"].items() if fmt in formats}
        values[label] = {pe: 100 * m["mean"] for pe, m in measured.items()}
        spans[label] = {pe: (100 * m["min"], 100 * m["max"]) for pe, m in measured.items()}
    return values, spans
