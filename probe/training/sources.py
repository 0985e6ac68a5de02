"""What a run trains on: a task's examples or a code corpus's windows, behind one interface, so
:mod:`probe.training`'s loop, checkpoints and resumption serve `probe train` and `probe pretrain` alike.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from probe.atomic import atomic_write_text
from probe.corpus import CODE_TASK, CorpusSpec, PreparedCorpus, prepare_corpus
from probe.corpus.bpe import TOKENIZER_FILE
from probe.corpus.prepared import corpus_of_run
from probe.models.checkpoint import TOKENIZER_KEY, tokenizer_record
from probe.models.transformer import PETransformer
from probe.tasks import Tokenizer
from probe.tasks import get as get_task
from probe.tasks.batches import EncodedSet, encode


class TrainingSource(Protocol):
    """The examples of a run, the tokenizer its model carries, how it is validated and what its
    checkpoint records."""

    vocab_size: int

    def attach_to(self, model: PETransformer) -> None: ...

    def training_set(self, seed: int) -> EncodedSet: ...

    def validate(
        self, model: PETransformer, n: int, device: torch.device, precision: str | None = None
    ) -> dict[str, float]:
        """Held-out numbers of ``model``, scored in the precision it trained in (``precision``)."""
        ...

    def validation_set(self, n: int) -> EncodedSet | None:
        """What checkpoint selection scores (teacher-forced exact match), or None where there is none."""
        ...

    def metadata(self) -> dict[str, Any]: ...

    def write_files(self, folder: Path) -> None: ...


class TaskSource:
    """A task's examples (``<bos> source <sep> target <eos>``, or with ``authors`` their format), loss on
    the target; validated by greedy exact match on held-out IID examples (``iid_accuracy``)."""

    def __init__(self, task: str, options: dict[str, Any], seed: int, authors: bool = False):
        self.name, self.seed = task, seed
        self.task = get_task(task, **options)
        self.tokenizer = Tokenizer.for_task(self.task, authors=authors)
        self.vocab_size = len(self.tokenizer)

    def attach_to(self, model: PETransformer) -> None:
        self.tokenizer.attach_to(model)

    def training_set(self, seed: int) -> EncodedSet:
        return encode(self.task.examples("train", seed=seed), self.tokenizer)

    def validate(
        self, model: PETransformer, n: int, device: torch.device, precision: str | None = None
    ) -> dict[str, float]:
        from probe.tasks.decoding import decode_positions, evaluate_examples

        valid = self.task.held_out(n, seed=self.seed)
        answer_of, budget = self.task.answer_reader(), decode_positions(self.task)
        result = evaluate_examples(
            model, self.tokenizer, valid, device=device, answer_of=answer_of, decode_to=budget, precision=precision
        )
        return {"iid_accuracy": result.accuracy}

    def validation_set(self, n: int) -> EncodedSet:
        """The held-out IID examples :meth:`validate` decodes, encoded for one teacher-forced pass."""
        return encode(self.task.held_out(n, seed=self.seed), self.tokenizer)

    def metadata(self) -> dict[str, Any]:
        return {
            "task": {"name": self.name, "options": self.task.options},
            "tokenizer": self.tokenizer.to_dict(),
            TOKENIZER_KEY: tokenizer_record(self.tokenizer.to_hf(), prepend_bos=self.tokenizer.bos),
        }

    def write_files(self, folder: Path) -> None:
        """The run's tokenizer as a Hugging Face file: a checkpoint folder reads with its strings."""
        atomic_write_text(folder / TOKENIZER_FILE, self.tokenizer.to_hf().backend_tokenizer.to_str())


class CorpusSource:
    """The corpus prepared beside the run (``<task folder>/corpus``, prepared here if it is not yet):
    windows of the training context, every next token scored; validated by the held-out files'
    loss at that context (Appendix "Pretraining at 1.3B Scale")."""

    def __init__(self, options: dict[str, Any], run_path: Path):
        self.spec = CorpusSpec.from_options(options)
        self.corpus: PreparedCorpus = prepare_corpus(self.spec, corpus_of_run(run_path))
        self.vocab_size = len(self.corpus.tokenizer)
        self.corpus.require_heldout_window(self.spec.context)  # said before a step, not at the first check

    def attach_to(self, model: PETransformer) -> None:
        self.corpus.tokenizer.attach_to(model)

    def training_set(self, seed: int) -> EncodedSet:
        return self.corpus.windows(self.spec.context)

    @torch.inference_mode()
    def validate(
        self, model: PETransformer, n: int, device: torch.device, precision: str | None = None
    ) -> dict[str, float]:
        """Mean next-token loss over up to ``n`` windows of the training context cut from the
        held-out files (each file's own windows, none across files), and its perplexity; in float32, whatever
        ``precision``."""
        windows = self.corpus.heldout_windows(self.spec.context)[:n]  # [window, context]
        model.eval()
        total, count = 0.0, 0
        for batch in windows.split(32):
            batch = batch.to(device)
            logits = model(batch)[:, :-1].float()  # [batch, context - 1, vocab]
            total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
            count += batch[:, 1:].numel()
        loss = total / max(count, 1)
        return {"heldout_loss": loss, "heldout_perplexity": math.exp(loss), "heldout_tokens": count}

    def validation_set(self, n: int) -> None:
        return None

    def metadata(self) -> dict[str, Any]:
        return {
            "task": {"name": CODE_TASK, "options": self.spec.options},
            "corpus": {"fingerprint": self.corpus.manifest["fingerprint"], "sizes": self.corpus.summary()},
            TOKENIZER_KEY: tokenizer_record(self.corpus.tokenizer.to_hf(), prepend_bos=False),
        }

    def write_files(self, folder: Path) -> None:
        """The run's own copy of the tokenizer: a checkpoint folder reads without its corpus."""
        atomic_write_text(folder / TOKENIZER_FILE, self.corpus.tokenizer.to_json())


def training_source(
    task: str, options: dict[str, Any], seed: int, run_path: Path, authors: bool = False
) -> TrainingSource:
    """The source of ``task``: the code corpus prepared beside the run, or a task's examples (in the
    authors' sequence format with ``authors``)."""
    if task == CODE_TASK:
        return CorpusSource(options, run_path)
    return TaskSource(task, options, seed, authors)
