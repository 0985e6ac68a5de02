"""Helpers several test modules share: tiny checkpoints for the explorer, running its pages under
Streamlit's AppTest, and `probe app` as a real server. Fixtures built on them are in conftest.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil  # the test extra's: finds the server under `probe app`
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

EXPLORER = Path(__file__).resolve().parent.parent / "probe" / "explorer" / "explorer.py"
FAST = {"n": "2", "per_bucket": "2"}  # query parameters: 2 examples per length bucket on Compare and Distances
TIMEOUT = 120
START_TIMEOUT = 90  # seconds `probe app` gets to answer on its port
TASK_OPTIONS = {"train_length": 4}
FOLDER = "reverse+train_length=4"


def bench_script(name: str):
    """A ``bench/`` script as a module (bench/ is scripts, not a package; they import its ``common``)."""
    bench = Path(__file__).resolve().parent.parent / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(bench))


def reverse_config(pe: str = "t5", **overrides):
    """A 24-step run of reverse at L = 4 on a one-layer tiny model, checkpoints every 10 steps and a log line
    every step: what the training tests interrupt, resume and break."""
    from probe.training.train_config import TrainConfig

    values = dict(
        task="reverse",
        pe=pe,
        steps=24,
        batch_size=8,
        checkpoint_every=10,
        log_every=1,
        eval_examples=16,
        task_options={"train_length": 4},
        model=tiny_model(1),
    )
    return TrainConfig(**{**values, **overrides})


def tiny_model(n_layers: int = 2, **extra: int) -> dict[str, int]:
    """The model the tests train and build: ``n_layers`` x d_model 32, 2 heads of 16, d_mlp 64 (``extra``:
    more ModelConfig fields, e.g. ``n_ctx``). One shape for every module, said once."""
    return dict(n_layers=n_layers, d_model=32, n_heads=2, d_head=16, d_mlp=64, **extra)


def heads_scaled_by_hand(log_scales: torch.Tensor, n_layers: int) -> list[tuple[str, object]]:
    """Hooks that multiply each head's logits by ``exp(log_scales[layer, head])`` on the scores, written out
    (masked logits kept out of the product): the definition the per-head fit's folded scales must match."""

    def scaled(layer: int):
        def hook(scores: torch.Tensor, hook) -> torch.Tensor:  # [batch, head, query, key]
            masked = ~torch.isfinite(scores)
            product = scores.masked_fill(masked, 0) * log_scales[layer].exp()[:, None, None]
            return product.masked_fill(masked, float("-inf"))

        return hook

    return [(f"blocks.{layer}.attn.hook_attn_scores", scaled(layer)) for layer in range(n_layers)]


def write_code_corpus(folder: Path) -> Path:
    """40 small Python files of 1, 2, 4 or 6 functions: enough for a BPE, a held-out half (split by name)
    and windows of 16 and 32 tokens."""
    folder.mkdir(parents=True)
    for i in range(40):
        functions = (1, 2, 4, 6)[i % 4]
        (folder / f"m{i:02d}.py").write_text(
            "".join(f"def f{j}(x):\n    return x * {j} + {i}\n\n" for j in range(functions))
        )
    return folder


def make_checkpoints(root: Path) -> Path:
    """Runs of reverse with L = 4 (short sequences, quick to train and read): NoPE seeds 0 and 1, T5
    seed 0 (the seed-0 runs with eval.json); broken entries: a config.json that is not JSON, one that
    is JSON but no run, a run whose weights are corrupt; and an exported construction (no task)."""
    from probe.analysis.evaluation import evaluate_run
    from probe.runs.folders import find_runs, run_dir
    from probe.training.bookkeeping import train_run
    from probe.training.train_config import TrainConfig

    tiny = tiny_model()
    for pe, seed in (("nope", 0), ("t5", 0), ("nope", 1)):
        config = TrainConfig(
            task="reverse",
            pe=pe,
            seed=seed,
            task_options=TASK_OPTIONS,
            steps=3,
            batch_size=16,
            model=tiny,
            eval_examples=4,
        )
        train_run(config, run_dir(root, "reverse", pe, seed, TASK_OPTIONS), torch.device("cpu"))
    runs, _ = find_runs(root)
    for run in runs:
        if run.seed == 0:
            evaluate_run(run, n_test=4, n_valid=4)
    broken = run_dir(root, "reverse", "alibi", 0, TASK_OPTIONS)
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    stranger = run_dir(root, "reverse", "ape", 0, TASK_OPTIONS)  # valid JSON, but not a probe run
    stranger.mkdir(parents=True)
    (stranger / "config.json").write_text(json.dumps({"model": {"seed": "zero"}}))
    corrupt = run_dir(root, "reverse", "rotary", 0, TASK_OPTIONS)
    shutil.copytree(run_dir(root, "reverse", "nope", 0, TASK_OPTIONS), corrupt)
    config = json.loads((corrupt / "config.json").read_text())
    config["pe"] = config["model"]["pe"] = "rotary"
    (corrupt / "config.json").write_text(json.dumps(config))
    (corrupt / "model.safetensors").write_bytes(b"not a safetensors file")
    (corrupt / "eval.json").unlink()
    export_construction(root / "constructions")
    return root


def export_construction(directory: Path) -> Path:
    """The Theorem 1 / 2 model as `probe theorem --export` writes it: a tokenizer, no task."""
    from probe.models import save_checkpoint
    from probe.theorems import checks
    from probe.theorems.constructions import theorem_model

    model = theorem_model(16)
    vocab = checks.vocabulary(model.cfg.d_vocab)
    return save_checkpoint(
        model,
        directory / "theorem",
        construction="theorem1+2",
        max_length=16,
        vocabulary=vocab,
        tokenizer=checks.tokenizer_dict(vocab),
    )


def run_page(page: str, root: Path, monkeypatch, **query):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PROBE_CHECKPOINTS", str(root))
    at = AppTest.from_file(str(EXPLORER), default_timeout=TIMEOUT)
    at.query_params.update({**FAST, **query})
    at.run()
    if page != "models":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def charts(at) -> int:
    return len(at.get("plotly_chart"))


def assert_saved_report_shown(at, page: str) -> None:
    """The page shows the report its command saved for NoPE and T5 (Compare: T5 and NoPE' beside A = NoPE)."""
    assert f"Saved by `probe {page}`" in texts(at.caption) and charts(at) >= 1
    if page == "compare":
        assert [row["A vs"] for _, row in at.dataframe[0].value.iterrows()] == ["T5's Relative Bias", "NoPE'"]
    else:
        column = "run" if page == "distances" else "model"
        assert list(at.dataframe[0].value[column]) == ["NoPE", "T5's Relative Bias"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"`probe app` exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"`probe app` did not answer within {START_TIMEOUT} s:\n{log.read_text()}")


@contextlib.contextmanager
def running_app(probe: list[str], root: Path, log: Path, **popen) -> Iterator[tuple[subprocess.Popen, str, list]]:
    """`<probe> app --port P --checkpoints root` answering on a free port; yields (process, URL, the
    server processes under it). Whatever still runs afterwards is killed, so a failing test leaks nothing.

    It starts as from a terminal, with SIGINT at its default, also when the test run itself ignores
    SIGINT (a background job of a non-interactive shell does, and `probe app` keeps an ignored signal
    ignored on purpose)."""
    port = free_port()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [*probe, "app", "--port", str(port), "--checkpoints", str(root)],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            **popen,
        )
    server = []
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url, log)
        server = psutil.Process(process.pid).children(recursive=True)
        yield process, url, server
    finally:
        process.kill()
        process.wait()
        for leftover in server:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()


def assert_stops(process: subprocess.Popen, url: str, children: list, signum: int, log: Path) -> None:
    """`probe app` alone gets signum; it exits 0 once its server has (stopped by the signal, not killed
    after the grace period), and the port is free again."""
    from probe.explorer import server

    assert children, "no server process under `probe app`"
    process.send_signal(signum)
    assert process.wait(timeout=server.STOP_TIMEOUT) == 0, log.read_text()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"outlived `probe app`: {alive}\n{log.read_text()}"
    server.check_port(int(url.rsplit(":", 1)[1]))  # raises if the port is still held


class LargestTensor(TorchDispatchMode):
    """Bytes of the largest tensor any op makes while the mode is on."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.largest = max(self.largest, leaf.numel() * leaf.element_size())
        return out
