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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from probe.atomic import atomic_write, atomic_write_json, atomic_write_text
from probe.errors import ProbeError, first_line
from probe.models.model_config import ModelConfig

if TYPE_CHECKING:
    from probe.models.transformer import PETransformer

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TOKENIZER = "tokenizer.json"  # the run's tokenizer, a Hugging Face `tokenizers` file
TOKENIZER_KEY = "tokenizer_file"  # in config.json: its special tokens, and whether strings get its BOS
FORMAT = 1


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
    """Write ``model`` and ``metadata`` to ``directory`` as safetensors + ``config.json``, each file
    atomically (a killed save leaves the previous checkpoint whole).

    :param model: a :class:`~probe.models.transformer.PETransformer`.
    :param directory: the folder, created if missing.
    :param metadata: anything JSON-serialisable, kept in ``config.json`` (``model.metadata`` once loaded).
        Unless it says what the folder's tokenizer is (``tokenizer_file``: the caller writes ``tokenizer.json``),
        the model's own tokenizer, if it has one, is saved beside the weights and loads with them.
    :return: ``directory``."""
    directory = Path(directory)
    tokenizer = getattr(model, "tokenizer", None) if TOKENIZER_KEY not in metadata else None
    if tokenizer is not None and getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ProbeError(f"model.tokenizer ({type(tokenizer).__name__}) has no {TOKENIZER} to save: use a fast one")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ProbeError(f"cannot create checkpoint folder {directory}: {error.strerror}") from None
    check_destinations(directory, (WEIGHTS, CONFIG) + ((TOKENIZER,) if tokenizer is not None else ()))
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    atomic_write(directory / WEIGHTS, lambda tmp: save_file(state, str(tmp)))
    if tokenizer is not None:
        atomic_write_text(directory / TOKENIZER, tokenizer.backend_tokenizer.to_str())
        metadata = {**metadata, TOKENIZER_KEY: tokenizer_record(tokenizer, bool(model.cfg.default_prepend_bos))}
    config = {
        "format": FORMAT,
        "probe_version": _package_version(),
        "pe": model.config.pe,
        "model": model.config.to_dict(),
        "weights_sha256": _sha256(directory / WEIGHTS),
        **metadata,
    }
    try:
        atomic_write_json(directory / CONFIG, config)
    except ProbeError as error:  # the weights are new already: say so, not that nothing changed
        raise ProbeError(
            f"{error}; {directory / WEIGHTS} was written before it and does not match the {CONFIG} there"
        ) from None
    return directory


def task_name(config: dict[str, Any]) -> str | None:
    """The task a checkpoint was trained on (``code`` for a pretrained code model), or None for one
    with no task (a construction: `probe theorem --export` writes a description there)."""
    task = config.get("task")
    return task.get("name") if isinstance(task, dict) else None


def tokenizer_record(tokenizer: Any, prepend_bos: bool) -> dict[str, Any]:
    """What ``config.json`` says of a run's ``tokenizer.json`` (a ``PreTrainedTokenizerFast``): its
    special tokens, and whether ``to_tokens`` puts the BOS first."""
    names = ("bos_token", "eos_token", "pad_token", "sep_token", "unk_token")
    return {
        "special_tokens": {name: getattr(tokenizer, name) for name in names if getattr(tokenizer, name)},
        "prepend_bos": prepend_bos,
    }


def attach_tokenizer(model: torch.nn.Module, directory: Path, config: dict[str, Any]) -> None:
    """``model.tokenizer`` from the run's ``tokenizer.json``, where it carries one, so TransformerLens'
    string methods (``to_tokens``, ``to_str_tokens``, ``generate``, ``test_prompt``) take text."""
    record, path = config.get(TOKENIZER_KEY), directory / TOKENIZER
    if record is None or not path.is_file():
        return
    from transformers import PreTrainedTokenizerFast

    try:
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path), padding_side="right", **record["special_tokens"])
    except Exception as error:  # tokenizers raises its own Exception for a malformed file
        raise ProbeError(f"{path} is not a readable tokenizer ({first_line(error)})") from None
    if len(tokenizer) > model.cfg.d_vocab:
        raise ProbeError(f"{path} has {len(tokenizer)} tokens; the model has {model.cfg.d_vocab} ids")
    model.set_tokenizer(tokenizer, default_padding_side="right")
    model.cfg.default_prepend_bos = bool(record["prepend_bos"])


def window_bos(config: dict[str, Any]) -> int | None:
    """The token a model's windows of text start with: the beginning-of-sequence token a released model
    was trained with at the start of every block (``probe import`` records it); None for probe's runs."""
    return config.get("imported", {}).get("bos_token_id")


def weights_match(directory: str | os.PathLike, config: dict[str, Any]) -> bool:
    """Whether the folder's weights file has the SHA-256 its ``config.json`` records (True where it records
    none, as checkpoints from before it did); one that cannot be read is a ProbeError naming it."""
    expected = config.get("weights_sha256")
    if expected is None:
        return True
    weights = Path(directory) / WEIGHTS
    try:
        return _sha256(weights) == expected
    except OSError as error:
        raise ProbeError(f"cannot read {weights}: {error.strerror or error}") from None


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
    except OSError as error:
        raise ProbeError(f"cannot read {path}: {error.strerror or error}") from None
    if not isinstance(config, dict) or "model" not in config:
        raise ProbeError(f"{path} does not describe a probe model (no 'model' entry)")
    for key in OBJECTS:
        value = config.get(key, {})
        described = key == "task" and "training" not in config and (value is None or isinstance(value, str))
        if not isinstance(value, dict) and not described:
            raise ProbeError(
                f"{path} is damaged: its '{key}' entry is {type(value).__name__} {_short(value)}, not an object"
            )
    return config


OBJECTS = ("model", "training", "task", "metrics")
"""config.json's entries that are objects where present; a checkpoint no one trained (a construction) may
describe its task in words (:func:`task_name`: None)."""


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_destinations(directory: Path, names: tuple[str, ...] = (WEIGHTS, CONFIG, TOKENIZER)) -> None:
    """ProbeError, before anything is written, where one of the files a save replaces in ``directory`` is
    there as something else than a file (a folder named ``config.json``): writing the others first would
    leave weights beside a config that does not describe them."""
    for name in names:
        path = directory / name
        if path.exists() and not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file"
            raise ProbeError(
                f"cannot write {path}: it is {what}, not a file (nothing was written); move it away, then run "
                "the same command again"
            )


def load_checkpoint(
    directory: str | os.PathLike,
    device: str | torch.device = "cpu",
    pe_options: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> PETransformer:
    """Rebuild the saved model, bit-identical; its ``config.json`` is on ``model.metadata`` and the
    tokenizer the run carries (``tokenizer.json``) on ``model.tokenizer``. Runs saved before runs
    carried one: :func:`~probe.runs.folders.load_run`. Nothing is unpickled.

    :param directory: a folder :func:`save_checkpoint` wrote.
    :param device: where the model is loaded.
    :param pe_options: PE options changed at inference (RoPE scaling on a model trained without it); an
        option that would change the PE's weights is one line, not a silently different model.
    :param config: the folder's ``config.json`` where the caller has read it already (read once per command).
    :raises ProbeError: a missing or corrupt checkpoint (weights that do not match their ``config.json``)."""
    from probe.models.transformer import PETransformer

    directory = Path(directory)
    config = read_checkpoint_config(directory) if config is None else config
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise ProbeError(f"{directory} has no {WEIGHTS}")
    if not weights_match(directory, config):
        raise ProbeError(f"{weights} does not match its {CONFIG} (corrupt, or a save was interrupted)")
    model_config = ModelConfig.from_dict(config["model"], where=directory / CONFIG)
    if pe_options:
        from probe.models.registry import pe_class

        given = pe_class(model_config.pe).parse_inference_options(pe_options)
        model_config = ModelConfig.from_dict(
            {**model_config.to_dict(), "pe_options": {**model_config.pe_options, **given}}
        )
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as error:
        raise ProbeError(f"{weights} is not a readable safetensors file ({error})") from None
    model = PETransformer(model_config)
    stored = state.get("embed.W_E")
    if stored is not None and stored.dtype != model.W_E.dtype:
        model.to(stored.dtype)  # a float64 construction loads as it was saved, not rounded to float32
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0]
        if pe_options:
            raise ProbeError(
                f"{', '.join(pe_options)} would change the weights of {directory}'s PE; such options "
                "are set at training (probe train -p), not at inference"
            ) from None
        raise ProbeError(f"{weights} does not fit its config ({first})") from None
    model.metadata = config
    attach_tokenizer(model, directory, config)
    if torch.device(device).type != "cpu":
        model.to(device)
    return model.eval()
