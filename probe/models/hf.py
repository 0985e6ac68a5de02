"""Any language model TransformerLens 4 loads from Hugging Face files, analysed beside probe's runs.

Spelled ``hf:ID`` (a Hugging Face Hub id, read from the local cache) or ``hf:FOLDER`` (``hf:./my-model``,
``hf:/abs/path``: ``config.json``, the weights and the tokenizer files; a name that is a folder here is
that folder, as ``transformers`` reads it). Nothing is downloaded: a Hub id resolves to its cached
snapshot folder, and the model is booted from that folder with ``TransformerBridge.boot_transformers``,
so its attention is read from the hook names every TransformerLens model has
(``blocks.{l}.attn.hook_pattern``, [batch, head, query, key]).

The analyses read text with the model's own tokenizer, as published: the tokens it makes without
special tokens, with the beginning-of-sequence token in front where that tokenizer adds one by
itself (Llama's does; GPT-2's, Pythia's and BLOOM's do not). TransformerLens' copy of the
tokenizer always adds it, so it is not the one read here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from probe.compat import hub_source
from probe.errors import ProbeError, first_line

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerBase

HF_PREFIX = "hf:"
SPELLING = "hf:ID (a Hugging Face id in the local cache) or hf:FOLDER (config.json, weights, tokenizer)"
LEARNED_POSITIONS = ("standard", "shortformer")  # TransformerLens' names of a learned table of n_ctx positions


def is_external(name: object) -> bool:
    """Whether a model name is an ``hf:`` spelling rather than a probe run or PE name."""
    return isinstance(name, str) and name.startswith(HF_PREFIX)


def file_name(spelling: str) -> str:
    """A name for output files about the model: ``hf-gpt2``, ``hf-EleutherAI--pythia-70m``; a local folder
    by the model it holds, not by the folder's own name (``./hf`` tells nothing): the Hub id its config was
    saved from (``hf-HuggingFaceTB--SmolLM-135M-1a2b3c4d``), else its architecture and size
    (``hf-llama-30L-576d-1a2b3c4d``), with a hash of its path, as a corpus folder is named."""
    target = spelling[len(HF_PREFIX) :] if is_external(spelling) else spelling
    if _is_path(target):
        path = Path(target).expanduser().resolve()
        target = f"{_model_name(path)}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    return "hf-" + re.sub(r"[^A-Za-z0-9._-]", "-", target.replace("/", "--"))


def _model_name(folder: Path) -> str:
    """What the model in ``folder`` is: the Hub id its config names, else ``<model_type>-<layers>L-<width>d``,
    else the folder's name (no readable config)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return folder.name
    if not isinstance(config, dict):
        return folder.name
    source = hub_source(config)
    if source and not _is_path(source):
        return source
    layers = next((config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in config), None)
    width = next((config[k] for k in ("hidden_size", "n_embd", "d_model") if k in config), None)
    kind = str(config.get("model_type") or folder.name)
    return kind + (f"-{layers}L" if layers else "") + (f"-{width}d" if width else "")


def _is_path(target: str) -> bool:
    return target.startswith((".", "/", "~")) or Path(target).expanduser().exists()


def model_folder(spelling: str) -> Path:
    """The local folder holding ``spelling``'s files; ProbeError (one line) where there is none."""
    target = spelling[len(HF_PREFIX) :] if is_external(spelling) else spelling
    if not target:
        raise ProbeError(f"{spelling!r} names no model; spell it {SPELLING}")
    if _is_path(target):
        folder = Path(target).expanduser()
        if not folder.exists():
            raise ProbeError(f"{spelling}: there is no folder {target}")
        if not (folder / "config.json").is_file():
            raise ProbeError(
                f"{spelling}: {folder} is not a Hugging Face model folder (no config.json); give a folder "
                "with config.json, the weights and the tokenizer files"
            )
        return folder.resolve()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(target, local_files_only=True))
    except HFValidationError:
        raise ProbeError(
            f"{spelling}: {target!r} is neither a folder nor a Hugging Face id (owner/name); spell it {SPELLING}"
        ) from None
    except LocalEntryNotFoundError:
        raise ProbeError(
            f"{spelling}: {target} is not in the local Hugging Face cache and probe downloads nothing; "
            f"fetch it on a machine with network (`hf download {target}`, or `huggingface-cli download "
            f"{target}`) and copy the cache here (HF_HOME), or give its folder as hf:/path"
        ) from None


@dataclass(eq=False)
class ExternalModel:
    """A booted model with its own tokenizer, and what the analyses need to read text with it."""

    spelling: str  # as given: hf:gpt2, hf:./my-model
    folder: Path  # where its files are
    bridge: TransformerBridge
    tokenizer: PreTrainedTokenizerBase  # as published (TransformerLens' copy always adds BOS)
    bos_id: int | None  # put in front of every window: the tokenizer adds it by itself

    @property
    def positions(self) -> str:
        """TransformerLens' ``positional_embedding_type``: standard (a learned table), rotary, alibi, ..."""
        return str(self.bridge.cfg.positional_embedding_type)

    @property
    def n_ctx(self) -> int:
        """The context its config declares: the length it was trained at."""
        return int(self.bridge.cfg.n_ctx)

    @property
    def max_length(self) -> int | None:
        """The longest input it can read: ``n_ctx`` with a learned table of positions, else no limit."""
        return self.n_ctx if self.positions in LEARNED_POSITIONS else None

    def vocabulary(self) -> dict[str, int]:
        """Token string -> id, added tokens included: two models share a tokenizer when these are equal."""
        return dict(self.tokenizer.get_vocab())

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, without special tokens (windows of a file start wherever they start)."""
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def _tokenizer(spelling: str, folder: Path) -> tuple[PreTrainedTokenizerBase, int | None]:
    """The folder's tokenizer and the BOS id it adds by itself (None if it adds none)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as error:  # transformers raises OSError, ValueError, KeyError ... for missing or odd files
        raise ProbeError(
            f"{spelling}: no tokenizer could be read from {folder} ({first_line(error)}); the analyses "
            "read text with the model's own tokenizer"
        ) from None
    bare = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a")
    bos = tokenizer.bos_token_id
    prepends = bos is not None and len(full) > len(bare) and full[0] == bos and full[1 : len(bare) + 1] == bare
    return tokenizer, bos if prepends else None


CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")  # where configs declare it


def read_config(spelling: str) -> dict:
    """The model's ``config.json``, parsed (one line if it is not there or not JSON)."""
    folder = model_folder(spelling)
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ProbeError(f"{spelling}: no readable config.json in {folder} ({first_line(error)})") from None


def declared_context(spelling: str) -> int:
    """The context the model's config declares (the length it was trained at), read without loading it."""
    config = read_config(spelling)
    for name in CONTEXT_FIELDS:
        if isinstance(config.get(name), int):
            return int(config[name])
    raise ProbeError(f"{spelling}: its config declares no context length ({', '.join(CONTEXT_FIELDS)})")


CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")  # a decoder's head, when not seq2seq


def check_causal(spelling: str, config: dict) -> None:
    """One line unless ``config`` (a ``config.json``, parsed) is a causal language model's: a next-token loss on
    an encoder-decoder (T5, BART) or a bidirectional encoder (BERT's masked LM, a diffusion LM) reads the tokens
    after each one. Its first architecture (else its ``model_type``) must be a causal LM of ``transformers``
    (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``) or end as one (``...ForCausalLM``, ``...LMHeadModel``, or a multimodal
    decoder's ``...ForConditionalGeneration`` that is not an encoder-decoder); a family of encoders (BERT, RoBERTa)
    only as a decoder (``is_decoder``). A config naming neither is left to TransformerLens."""
    from transformers.models.auto import modeling_auto as auto

    named = [a for a in config.get("architectures") or () if isinstance(a, str)]
    kind = config.get("model_type")
    what = named[0] if named else kind
    if not isinstance(what, str):
        return
    causal = {c for v in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for c in ((v,) if isinstance(v, str) else v)}
    listed = what in causal if named else what in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    seq2seq = config.get("is_encoder_decoder", kind in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES and not listed)
    encoder = kind in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES and not config.get("is_decoder")
    if seq2seq:
        raise ProbeError(
            f"{spelling}: {what} is an encoder-decoder model, not a causal language model (its next-token losses "
            "would read the tokens after each one); give a decoder-only model (...ForCausalLM, ...LMHeadModel)"
        )
    if encoder or not (listed or (named and what.endswith(CAUSAL_SUFFIXES))):
        raise ProbeError(
            f"{spelling}: {what} is not a causal language model (it reads the tokens after each one, so its "
            "next-token losses would read the future); give a decoder-only model (...ForCausalLM, ...LMHeadModel)"
        )


def load_external(
    spelling: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> ExternalModel:
    """``hf:ID`` or ``hf:FOLDER`` booted by TransformerLens 4 (float32 unless ``dtype``, eval mode), with its
    tokenizer; a model that is not a causal language model is refused first (:func:`check_causal`). A RoPE
    scaling reaches it as every intervention does, through :func:`probe.models.attach.attach`.

    Anything that stops it (not cached, not a model folder, an architecture TransformerLens does not
    support, missing weights) is one ProbeError line naming the model.
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformers.utils import logging

    folder = model_folder(spelling)
    tokenizer, bos = _tokenizer(spelling, folder)
    check_causal(spelling, read_config(spelling))
    bar = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # transformers' weight-loading bar would break probe's own progress line
    try:
        bridge = TransformerBridge.boot_transformers(str(folder), device=str(device), dtype=dtype or torch.float32)
    except Exception as error:  # any failure of a third-party loader on a user's files is a bad input here
        raise ProbeError(f"{spelling}: TransformerLens cannot load {folder} ({first_line(error)})") from None
    finally:
        if bar:
            logging.enable_progress_bar()
    bridge.eval()
    if len(tokenizer) > bridge.cfg.d_vocab:
        raise ProbeError(
            f"{spelling}: its tokenizer has {len(tokenizer)} tokens, more than the model's "
            f"{bridge.cfg.d_vocab} embeddings"
        )
    return ExternalModel(spelling, folder, bridge, tokenizer, bos)
