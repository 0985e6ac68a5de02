"""Figures on disk: what `write_figure` leaves must draw with no network."""

from __future__ import annotations

import re

import plotly
import plotly.graph_objects as go

from probe.plots import write_figure


def test_a_written_figure_draws_offline(tmp_path, monkeypatch):
    monkeypatch.setattr(go.Figure, "write_image", lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError()))
    figure = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    written = write_figure(figure, tmp_path / "figure")
    assert written == [tmp_path / "figure.html"]  # no static renderer: the HTML alone
    html = written[0].read_text()
    assert not re.findall(r"<script[^>]*\bsrc=", html)  # nothing fetched: no script loads from elsewhere
    assert f"plotly.js v{plotly.offline.get_plotlyjs_version()}" in html  # the library's own banner, inlined
