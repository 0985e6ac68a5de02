"""Fixtures several test modules share."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import make_checkpoints, write_code_corpus


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared CPU: one thread avoids oversubscription stalls (every module; a test
    that means another count sets it itself)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Path:
    """The explorer's tiny checkpoints (helpers.make_checkpoints), made once per session for every module."""
    return make_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def code_corpus(tmp_path_factory) -> Path:
    """The code corpus the code-model tests read (helpers.write_code_corpus), written once per session."""
    return write_code_corpus(tmp_path_factory.mktemp("code-corpus") / "src")
