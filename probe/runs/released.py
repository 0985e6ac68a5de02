"""The paper's released code models as probe runs: `probe import FOLDER`.

A folder laid out as the authors' Hub repos (``McGill-NLP/codellm_1b_{nope,rotary,alibi}``:
``config.json``, ``pytorch_model.bin`` or ``model.safetensors``, the tokenizer files) becomes a run
folder ``CHECKPOINTS/code+context=1024+tokenizer=<digest>/<pe>/seed0/`` (safetensors, ``config.json``,
``tokenizer.json``) beside a corpus prepared with that tokenizer, so `probe perplexity`, `probe
compare --task code`, `probe distances --task code` and the explorer read it as they read a
`probe pretrain` run. The 1B models were trained with ``<jupyter_start>`` at the start of every
1024-token block, and the authors' inference prepends it: the run records that token
(``bos_token_id``) and the code analyses put it first in every window they read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from probe.atomic import atomic_write_text
from probe.corpus import CODE_TASK, CodeTokenizer, CorpusSpec, prepare_corpus
from probe.corpus.bpe import END_OF_FILE, TOKENIZER_FILE
from probe.corpus.prepared import CORPUS_FOLDER, corpus_folder_name, tokenizer_digest
from probe.errors import ProbeError
from probe.models.checkpoint import CONFIG, TOKENIZER_KEY, save_checkpoint
from probe.models.released import load_authors_model

RELEASED_CONTEXT = 1024  # the 1B models' training context (their config's n_positions)
BOS_FILES = ("tokenizer_config.json", "special_tokens_map.json")  # where the Hub repos name their bos_token


def bos_token_id(folder: Path, tokenizer: CodeTokenizer) -> int:
    """The id of the folder's ``bos_token`` (``tokenizer_config.json``, else ``special_tokens_map.json``).

    The released models were trained with it first in every block and their evaluation prepends it: a
    run without it would read them out of their training distribution, so its absence is refused."""
    for name in BOS_FILES:
        try:
            token = json.loads((folder / name).read_text()).get("bos_token")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(token, dict):  # {"content": "<jupyter_start>", ...}
            token = token.get("content")
        if isinstance(token, str):
            bos = tokenizer.tokenizer.token_to_id(token)
            if bos is None:
                raise ProbeError(f"{folder}: the bos_token {token!r} of its {name} is not in its {TOKENIZER_FILE}")
            return bos
    raise ProbeError(
        f"{folder} names no bos_token (in {' or '.join(BOS_FILES)}, which the Hub repos "
        "McGill-NLP/codellm_1b_* ship): download them beside the weights"
    )


def import_released(
    folder: str | os.PathLike,
    checkpoints: str | os.PathLike,
    *,
    corpus: str = "stdlib",
    context: int | None = None,
    seed: int = 0,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write ``folder``'s model as a probe run under ``checkpoints``; returns the run folder.

    Everything is read and checked before anything is written: a folder that is not such a model, an
    unknown ``position_encoding_type`` or a missing file is one ProbeError and no file.
    """
    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 2):
        raise ProbeError(
            f"context must be a whole number of at least 2 tokens, got {context!r}"
        )  # 0 is no context, not the model's
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ProbeError(f"seed must be a whole number, at least 0, got {seed!r}")  # it names the run folder, seed<k>
    folder = Path(folder)
    model, config = load_authors_model(folder)
    try:
        tokenizer_json = (folder / TOKENIZER_FILE).read_text()
    except OSError:
        raise ProbeError(
            f"{folder} has no readable {TOKENIZER_FILE}; the released models ship their tokenizer"
        ) from None
    tokenizer = CodeTokenizer.from_json(tokenizer_json)
    if len(tokenizer) > model.cfg.d_vocab:
        raise ProbeError(
            f"{folder}: its {len(tokenizer)}-token tokenizer does not fit the model's {model.cfg.d_vocab} ids"
        )
    bos = bos_token_id(folder, tokenizer)
    spec = CorpusSpec(
        corpus=corpus,
        context=int(config.get("n_positions", RELEASED_CONTEXT)) if context is None else context,
        tokenizer=tokenizer_digest(tokenizer_json),
    )
    task_folder = Path(checkpoints) / corpus_folder_name(spec.options)
    run = task_folder / model.config.pe / f"seed{seed}"
    if (run / CONFIG).is_file() and not force:
        raise ProbeError(f"{run} exists; give --force to import over it")
    prepared = prepare_corpus(spec, task_folder / CORPUS_FOLDER, progress, tokenizer_json=tokenizer_json)
    run.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run / TOKENIZER_FILE, prepared.tokenizer.to_json())  # as the corpus keeps it
    save_checkpoint(
        model,
        run,
        task={"name": CODE_TASK, "options": spec.options},
        corpus={"fingerprint": prepared.manifest["fingerprint"], "sizes": prepared.summary()},
        training={"complete": True, "seed": seed, "pe_options": {}, "imported": True},
        imported=_provenance(folder, config, bos),
        **{TOKENIZER_KEY: _tokenizer_record(prepared.tokenizer, bos)},
    )
    return run


def _tokenizer_record(tokenizer: CodeTokenizer, bos: int) -> dict[str, Any]:
    """Strings get the released models' BOS first, as their inference reads them."""
    tokens = {"eos_token": END_OF_FILE, "pad_token": END_OF_FILE, "bos_token": tokenizer.tokenizer.id_to_token(bos)}
    return {"special_tokens": tokens, "prepend_bos": True}


def _provenance(folder: Path, config: dict[str, Any], bos: int) -> dict[str, Any]:
    return {
        "from": str(folder.resolve()),
        "architecture": config["architectures"][0],
        "position_encoding_type": config["position_encoding_type"],
        "bos_token_id": bos,
    }
