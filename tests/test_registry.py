"""The PE registry is the one list: everything that names, colours or orders PEs derives from it."""

from __future__ import annotations

import pytest
import torch

import probe
from probe.errors import ProbeError
from probe.models.registry import FIGURE_ORDER, PAPER_PES, PE_CLASSES, PE_COLORS, PE_KINDS, PE_LABELS, RELATIVE


def test_every_list_of_pes_is_the_registry():
    from probe.analysis.evaluation import TIE_ORDER
    from probe.figures import pe_color
    from probe.models import PE_KINDS as models_kinds
    from probe.subjects.run_info import pe_label

    assert probe.PE_KINDS == models_kinds == PE_KINDS == tuple(PE_CLASSES)
    assert sorted(TIE_ORDER) == sorted(PE_KINDS) and TIE_ORDER[-1] == "nope"  # NoPE loses every tie
    for kind in PE_KINDS:
        assert pe_label(kind) == PE_LABELS[kind] != "" and pe_color(kind) == PE_COLORS[kind]
    assert len(set(PE_COLORS.values())) == len(PE_KINDS) and len(set(PE_LABELS.values())) == len(PE_KINDS)


def test_the_registry_says_what_the_paper_says():
    # Figures similarity_per_layer and showcase order PEs from most to least NoPE-like; APE is the
    # paper's only absolute encoding (Appendix B.2), the others are functions of t - i.
    assert tuple(pe for pe in FIGURE_ORDER if pe in PAPER_PES) == ("nope", "t5", "alibi", "rotary", "ape")
    assert RELATIVE & set(PAPER_PES) == {"nope", "t5", "alibi", "rotary"}


def test_an_unknown_pe_is_one_line_naming_the_known_ones():
    with pytest.raises(ProbeError, match=f"unknown positional encoding 'roap'; choose one of {', '.join(PE_KINDS)}$"):
        probe.build_model("roap", vocab_size=8)


@pytest.mark.parametrize("kind", PE_KINDS)
def test_relative_pes_score_a_shifted_sequence_alike(kind):
    """The declared ``relative`` flag against behaviour: the attention logits of the last query over
    a window of keys are unchanged when every position moves by 600 (a prefix of 600 tokens: past
    FIRE's threshold of 512), exactly for relative PEs and not for absolute ones (APE, learned, FIRE).
    Checked on layer 0, before any content from the prefix can mix in (its queries and keys are
    per-token), in float64, where absolute PEs move the logits by O(1)."""
    torch.manual_seed(0)
    model = probe.build_model(kind, vocab_size=12, preset="tiny", n_layers=1).double()
    window = torch.randint(4, 12, (1, 8))
    shifted = torch.cat([torch.randint(4, 12, (1, 600)), window], dim=1)

    def logits_of_last_query(tokens: torch.Tensor) -> torch.Tensor:  # [head, key] over the window's keys
        _, cache = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_attn_scores")
        return cache["blocks.0.attn.hook_attn_scores"][0, :, -1, -8:]

    same = torch.allclose(logits_of_last_query(window), logits_of_last_query(shifted), atol=1e-9)
    assert same == (kind in RELATIVE)
