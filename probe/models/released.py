"""The paper's released models as probe models: a folder laid out as the authors' Hub repos
(``McGill-NLP/codellm_1b_{nope,rotary,alibi}``: ``config.json`` with ``position_encoding_type``,
``pytorch_model.bin`` or ``model.safetensors``) read into a ``PETransformer`` that gives their logits.

Their class, ``CustomDecoderOnlyT5`` (McGill-NLP/length-generalization,
``src/models/custom_t5_decoder_only.py``), is a T5 decoder stack without cross-attention: pre-norm
RMSNorm (eps ``layer_norm_epsilon``), no biases, ReLU feed-forward, logits not divided by
sqrt(d_kv), the final state scaled by d_model^-0.5 before the tied output layer. That is probe's
``base`` architecture. Three things differ, and the conversion accounts for each:
- their Rotary turns interleaved pairs (2i, 2i+1) of the first d_kv / 4 dimensions of each head,
  probe's turns half-split pairs (i, i + r/2): the same rotation after a fixed permutation of the
  rotated query and key columns (q.k is unchanged when both are permuted alike);
- their ALiBi adds +slope * j (key position j) to every query's logits, probe's -slope * (i - j):
  they differ by a constant per query row, which softmax removes; the slopes are the same;
- their checkpoint carries cross-attention weights that never run (no encoder), T5's unused bucket
  table, and ALiBi's precomputed table; they are not read.
Weights are read with ``torch.load(weights_only=True)``: nothing in the file is executed.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from probe.errors import ProbeError, first_line
from probe.models.model_config import ModelConfig
from probe.models.transformer import PETransformer

ARCHITECTURE = "CustomDecoderOnlyT5"
PE_OF = {"none": "nope", "rotary": "rotary", "alibi": "alibi"}  # their position_encoding_type -> probe's PE
ROTARY_SHARE = 0.25  # their Rotary turns int(d_kv / 4) dimensions of each head
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
N_CTX = 4096  # NoPE, ALiBi and Rotary have no table: long enough to read 2.5x their 1024-token context
# the sizes read; their stack builds num_layers blocks (CustomT5Stack), whatever num_decoder_layers says
SIZE_FIELDS = ("vocab_size", "num_layers", "d_model", "num_heads", "d_kv", "d_ff")


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """The folder's ``config.json``, checked to describe a ``CustomDecoderOnlyT5`` probe can build."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProbeError(f"no folder at {folder}")
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError:
        raise ProbeError(f"{folder} has no config.json: not a model folder") from None
    except ValueError as error:
        raise ProbeError(f"{path} is not valid JSON ({error})") from None
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("architectures"), list)
        or ARCHITECTURE not in config["architectures"]
        or "position_encoding_type" not in config
    ):
        raise ProbeError(
            f"{folder} is not one of the paper's released models (its config.json names no "
            f"{ARCHITECTURE} with a position_encoding_type)"
        )
    _check_fields(folder, config)
    return config


def _check_fields(folder: Path, config: dict[str, Any]) -> None:
    """Every field the conversion reads has a value it can use: a wrong one is one line, not a traceback
    (or, for ``tie_word_embeddings: "false"``, a silently wrong model)."""
    kind = config["position_encoding_type"]
    if not isinstance(kind, str) or kind not in PE_OF:
        raise ProbeError(
            f"{folder}: position_encoding_type {kind!r} is not one probe reads; accepted: {', '.join(PE_OF)}"
        )
    if config.get("feed_forward_proj", "relu") != "relu":
        raise ProbeError(f"{folder}: feed_forward_proj {config['feed_forward_proj']!r}; the released models use relu")
    for field in SIZE_FIELDS:
        if field not in config:
            raise ProbeError(f"{folder}: config.json has no {field}")
    for field in (*SIZE_FIELDS, "n_positions"):
        value = config.get(field, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProbeError(f"{folder}: config.json's {field} is {value!r}, not a positive integer")
    eps = config.get("layer_norm_epsilon", 1e-6)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ProbeError(f"{folder}: config.json's layer_norm_epsilon is {eps!r}, not a positive number")
    if not isinstance(config.get("tie_word_embeddings", True), bool):
        raise ProbeError(
            f"{folder}: config.json's tie_word_embeddings is {config['tie_word_embeddings']!r}, not true or false"
        )


def model_config(config: dict[str, Any], seed: int = 0) -> ModelConfig:
    """probe's ``ModelConfig`` for their ``config.json`` (``base``'s architecture at their sizes)."""
    pe = PE_OF[config["position_encoding_type"]]
    return ModelConfig(
        pe=pe,
        d_vocab=config["vocab_size"],
        n_layers=config["num_layers"],
        d_model=config["d_model"],
        n_heads=config["num_heads"],
        d_head=config["d_kv"],
        d_mlp=config["d_ff"],
        n_ctx=N_CTX,
        act_fn="relu",
        normalization="RMS",
        eps=float(config.get("layer_norm_epsilon", 1e-6)),
        attn_scale=False,
        bias=False,
        tie_embeddings=bool(config.get("tie_word_embeddings", True)),
        init="t5",
        seed=seed,
        pe_options={"fraction": ROTARY_SHARE} if pe == "rotary" else {},
    )


def read_weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of a released model folder, read without unpickling code."""
    folder = Path(folder)
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            state = load_file(str(path)) if name.endswith(".safetensors") else _load_pickle(path)
        except (SafetensorError, OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as error:
            raise ProbeError(f"{path} cannot be read as weights ({first_line(error)})") from None
        if not isinstance(state, dict):
            raise ProbeError(f"{path} holds a {type(state).__name__}, not a state dict of named tensors")
        return state
    raise ProbeError(f"{folder} has no weights ({' or '.join(WEIGHT_FILES)})")


def _load_pickle(path: Path) -> Any:
    """``torch.load(weights_only=True)`` of ``path``, its refusal said in one line of probe's own: torch's
    error advises ``weights_only=False`` (running the file's code) and may follow a two-line warning."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on the pickle protocol, printed before its refusal
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if not lines or not lines[0].startswith("Weights only load failed"):
            raise
        culprit = next((f" ({line})" for line in reversed(lines) if "weights_only" not in line), "")
        raise ProbeError(f"{path} holds objects other than tensors{culprit}: refused, nothing in it was run") from None


def _interleaved_to_half_split(d_head: int, rotary_dim: int) -> torch.Tensor:
    """[d_head] the order of a head's columns under which interleaved pair (2i, 2i+1) of the first
    ``rotary_dim`` becomes half-split pair (i, i + rotary_dim / 2); the rest stay."""
    rotated = torch.arange(rotary_dim)
    return torch.cat([rotated[0::2], rotated[1::2], torch.arange(rotary_dim, d_head)])


def convert_state(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Their state dict as probe's (``PETransformer``'s names and layouts)."""
    heads, d_head, d_model, d_mlp = config.n_heads, config.d_head, config.d_model, config.d_mlp
    inner = heads * d_head

    def get(key: str, *shape: int) -> torch.Tensor:
        """The tensor at ``key``, of the shape the config implies: one of another shape but the same size
        (a transposed q.weight) would otherwise be viewed into heads as garbage, without a word."""
        tensor = state.get(key)
        if not isinstance(tensor, torch.Tensor):
            raise ProbeError(f"the weights have no {key} tensor: not a {ARCHITECTURE} of this config")
        if tuple(tensor.shape) != shape:
            raise ProbeError(f"the weights' {key} has shape {list(tensor.shape)}; config.json implies {list(shape)}")
        return tensor.float()

    def per_head_in(key: str) -> torch.Tensor:  # [heads * d_head, d_model] -> [head, d_model, d_head]
        return get(key, inner, d_model).view(heads, d_head, d_model).transpose(1, 2)

    order = None
    if config.pe == "rotary":
        order = _interleaved_to_half_split(d_head, int(config.pe_options["fraction"] * d_head))
    out = {"embed.W_E": get("shared.weight", config.d_vocab, d_model)}
    for layer in range(config.n_layers):
        theirs, ours = f"decoder.block.{layer}.layer.", f"blocks.{layer}."
        attention = theirs + "0.SelfAttention."
        q, k = per_head_in(attention + "q.weight"), per_head_in(attention + "k.weight")
        if order is not None:
            q, k = q[..., order], k[..., order]
        out |= {
            ours + "ln1.w": get(theirs + "0.layer_norm.weight", d_model),
            ours + "ln2.w": get(theirs + "2.layer_norm.weight", d_model),
            ours + "attn.W_Q": q,
            ours + "attn.W_K": k,
            ours + "attn.W_V": per_head_in(attention + "v.weight"),
            ours + "attn.W_O": get(attention + "o.weight", d_model, inner).T.reshape(heads, d_head, d_model),
            ours + "mlp.W_in": get(theirs + "2.DenseReluDense.wi.weight", d_mlp, d_model).T,
            ours + "mlp.W_out": get(theirs + "2.DenseReluDense.wo.weight", d_model, d_mlp).T,
        }
        for name, size in (
            ("b_Q", (heads, d_head)),
            ("b_K", (heads, d_head)),
            ("b_V", (heads, d_head)),
            ("b_O", (d_model,)),
        ):
            out[ours + "attn." + name] = torch.zeros(size)
        out[ours + "mlp.b_in"], out[ours + "mlp.b_out"] = torch.zeros(d_mlp), torch.zeros(d_model)
    out["ln_final.w"] = get("decoder.final_layer_norm.weight", d_model)
    if not config.tie_embeddings:
        out["unembed.W_U"] = get("lm_head.weight", config.d_vocab, d_model).T
        out["unembed.b_U"] = torch.zeros(config.d_vocab)
    return {name: tensor.contiguous() for name, tensor in out.items()}


def _check_fits(model: PETransformer, state: dict[str, torch.Tensor], folder: Path) -> None:
    """The converted tensors are the model's, name by name and shape by shape. torch's own error names the
    misfits only past its first line, and a ProbeError is one line."""
    shapes = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    misfits = [
        f"{name} {list(state[name].shape) if name in state else 'missing'} (the model's: {shapes.get(name, 'none')})"
        for name in sorted(shapes.keys() | state.keys())
        if name not in state or list(state[name].shape) != shapes.get(name)
    ]
    if misfits:
        more = f" and {len(misfits) - 3} more" if len(misfits) > 3 else ""
        raise ProbeError(f"{folder}: the converted weights do not fit the model: {', '.join(misfits[:3])}{more}")


def load_authors_model(folder: str | os.PathLike) -> tuple[PETransformer, dict[str, Any]]:
    """(the probe model, their ``config.json``) of a released model folder. With tied embeddings (their
    default) the output layer is ``shared.weight``, as their ``from_pretrained`` ties it, whatever a
    separately stored ``lm_head.weight`` holds."""
    config = read_config(folder)
    probe_config = model_config(config)
    model = PETransformer(probe_config)
    state = convert_state(read_weights(folder), probe_config)
    _check_fits(model, state, Path(folder))
    model.load_state_dict(state, strict=True)
    return model.eval(), config
