"""Checkpoints: ``model.safetensors`` + ``config.json``, written atomically, read without pickle.

``config.json`` holds everything needed to rebuild the model (PE, ``ModelConfig``) and whatever
the caller adds (vocabulary, task, training config, metrics), the package version, and the
SHA-256 of the weights file. Each file is written to a temporary name and renamed into place,
weights first: a save killed half-way leaves either the previous pair or a weights file whose
hash the old config does not match, which :func:`load_checkpoint` reports instead of loading.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from probe.errors import ProbeError
from probe.models.config import ModelConfig

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = 1


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_version() -> str:
    from probe import __version__

    return __version__


def save_checkpoint(model: torch.nn.Module, directory: str | os.PathLike, **metadata: Any) -> Path:
    """Write ``model`` (a ``PETransformer``) and ``metadata`` (JSON-serialisable) to ``directory``."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ProbeError(f"cannot create checkpoint folder {directory}: {error.strerror}") from None
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    try:
        atomic_write(directory / WEIGHTS, lambda tmp: save_file(state, str(tmp)))
        config = {
            "format": FORMAT,
            "probe_version": _package_version(),
            "pe": model.config.pe,
            "model": model.config.to_dict(),
            "weights_sha256": _sha256(directory / WEIGHTS),
            **metadata,
        }
        atomic_write_json(directory / CONFIG, config)
    except OSError as error:
        raise ProbeError(f"cannot write checkpoint to {directory}: {error.strerror or error}") from None
    return directory


def read_checkpoint_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of a checkpoint folder (no weights read)."""
    directory = Path(directory)
    path = directory / CONFIG
    if not directory.is_dir():
        raise ProbeError(f"no checkpoint folder at {directory}")
    if not path.is_file():
        raise ProbeError(f"{directory} is not a checkpoint: it has no {CONFIG}")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ProbeError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(config, dict) or "model" not in config:
        raise ProbeError(f"{path} does not describe a probe model (no 'model' entry)")
    return config


def load_checkpoint(directory: str | os.PathLike, device: str | torch.device = "cpu"):
    """Rebuild the saved model, bit-identical; its ``config.json`` is on ``model.metadata``."""
    from probe.models.transformer import PETransformer

    directory = Path(directory)
    config = read_checkpoint_config(directory)
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise ProbeError(f"{directory} has no {WEIGHTS}")
    expected = config.get("weights_sha256")
    if expected is not None and _sha256(weights) != expected:
        raise ProbeError(f"{weights} does not match its {CONFIG} (corrupt, or a save was interrupted)")
    model_config = ModelConfig.from_dict(config["model"])
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as error:
        raise ProbeError(f"{weights} is not a readable safetensors file ({error})") from None
    model = PETransformer(model_config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0]
        raise ProbeError(f"{weights} does not fit its config ({first})") from None
    model.metadata = config
    if torch.device(device).type != "cpu":
        model.to(device, print_details=False)
    return model.eval()
