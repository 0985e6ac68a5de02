"""NoPE: no positional encoding at all (Appendix B.2, Eq. nope: <q_t, k_i> = q_t^T k_i).

Order reaches the model only through the causal mask; Theorem 1 shows that this is enough to
recover absolute positions. No positional parameter or buffer exists on the model.
"""

from __future__ import annotations

from probe.models.positional import PositionalEncoding


class NoPE(PositionalEncoding):
    kind = "nope"
    label = "NoPE"
    color = "#1f77b4"
    figure_rank = 0
    in_paper = True
    pretrained_in_paper = True  # Appendix "Pretraining at 1.3B Scale"
