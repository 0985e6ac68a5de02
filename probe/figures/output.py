"""How figures are written: HTML always (one shared plotly.js per folder, offline), PNG where kaleido can."""

from __future__ import annotations

import sys
from pathlib import Path

PLOTLY_JS = "plotly.min.js"  # one copy per output folder, beside the figures that load it
_told: set[str] = set()  # notes said once a process


def write_figure(figure, path: str | Path) -> list[Path]:
    """Write ``path``.html, and ``path``.png if a static renderer (kaleido + Chrome) is available
    (where it is not, one line on stderr says so, once).

    The HTML loads plotly.js from ``plotly.min.js`` beside it, written once per folder (about 4 MB):
    it draws with no network, and a folder of figures holds the library once, not once a figure.
    Copy the folder, or the figure with that file, to take it elsewhere."""
    import plotly

    from probe.atomic import atomic_write, atomic_write_text

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
