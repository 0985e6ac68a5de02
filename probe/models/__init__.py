"""Models: a TransformerLens-hooked transformer per positional encoding, its config, checkpoints."""

from probe.models.alibi import alibi_slopes
from probe.models.ape import sinusoidal_embedding
from probe.models.checkpoint import load_checkpoint, save_checkpoint
from probe.models.model_config import ModelConfig, resolve_config
from probe.models.registry import PAPER_PES, PE_KINDS
from probe.models.t5 import t5_relative_bucket
from probe.models.transformer import PETransformer, build_model

__all__ = [
    "PAPER_PES",
    "PE_KINDS",
    "ModelConfig",
    "PETransformer",
    "alibi_slopes",
    "build_model",
    "load_checkpoint",
    "resolve_config",
    "save_checkpoint",
    "sinusoidal_embedding",
    "t5_relative_bucket",
]
