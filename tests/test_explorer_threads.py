"""The explorer's shared models under several sessions at once: Streamlit runs each session's script in a thread
of its own, and ``st.cache_resource`` hands them one model, so every reading of it holds ``shared.exclusive``.

The pages' functions are run as the views define them beneath their cache decorators (``__wrapped__``): a view is a
script, so its imports and functions are taken from its source and the rest of it is not run.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from helpers import EXPLORER, FOLDER, TASK_OPTIONS

from probe.explorer import shared
from probe.tasks import get


def page_functions(page: str) -> dict[str, Any]:
    """The namespace of the view ``page``'s imports and functions (its script's widgets not run)."""
    path = EXPLORER.parent / "views" / f"{page}.py"
    tree = ast.parse(path.read_text())
    kept = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    namespace: dict[str, Any] = {"__name__": f"views_{page}"}
    exec(compile(ast.Module(kept, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def uncached(namespace: dict[str, Any], name: str) -> Callable:
    return namespace[name].__wrapped__


def held_elsewhere(model: object) -> bool:
    """Whether another session asking for ``shared.exclusive(model)`` now has to wait (it goes on once the model
    is let go)."""
    done = threading.Event()

    def session() -> None:
        try:
            with shared.exclusive(model):
                pass
        finally:
            done.set()

    threading.Thread(target=session, daemon=True).start()
    return not done.wait(timeout=2.0)


def test_two_sessions_reading_one_shared_model_get_their_own_attention(checkpoints):
    """Two threads run the Attention page's reading on one cached model, 50 times each, one on a gold output and
    one generating its own: every result is the one it gets alone (without the lock, the hooks of one fire in the
    other's forward pass: wrong maps, or errors)."""
    attention = uncached(page_functions("attention"), "attention")
    run = checkpoints / FOLDER / "nope" / "seed0"
    version = 0.0  # the cache's key only
    examples = sorted(get("reverse", **TASK_OPTIONS).examples("test", n=50, seed=0), key=lambda e: e.length)
    asks = [(examples[0].source, examples[0].target), (examples[-1].source, None)]
    alone = [attention(str(run), version, *ask) for ask in asks]
    assert alone[0][1].shape != alone[1][1].shape  # the two readings can tell each other's maps apart
    wrong: list[str] = []

    def session(ask: tuple[str, str | None], expected: tuple[list[str], torch.Tensor]) -> None:
        for _ in range(50):
            try:
                tokens, maps = attention(str(run), version, *ask)
            except Exception as error:  # noqa: BLE001 - a foreign hook's error is a wrong result too
                wrong.append(repr(error))
                continue
            if tokens != expected[0] or maps.shape != expected[1].shape or not torch.equal(maps, expected[1]):
                wrong.append(f"{ask[0]!r}: {list(maps.shape)}")

    threads = [threading.Thread(target=session, args=(ask, expected)) for ask, expected in zip(asks, alone)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong, f"{len(wrong)} of 100 readings wrong, e.g. {wrong[:3]}"


class Model:
    """A stand-in for a shared model: only its lock is looked at."""

    cfg = type("Config", (), {"device": "cpu"})


class Read(Exception):
    """Stops a page's function once its model has been read."""


@pytest.fixture
def reads(monkeypatch) -> dict[str, bool]:
    """What each reading found: whether the model it read was held (another session would have waited). The
    readings ``capture_layers`` and the Theorem checks are stand-ins that record that, then stop the page."""
    import probe.analysis.patterns
    from probe.theorems import checks

    found: dict[str, bool] = {}

    def reader(name: str):
        def read(model: object, *args: Any, **kwargs: Any) -> Any:
            found[name] = held_elsewhere(kwargs.get("model", model))
            raise Read

        return read

    monkeypatch.setattr(probe.analysis.patterns, "capture_layers", reader("capture_layers"))
    for name in ("construction_weights", "residual_positions", "relative_logits", "mlp_response"):
        monkeypatch.setattr(checks, name, reader(name))
    monkeypatch.setattr(checks, "verify_theorems", lambda *args, model: reader("verify_theorems")(model))
    return found


def test_the_pretraining_page_reads_its_shared_models_held(reads, monkeypatch):
    """A code run's model (``shared.cached_model``) and an hf: model (``hf_files``) are read held."""
    page = page_functions("pretraining")
    model, files = Model(), type("Files", (), {"heldout_file": staticmethod(lambda index: torch.arange(8))})
    monkeypatch.setattr(shared, "cached_model", lambda path, version: model)
    page["corpus_of"] = lambda path, version: files
    loaded = type("Loaded", (), {"model": Model(), "bos_id": None})
    page["hf_files"] = lambda name, options: (loaded, files, 4)
    for name, args in (("file_attention", ("run", 0.0, 0, 4, 0)), ("hf_file_attention", ("hf:x", "{}", 0, 4, 0))):
        reads.clear()
        with pytest.raises(Read):
            uncached(page, name)(*args)
        assert reads == {"capture_layers": True}, name


def test_the_theorems_page_reads_its_shared_construction_held(reads):
    page = page_functions("theorems")
    model = Model()
    page["construction"] = lambda max_length, dtype, seed: model
    for name, args in (("verification", (16, "float64", 0)), ("views", (16, "float64", 0, 8))):
        reads.clear()
        with pytest.raises(Read):
            uncached(page, name)(*args)
        assert list(reads.values()) == [True], (name, reads)
