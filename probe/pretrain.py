"""The pretraining study's settings (Appendix "Pretraining at 1.3B Scale"): which PEs, the training
context per preset, and the room a model needs to be read at 2.5x that context. The runs train
through :mod:`probe.train` on a :class:`probe.sources.CorpusSource`; their recipes are
``probe.train.LM_RECIPES``.
"""

from __future__ import annotations

import math

PRETRAIN_PES = ("nope", "alibi", "rotary")  # the paper's three pretrained models
CONTEXTS = {"tiny": 128, "small": 256, "base": 512, "lm-1b": 1024}  # training context per preset (the paper: 1024)
LONGEST_MULTIPLE = 2.5  # perplexity is read up to 2.5x the training context, as the paper's figure


def context_room(context: int) -> int:
    """The ``n_ctx`` a code model needs to be read at 2.5x its training context (a multiple of 64)."""
    return 64 * math.ceil(LONGEST_MULTIPLE * context / 64)
