"""NoPE: no positional encoding at all (Appendix B.2, Eq. nope: <q_t, k_i> = q_t^T k_i).

Order reaches the model only through the causal mask; Theorem 1 shows that this is enough to
recover absolute positions. No positional parameter or buffer exists on the model.
"""

from __future__ import annotations

from probe.models.positional import PositionalEncoding


class NoPE(PositionalEncoding):
    kind = "nope"
