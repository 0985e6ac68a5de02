"""Plotly figures, one module per figure, and how they are written (:mod:`probe.figures.output`).

Every analysis draws through these functions, the CLI's reports and the explorer's pages alike. plotly is
imported inside each function, so importing this package stays fast.
"""

from probe.figures.accuracy import accuracy_by_length, accuracy_panels
from probe.figures.attended import attended_distance_figure
from probe.figures.attention import attention_heatmaps
from probe.figures.formats import format_accuracy_figure, format_rank_figure
from probe.figures.output import PLOTLY_JS, write_figure
from probe.figures.perplexity import perplexity_figure
from probe.figures.positions import entropy_figure, head_share_figure, probe_figure, sink_figure, variance_figure
from probe.figures.ranks import rank_figure
from probe.figures.similarity import head_matrix_figure, layer_distance_figure
from probe.figures.style import pe_color, rgba

__all__ = [
    "PLOTLY_JS",
    "accuracy_by_length",
    "accuracy_panels",
    "attended_distance_figure",
    "attention_heatmaps",
    "entropy_figure",
    "format_accuracy_figure",
    "format_rank_figure",
    "head_matrix_figure",
    "head_share_figure",
    "layer_distance_figure",
    "pe_color",
    "perplexity_figure",
    "probe_figure",
    "rank_figure",
    "rgba",
    "sink_figure",
    "variance_figure",
    "write_figure",
]
