"""Rotary (Su et al. 2021; Appendix B.2, Eq. rotary): q_t and k_i rotated by t and i radians
times per-pair frequencies, so <Rot(q_t, t), Rot(k_i, i)> depends on t - i only.

The rotation itself is TransformerLens' (``AbstractAttention.apply_rotary``, GPT-NeoX pairing,
base ``rotary_base``, the first ``rotary_dim`` dimensions of every head), with its hook points
``hook_rot_q`` and ``hook_rot_k``; its tables grow on demand, so any length up to n_ctx runs.
"""

from __future__ import annotations

from probe.models.positional import PositionalEncoding


class Rotary(PositionalEncoding):
    kind = "rotary"
    label = "Rotary"
    color = "#d62728"
    figure_rank = 3
    rotates = True
