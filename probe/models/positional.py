"""The interface every positional encoding implements (Appendix B.2: each PE is a way of
computing the dot product <q_t, k_i>, or of initialising the hidden state).

A PE may add a vector to the token embeddings (APE), add a [head, query, key] term to the
attention logits (T5, ALiBi), rotate queries and keys (Rotary), or add a term computed from the
queries and the logits themselves (CoPE). NoPE does none of these. One
instance lives on the model as ``model.pe``; the model hands it the positions of the tokens once
per forward pass (``begin_forward``), and every layer asks it for its term at those positions.

A PE declares its typed options (``options``: name -> :class:`Option`); they are part of a run's
identity (``ModelConfig.pe_options``, the run folder ``<pe>+<option>=<value>``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from probe.errors import ProbeError


class ModelShape(Protocol):
    """What a PE reads of the model it is part of (``probe.models.model_config.ModelConfig`` has it): the PE
    layer knows the model's shape, not the config class, so the registry and the config import one way."""

    pe: str
    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    n_ctx: int
    attn_scale: bool
    pe_options: dict[str, Any]


@dataclass(frozen=True)
class Option:
    """One typed option of a PE: its default, what it means, and what values it takes.

    ``check(value, options, config)`` returns a complaint (``"must be positive"``) or None; it sees
    every option resolved and the model's config (d_head, n_heads ...). ``at_inference``: whether a trained
    model may be read under another value (a RoPE scaling); False for what only the training reads (a
    learned parameter's starting value, which the weights overwrite) or what gives the weights another
    meaning (KERPLE's kernel), so such a reading is refused, never reported as a change that did nothing.
    """

    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any, dict[str, Any], ModelShape], str | None] | None = None
    at_inference: bool = True

    def parse(self, value: Any) -> Any:
        """A value from the command line ("4", "true") or a config file, as ``type``."""
        if self.type is bool and isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"{value!r} is not true or false")
            return value.lower() in ("true", "1", "yes")
        if self.type is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if self.type is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, self.type) and not (self.type is int and isinstance(value, bool)):
            return value
        if isinstance(value, str):
            return self.type(value)
        raise ValueError(f"{value!r} is not a {self.type.__name__}")


def format_option(value: Any) -> str:
    """How an option value is written in a run folder's name: ``4``, ``0.25``, ``yarn``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class PositionalEncoding(nn.Module):
    """Base class: contributes nothing. Subclasses override what they add."""

    kind: ClassVar[str] = ""  # the name on the command line and in run folders
    relative: ClassVar[bool] = True  # attention scores invariant to shifting every position (APE's are not)
    options: ClassVar[dict[str, Option]] = {}
    examples: ClassVar[tuple[dict[str, Any], ...]] = ()  # option sets the contract tests check besides the defaults
    # A preset's defaults for this PE's options, under what the user gives (`-p`): {preset: {option: value}}.
    preset_options: ClassVar[dict[str, dict[str, Any]]] = {}
    adds_embedding: ClassVar[bool] = False  # hook_pos_embed [batch, pos, d_model]
    adds_bias: ClassVar[bool] = False  # blocks.{l}.attn.hook_pos_bias [head, query, key]
    rotates: ClassVar[bool] = False  # blocks.{l}.attn.hook_rot_q / hook_rot_k [batch, pos, head, d_head]
    scores_term: ClassVar[bool] = False  # blocks.{l}.attn.hook_pos_scores [batch, head, query, key]

    @classmethod
    def eager_because(cls, options: dict[str, Any]) -> str | None:
        """Why a training step of this PE with ``options`` cannot be captured as a CUDA graph (a value it
        reads back to the host every step), or None: it can. Such runs train eagerly by design; the
        host-sync test holds every PE and option set that answers None to it."""
        return None

    @classmethod
    def packable(cls) -> bool:
        """Whether examples packed into one row (attention kept within each) see what they would
        alone: logits that depend on relative position only, or an embedding looked up at each
        example's own positions. CoPE's gates and FIRE's query-length normaliser read more."""
        return (cls.relative and not cls.scores_term) or (cls.adds_embedding and not (cls.adds_bias or cls.rotates))

    def __init__(self, config: ModelShape):
        super().__init__()
        self.config = config
        self.option = dict(config.pe_options)  # resolved: every option with its value
        self.positions = torch.arange(0)  # [key]: set by begin_forward
        self._geometry: dict[tuple, Any] = {}  # what depends on the positions alone: see ``geometry``
        self._pass: dict[tuple, torch.Tensor] = {}  # what one pass shares across its layers: see ``per_pass``

    @classmethod
    def parse_options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` (strings from the command line, or values) as the types the options declare;
        one line for an option this PE does not have or a value that is not of its type."""
        unknown = sorted(set(given) - set(cls.options))
        if unknown:
            known = ", ".join(cls.options) if cls.options else "none"
            raise ProbeError(f"unknown option {unknown[0]!r} of {cls.kind}; its options: {known}")
        parsed = {}
        for name, value in given.items():
            try:
                parsed[name] = cls.options[name].parse(value)
            except (TypeError, ValueError) as error:
                raise ProbeError(f"option {name} of {cls.kind}: {error}") from None
        return parsed

    @classmethod
    def resolve_options(cls, given: dict[str, Any], config: ModelShape) -> dict[str, Any]:
        """Every option with its value: ``given`` parsed and checked, the defaults for the rest."""
        resolved = {**{name: option.default for name, option in cls.options.items()}, **cls.parse_options(given)}
        for name, option in cls.options.items():
            value = resolved[name]
            if option.choices is not None and value not in option.choices:
                raise ProbeError(
                    f"option {name} of {cls.kind} is {value!r}; choose one of "
                    f"{', '.join(map(format_option, option.choices))}"
                )
        for name, option in cls.options.items():
            complaint = option.check(resolved[name], resolved, config) if option.check else None
            if complaint:
                raise ProbeError(f"option {name}={format_option(resolved[name])} of {cls.kind} {complaint}")
        return resolved

    @classmethod
    def parse_inference_options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` parsed (:meth:`parse_options`) to read a trained model under; ProbeError where one is an
        option a trained model cannot be read under (``at_inference``)."""
        parsed = cls.parse_options(given)
        fixed = [name for name in parsed if not cls.options[name].at_inference]
        if fixed:
            name = fixed[0]
            raise ProbeError(
                f"option {name} of {cls.kind} is set at training, not at inference ({cls.options[name].help}); "
                f"drop -p {name}"
            )
        return parsed

    def with_options(self, given: dict[str, Any]) -> PositionalEncoding:
        """This PE built again with ``given`` over its options (a RoPE scaling at inference), sharing its
        weights: what :func:`probe.models.attach.attach` swaps in, so a model already loaded is scaled as one
        loaded with those options is. An option that would change the weights, or that only training reads,
        is one line."""
        config = replace(self.config, pe_options={**self.option, **self.parse_inference_options(given)})
        built = type(self)(config)
        try:
            built.load_state_dict(self.state_dict(), strict=True, assign=True)
        except RuntimeError:
            raise ProbeError(f"{', '.join(given)} would change {self.kind}'s weights; set it at training") from None
        return built.train(self.training)

    def initialise(self, generator: torch.Generator, init: str) -> None:
        """Draw this PE's own parameters (after the model's, from the same generator)."""

    def begin_forward(self, positions: torch.Tensor) -> None:
        """Called once at the start of every forward pass with the [key] positions of every token
        the layers will attend to (cached ones included); drops ``per_pass`` tensors, and
        ``geometry`` unless the positions are the last pass's (the same tensor, as the model hands
        every pass of one length without ``positions=``, needs no look at its contents)."""
        self._pass.clear()
        if positions is not self.positions and not (
            positions.shape == self.positions.shape
            and positions.device == self.positions.device
            and torch.equal(positions, self.positions)
        ):
            self._geometry.clear()
        self.positions = positions

    def geometry(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, a tensor that depends on this pass's positions alone (distances, T5's buckets; or a
        number read from one on the host, which a captured step cannot read), computed once and kept for
        the passes that follow over the same positions (training steps of one length), not for a pass at
        other positions."""
        if key not in self._geometry:
            self._geometry[key] = make()
        return self._geometry[key]

    def per_pass(self, key: tuple, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``make()``, computed once per forward pass and shared by the layers that ask for the same
        ``key`` (a bias from learned parameters: recomputed next pass, after the optimizer step)."""
        if key not in self._pass:
            self._pass[key] = make()
        return self._pass[key]

    def embedding(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[pos, d_model] vectors added to the token embeddings at ``positions`` (0-based)."""
        raise NotImplementedError(f"{self.kind} adds no positional embedding")

    def bias(self, layer: int, query_len: int, key_len: int) -> torch.Tensor:
        """[head, query, key] term added to the attention logits of the last ``query_len`` of the
        first ``key_len`` positions of this pass."""
        raise NotImplementedError(f"{self.kind} adds no attention bias")

    def rotate(self, layer: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Queries (and keys, unless ``rotate_keys`` says otherwise) [batch, pos, head, d_head] at
        this pass's positions ``start .. start + pos - 1``, rotated."""
        raise NotImplementedError(f"{self.kind} rotates nothing")

    def rotate_keys(self, layer: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Keys [batch, pos, head, d_head] at this pass's positions ``start .. start + pos - 1``:
        ``rotate`` unless a PE treats queries and keys differently (xPos scales them oppositely)."""
        return self.rotate(layer, x, start)

    def score_term(self, layer: int, q: torch.Tensor, k: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """[batch, head, query, key] term added to the logits that depends on the queries [batch,
        query, head, d_head], the keys [batch, key, head, d_head] (cached ones included) and the
        masked logits ``scores`` [batch, head, query, key] (CoPE's gates; Transformer-XL's u^T k);
        such a layer always takes the explicit path."""
        raise NotImplementedError(f"{self.kind} adds no query-dependent term")

    @property
    def depends_on_length(self) -> bool:
        """Whether a pass's length changes the encoding of every position in it (dynamic NTK): then
        neither the KV cache nor a padded batch gives what a pass over the sequence alone gives."""
        return False

    def rotates_layer(self, layer: int) -> bool:
        """Whether ``rotate`` applies in ``layer`` (all layers, unless a PE says otherwise)."""
        return self.rotates

    def distances(self, query_len: int, key_len: int) -> torch.Tensor:
        """[query, key] t - i of this pass's positions, clamped at 0 above the diagonal, where the
        causal mask hides the keys anyway."""

        def make() -> torch.Tensor:
            keys = self.positions[:key_len]
            queries = keys[key_len - query_len :]
            return (queries[:, None] - keys[None, :]).clamp(min=0)

        return self.geometry(("distances", query_len, key_len), make)
