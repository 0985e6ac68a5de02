"""A built wheel installed into a fresh virtual environment (not editable, not the checkout) runs
`probe train` and `probe compare` on the default task and serves `probe app` (issue #16).

The wheel is built offline from a copy of the sources, so the build writes nothing into the checkout.
The fresh environment reaches torch and the other dependencies through one plain path line (a .pth
file naming this environment's site-packages, whose own .pth files, this checkout's editable install
among them, are then not processed), so nothing is downloaded and the checkout cannot leak in.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import assert_stops, running_app

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "probe")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
# A one-layer model, five steps of four examples: the commands' whole path in seconds
TINY = [
    "--steps",
    "5",
    "--batch-size",
    "4",
    "--jobs",
    "1",
    "--device",
    "cpu",
    *("-m n_layers=1 -m d_model=32 -m n_heads=2 -m d_head=16 -m d_mlp=64".split()),
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds, without build isolation or an index, from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=IGNORED)
        else:
            shutil.copy(ROOT / name, source / name)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(source),
        ]
    )
    (built,) = (tmp / "dist").glob("probe-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed, then given this environment's site-packages."""
    env = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", str(env)])
    python = env / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    # only now, so that pip saw an empty environment (not this one's probe) when it installed the wheel
    ours = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (site_packages(env) / "test-dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    return env


def site_packages(env: Path) -> Path:
    return Path(
        run(
            [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=env
        ).strip()
    ).resolve()


def command_env() -> dict[str, str]:
    """This process's environment without what would put the checkout on the fresh one's path; one torch
    thread, as tiny models on a shared CPU run several times faster without oversubscription."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "OMP_NUM_THREADS": "1"}


def run(command: list[str], cwd: Path | None = None) -> str:
    """stdout of command; on failure the test fails showing its output."""
    done = subprocess.run(command, cwd=cwd, env=command_env(), capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}", pytrace=False)
    return done.stdout


def test_the_wheel_ships_the_explorer(wheel):
    expected = {path.relative_to(ROOT).as_posix() for path in (ROOT / "probe" / "explorer").rglob("*.py")}
    assert "probe/explorer/views/models.py" in expected  # the pages too, not only the package's modules
    with zipfile.ZipFile(wheel) as archive:
        assert not expected - set(archive.namelist())


def test_the_installed_wheel_trains_compares_and_serves(venv, tmp_path):
    site = site_packages(venv)
    found = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import probe; from probe.explorer.server import explorer_script; "
            "print(probe.__file__); print(explorer_script())",
        ],
        cwd=tmp_path,
    ).split()
    package, script = (Path(line).resolve() for line in found)
    assert package.is_relative_to(site), f"probe imported from {package}, not from the wheel in {site}"
    assert script.is_relative_to(site) and script.is_file()

    probe = str(venv / "bin" / "probe")
    run([probe, "train", "--task", "scan", "--pe", "nope", "--pe", "t5", *TINY, "--checkpoints", "C"], cwd=tmp_path)
    assert all((tmp_path / "C" / "scan" / pe / "seed0" / "model.safetensors").is_file() for pe in ("nope", "t5"))
    run(
        [
            probe,
            "compare",
            "nope",
            "t5",
            "--task",
            "scan",
            "--n-per-bucket",
            "2",
            "--device",
            "cpu",
            "--checkpoints",
            "C",
        ],
        cwd=tmp_path,
    )
    assert (tmp_path / "C" / "scan" / "compare" / "nope_vs_t5.json").is_file()

    log = tmp_path / "probe-app.log"
    with running_app([probe], tmp_path / "C", log, cwd=tmp_path, env=command_env()) as (process, url, server):
        assert_stops(process, url, server, signal.SIGTERM, log)
