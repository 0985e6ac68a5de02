"""How figures are written: HTML always (one shared plotly.js per folder, offline), PNG where kaleido can."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

PLOTLY_JS = "plotly.min.js"  # one copy per output folder, beside the figures that load it
PNG_EXTRA = 'pip install "probe[png]"'  # kaleido, which draws PNGs with a Chrome it finds or installs
PANEL_WIDTH = 450  # pixels of a PNG per panel across (at least PNG_WIDTH): a pasted figure keeps its panels legible
PNG_WIDTH = 900
_told: set[str] = set()  # notes said once a process


def write_figure(figure: go.Figure, path: str | Path) -> list[Path]:
    """Write ``path``.html, and ``path``.png if a static renderer (kaleido + Chrome) is available
    (where it is not, one line on stderr says so and how to get it, once).

    The HTML loads plotly.js from ``plotly.min.js`` beside it, written once per folder (about 4 MB):
    it draws with no network, and a folder of figures holds the library once, not once a figure.
    Copy the folder, or the figure with that file, to take it elsewhere. The HTML takes the width of
    its window; the PNG is :func:`png_width` wide."""
    import plotly

    from probe.atomic import atomic_write, atomic_write_text

    path = Path(path)
    library = path.parent / PLOTLY_JS
    source = plotly.offline.get_plotlyjs()
    if not library.is_file() or library.stat().st_size != len(source.encode()):
        atomic_write_text(library, source)
    written = [path.with_suffix(".html")]
    atomic_write(written[0], lambda tmp: figure.write_html(tmp, include_plotlyjs=PLOTLY_JS))
    if importlib.util.find_spec("kaleido") is None:
        _tell(f"kaleido is not installed: {PNG_EXTRA}")
        return written
    try:
        figure.write_image(path.with_suffix(".png"), scale=2, width=png_width(figure))
        written.append(path.with_suffix(".png"))
    except Exception as error:  # kaleido's browser missing or broken: the HTML is the figure
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        _tell(f"{lines[0] if lines else type(error).__name__}; kaleido needs Chrome: plotly_get_chrome")
    return written


def png_width(figure: go.Figure) -> int:
    """A PNG's width in pixels: the figure's own where it sets one, else :data:`PANEL_WIDTH` per panel across."""
    if figure.layout.width:
        return int(figure.layout.width)
    starts = {round(axis.domain[0], 3) for axis in figure.select_xaxes() if axis.domain}
    return max(PNG_WIDTH, PANEL_WIDTH * max(1, len(starts)))


def _tell(why: str) -> None:
    if "png" not in _told:
        _told.add("png")
        print(f"probe: figures are written as HTML only, no PNG ({why})", file=sys.stderr)
