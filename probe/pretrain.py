"""Pretraining (Appendix "Pretraining at 1.3B Scale"): a decoder-only language model per PE on a
code corpus, next-token loss on every position of packed windows of the training context.

It is :mod:`probe.train`'s loop, checkpoints and resumption with another source: the windows of
the corpus prepared beside the runs (``<checkpoints>/code[+options]/corpus``), validated by the
loss on held-out files' windows at the training context.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from probe.corpus import CODE_TASK, CorpusSpec, PreparedCorpus, prepare_corpus
from probe.corpus.bpe import CodeTokenizer
from probe.corpus.prepared import TOKENIZER, corpus_of_run
from probe.data import EncodedSet
from probe.files import atomic_write_text
from probe.models.transformer import PETransformer
from probe.train import TrainConfig

PRETRAIN_PES = ("nope", "alibi", "rotary")  # the paper's three pretrained models
CONTEXTS = {"tiny": 128, "small": 256, "base": 512, "lm-1b": 1024}  # training context per preset (the paper: 1024)
LONGEST_MULTIPLE = 2.5  # perplexity is read up to 2.5x the training context, as the paper's figure


def context_room(context: int) -> int:
    """The ``n_ctx`` a code model gets: room for 2.5x its training context (a multiple of 64)."""
    return 64 * math.ceil(LONGEST_MULTIPLE * context / 64)


class CorpusSource:
    """The corpus prepared beside the run: windows of the training context, every token scored."""

    def __init__(self, config: TrainConfig, run_path: Path):
        self.config = config
        self.spec = CorpusSpec.from_options(config.task_options)
        self.corpus: PreparedCorpus = prepare_corpus(self.spec, corpus_of_run(run_path))
        self.vocab_size = len(self.corpus.tokenizer)

    @property
    def tokenizer(self) -> CodeTokenizer:
        return self.corpus.tokenizer

    def attach_to(self, model: PETransformer) -> None:
        self.corpus.tokenizer.attach_to(model)

    def training_set(self, seed: int) -> EncodedSet:
        return self.corpus.windows(self.spec.context)

    @torch.inference_mode()
    def validate(self, model: PETransformer, n: int, device: torch.device) -> dict[str, float]:
        """Mean next-token loss over up to ``n`` windows of the training context cut from the
        held-out files (each file's own windows, none across files), and its perplexity."""
        windows = heldout_windows(self.corpus, self.spec.context)[:n]
        model.eval()
        total, count = 0.0, 0
        for batch in windows.split(32):
            batch = batch.to(device)
            logits = model(batch)[:, :-1].float()  # [batch, context - 1, vocab]
            total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
            count += batch[:, 1:].numel()
        loss = total / max(count, 1)
        return {"heldout_loss": loss, "heldout_perplexity": math.exp(loss), "heldout_tokens": count}

    def metadata(self) -> dict[str, Any]:
        return {"task": {"name": CODE_TASK, "options": self.spec.options},
                "corpus": {"fingerprint": self.corpus.manifest["fingerprint"], "sizes": self.corpus.summary()}}

    def write_files(self, folder: Path) -> None:
        """The run's own copy of the tokenizer: a checkpoint folder reads without its corpus."""
        atomic_write_text(folder / TOKENIZER, self.corpus.tokenizer.to_json())


def heldout_windows(corpus: PreparedCorpus, context: int) -> torch.Tensor:
    """[windows, context] long: every held-out file's non-overlapping windows, file after file."""
    rows = [tokens[: len(tokens) // context * context].view(-1, context)
            for tokens in (corpus.heldout_file(i) for i in range(len(corpus.heldout_names)))]
    rows = [r for r in rows if len(r)]
    return torch.cat(rows) if rows else torch.empty(0, context, dtype=torch.long)
