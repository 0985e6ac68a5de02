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
        or ARCHITECTURE not in config.get("architectures", [])
        or "position_encoding_type" not in config
    ):
        raise ProbeError(
            f"{folder} is not one of the paper's released models (its config.json names no "
            f"{ARCHITECTURE} with a position_encoding_type)"
        )
    kind = config["position_encoding_type"]
    if kind not in PE_OF:
        raise ProbeError(
            f"{folder}: position_encoding_type {kind!r} is not one probe reads; accepted: {', '.join(PE_OF)}"
        )
    if config.get("feed_forward_proj", "relu") != "relu":
        raise ProbeError(f"{folder}: feed_forward_proj {config['feed_forward_proj']!r}; the released models use relu")
    return config


def model_config(config: dict[str, Any], seed: int = 0) -> ModelConfig:
    """probe's ``ModelConfig`` for their ``config.json`` (``base``'s architecture at their sizes)."""
    pe = PE_OF[config["position_encoding_type"]]
    return ModelConfig(
        pe=pe,
        d_vocab=int(config["vocab_size"]),
        n_layers=int(config.get("num_decoder_layers") or config["num_layers"]),
        d_model=int(config["d_model"]),
        n_heads=int(config["num_heads"]),
        d_head=int(config["d_kv"]),
        d_mlp=int(config["d_ff"]),
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
            if name.endswith(".safetensors"):
                return load_file(str(path))
            return torch.load(path, map_location="cpu", weights_only=True)
        except (SafetensorError, OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as error:
            raise ProbeError(f"{path} cannot be read as weights ({first_line(error)})") from None
    raise ProbeError(f"{folder} has no weights ({' or '.join(WEIGHT_FILES)})")


def _interleaved_to_half_split(d_head: int, rotary_dim: int) -> torch.Tensor:
    """[d_head] the order of a head's columns under which interleaved pair (2i, 2i+1) of the first
    ``rotary_dim`` becomes half-split pair (i, i + rotary_dim / 2); the rest stay."""
    rotated = torch.arange(rotary_dim)
    return torch.cat([rotated[0::2], rotated[1::2], torch.arange(rotary_dim, d_head)])


def convert_state(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Their state dict as probe's (``PETransformer``'s names and layouts)."""
    heads, d_head, d_model = config.n_heads, config.d_head, config.d_model

    def get(key: str) -> torch.Tensor:
        if key not in state:
            raise ProbeError(f"the weights have no {key}: not a {ARCHITECTURE} of this config")
        return state[key].float()

    def per_head_in(weight: torch.Tensor) -> torch.Tensor:  # [heads * d_head, d_model] -> [head, d_model, d_head]
        return weight.view(heads, d_head, d_model).transpose(1, 2)

    order = None
    if config.pe == "rotary":
        order = _interleaved_to_half_split(d_head, int(config.pe_options["fraction"] * d_head))
    out = {"embed.W_E": get("shared.weight")}
    for layer in range(config.n_layers):
        theirs, ours = f"decoder.block.{layer}.layer.", f"blocks.{layer}."
        attention = theirs + "0.SelfAttention."
        q, k = per_head_in(get(attention + "q.weight")), per_head_in(get(attention + "k.weight"))
        if order is not None:
            q, k = q[..., order], k[..., order]
        out |= {
            ours + "ln1.w": get(theirs + "0.layer_norm.weight"),
            ours + "ln2.w": get(theirs + "2.layer_norm.weight"),
            ours + "attn.W_Q": q,
            ours + "attn.W_K": k,
            ours + "attn.W_V": per_head_in(get(attention + "v.weight")),
            ours + "attn.W_O": get(attention + "o.weight").T.reshape(heads, d_head, d_model),
            ours + "mlp.W_in": get(theirs + "2.DenseReluDense.wi.weight").T,
            ours + "mlp.W_out": get(theirs + "2.DenseReluDense.wo.weight").T,
        }
        for name, size in (
            ("b_Q", (heads, d_head)),
            ("b_K", (heads, d_head)),
            ("b_V", (heads, d_head)),
            ("b_O", (d_model,)),
        ):
            out[ours + "attn." + name] = torch.zeros(size)
        out[ours + "mlp.b_in"], out[ours + "mlp.b_out"] = torch.zeros(config.d_mlp), torch.zeros(d_model)
    out["ln_final.w"] = get("decoder.final_layer_norm.weight")
    if not config.tie_embeddings:
        out["unembed.W_U"], out["unembed.b_U"] = get("lm_head.weight").T, torch.zeros(config.d_vocab)
    return {name: tensor.contiguous() for name, tensor in out.items()}


def load_authors_model(folder: str | os.PathLike) -> tuple[PETransformer, dict[str, Any]]:
    """(the probe model, their ``config.json``) of a released model folder. With tied embeddings (their
    default) the output layer is ``shared.weight``, as their ``from_pretrained`` ties it, whatever a
    separately stored ``lm_head.weight`` holds."""
    config = read_config(folder)
    probe_config = model_config(config)
    model = PETransformer(probe_config)
    try:
        model.load_state_dict(convert_state(read_weights(folder), probe_config), strict=True)
    except RuntimeError as error:
        raise ProbeError(f"{folder}: the weights do not fit its config.json ({first_line(error)})") from None
    return model.eval(), config
