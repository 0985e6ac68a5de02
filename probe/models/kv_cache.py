"""A key-value cache written in place: decoding appends a token a step, and TransformerLens' cache concatenates
every cached key and value with it each time (``torch.cat``), a copy of the whole past per step and per layer,
which grows with the square of what is decoded (a third of a 64-example decode's time at ``tiny``, profiled).
This cache sizes its buffers once for the decode and writes each step's keys, values and attention mask after
the last, handing the model views of what is filled: the same numbers, bit for bit (``tests/test_kv_cache.py``
holds every PE to TransformerLens' cache). The buffers are head-major, [batch, head, capacity, d_head], the
layout attention reads, so what is filled is a plain slice for ``scaled_dot_product_attention``: position-major
buffers made it gather every cached key and value each step. ``bench/kv_cache.py`` measures it against
TransformerLens' cache. The model reads it as it reads TransformerLens' (``entries``, each with ``past_keys``
and ``append``; ``append_attention_mask``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from probe.errors import ProbeError

if TYPE_CHECKING:
    from transformer_lens.config import TransformerLensConfig


class CacheEntry:
    """One layer's keys and values, head-major [batch, head, capacity, d_head] buffers filled up to ``filled``,
    handed out as [batch, filled, head, d_head] views, TransformerLens' layout. A rotating layer may cache its
    keys turned too (``turned``), each turned once at its own position, where turning every cached key again
    each step costs a rotary layer's decoding a pass over its whole cache per step."""

    def __init__(
        self, batch: int, capacity: int, n_heads: int, d_head: int, device: torch.device | str, dtype: torch.dtype
    ) -> None:
        self.keys = torch.empty(batch, n_heads, capacity, d_head, device=device, dtype=dtype)
        self.values = torch.empty_like(self.keys)
        self.filled = 0
        self.turned: Tensor | None = None  # the keys turned, while every pass so far has handed them in

    @property
    def past_keys(self) -> Tensor:
        return self.keys[:, :, : self.filled].transpose(1, 2)  # [batch, filled, head, d_head]

    @property
    def past_values(self) -> Tensor:
        return self.values[:, :, : self.filled].transpose(1, 2)

    @property
    def past_turned(self) -> Tensor | None:
        """[batch, filled, head, d_head] every cached key turned, or None where a pass did not hand them in."""
        return None if self.turned is None else self.turned[:, :, : self.filled].transpose(1, 2)

    def append(self, new_keys: Tensor, new_values: Tensor, turned: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Write [batch, new, head, d_head] keys and values (and the keys ``turned``, where the layer turns them)
        after the cached ones; every key and value so far."""
        end = self.filled + new_keys.size(1)
        if end > self.keys.size(2):
            raise ProbeError(f"the key-value cache holds {self.keys.size(2)} positions; {end} were asked of it")
        if turned is None or (self.turned is None and self.filled):
            self.turned = None  # a pass without them (or after one): what is cached turned would miss keys
        else:
            if self.turned is None:
                self.turned = torch.empty_like(self.keys)
            self.turned[:, :, self.filled : end] = turned.transpose(1, 2)
        self.keys[:, :, self.filled : end] = new_keys.transpose(1, 2)
        self.values[:, :, self.filled : end] = new_values.transpose(1, 2)
        self.filled = end
        return self.past_keys, self.past_values

    def keep(self, rows: Tensor) -> None:
        """Go on with the sequences ``rows`` (ascending indices) alone, in that order: what they cached moves to the
        buffers' first rows, and the buffers are seen as that many rows from here."""
        for name in ("keys", "values", "turned"):
            buffer = getattr(self, name)
            if buffer is not None:
                buffer[: rows.numel(), :, : self.filled] = buffer[rows, :, : self.filled]  # gathered, then written
                setattr(self, name, buffer[: rows.numel()])


class KeyValueCache:
    """Every layer's :class:`CacheEntry` and the attention mask of the keys cached, for ``capacity`` positions."""

    def __init__(self, cfg: TransformerLensConfig, device: torch.device | str, batch: int, capacity: int) -> None:
        heads = cfg.n_key_value_heads if getattr(cfg, "n_key_value_heads", None) is not None else cfg.n_heads
        self.entries = [CacheEntry(batch, capacity, heads, cfg.d_head, device, cfg.dtype) for _ in range(cfg.n_layers)]
        self.mask = torch.empty(batch, capacity, dtype=torch.long, device=device)
        self.masked = 0
        self.padded = False  # whether a key cached is padding (0 in its mask): else a lone query sees every key

    def append_attention_mask(self, attention_mask: Tensor) -> Tensor:
        """[batch, new] (0: padding) after the cached keys' mask -> [batch, key] every key's so far."""
        end = self.masked + attention_mask.size(-1)
        if end > self.mask.size(1):
            raise ProbeError(f"the key-value cache holds {self.mask.size(1)} positions; {end} were asked of it")
        self.mask[:, self.masked : end] = attention_mask
        self.masked = end
        self.padded = self.padded or not bool(attention_mask.all())
        return self.mask[:, :end]

    def keep(self, rows: Tensor) -> None:
        """Go on decoding the sequences ``rows`` alone ([kept] ascending indices of the batch, in that order): a
        decode drops the rows that have ended, whose cached keys every later step would read for nothing."""
        for entry in self.entries:
            entry.keep(rows)
        self.mask[: rows.numel(), : self.masked] = self.mask[rows, : self.masked]
        self.mask = self.mask[: rows.numel()]

    def __getitem__(self, layer: int) -> CacheEntry:
        return self.entries[layer]
