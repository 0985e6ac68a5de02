"""Fixtures several test modules share."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch
from helpers import make_checkpoints, write_code_corpus

import probe.figures.output


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared CPU: one thread avoids oversubscription stalls (every module; a test
    that means another count sets it itself)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def no_stated_width(monkeypatch):
    """No COLUMNS: pytest-xdist's workers have it set to 80, a width no serial run states, which would make
    the console break lines a test reads; a test that means a width sets it itself."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def no_png(monkeypatch):
    """No PNG export in tests (kaleido drives a headless Chrome, seconds a figure) and no line saying so: the
    HTML is the figure every test reads. tests/test_plots.py tests that path itself, with its own renderer."""

    def refuse(*args, **kwargs):
        raise RuntimeError("no static export in tests")

    monkeypatch.setattr(go.Figure, "write_image", refuse)
    monkeypatch.setattr(probe.figures.output, "_told", {"png"})


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Path:
    """The explorer's tiny checkpoints (helpers.make_checkpoints), made once per session for every module."""
    return make_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def code_corpus(tmp_path_factory) -> Path:
    """The code corpus the code-model tests read (helpers.write_code_corpus), written once per session."""
    return write_code_corpus(tmp_path_factory.mktemp("code-corpus") / "src")
