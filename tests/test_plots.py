"""Figures on disk: what `write_figure` leaves must draw with no network."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import plotly
import plotly.graph_objects as go

from probe.figures import write_figure


def test_figures_draw_offline_from_one_library_per_folder(tmp_path, monkeypatch, capsys):
    """No script from elsewhere: each HTML loads plotly.js from the file beside it, written once for
    the folder; with no static renderer, the HTML alone and one line saying why, once."""
    import probe.figures.output

    monkeypatch.setattr(probe.figures.output, "_told", set())

    def no_renderer(*args, **kwargs):
        raise RuntimeError("no kaleido")

    monkeypatch.setattr(go.Figure, "write_image", no_renderer)
    figure = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    written = write_figure(figure, tmp_path / "figure") + write_figure(figure, tmp_path / "other")
    assert written == [tmp_path / "figure.html", tmp_path / "other.html"]  # no static renderer: the HTML alone
    for page in written:
        html = page.read_text()
        assert re.findall(r"<script[^>]*\bsrc=\"([^\"]+)\"", html) == ["plotly.min.js"]  # the sibling, no URL
        assert len(html) < 100_000  # the library is not inlined
    library = (tmp_path / "plotly.min.js").read_text()
    assert f"plotly.js v{plotly.offline.get_plotlyjs_version()}" in library  # the library's own banner
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.html", "other.html", "plotly.min.js"]
    err = capsys.readouterr().err
    assert err.count("no PNG (no kaleido; kaleido needs Chrome: plotly_get_chrome)") == 1


def test_without_kaleido_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    """kaleido not installed (it comes with ``probe[png]``): the HTML, and one plain line saying how to get
    PNGs, not plotly's own multi-line notice."""
    import probe.figures.output

    monkeypatch.setattr(probe.figures.output, "_told", set())
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido fails; find_spec says it is missing
    figure = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    written = write_figure(figure, tmp_path / "a") + write_figure(figure, tmp_path / "b")
    assert written == [tmp_path / "a.html", tmp_path / "b.html"]
    err = capsys.readouterr().err
    assert (
        err == 'probe: figures are written as HTML only, no PNG (kaleido is not installed: pip install "probe[png]")\n'
    )
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert re.search(r'^png = \["kaleido>=1', pyproject, re.MULTILINE), "the extra the line names"
