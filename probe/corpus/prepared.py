"""A corpus made ready once and kept beside its runs: ``<task folder>/corpus/``.

``tokenizer.json`` (the BPE), ``tokens.safetensors`` (the training stream, files joined by
``<|endoftext|>``; the held-out files' tokens and offsets) and ``manifest.json`` (the spec, the
held-out files' names, the sizes, a fingerprint of the source), each written atomically,
the manifest last: a folder without one is not ready. Every run of a task folder reads the
same prepared corpus, so their perplexities are over the same tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from probe.atomic import atomic_write, atomic_write_json, atomic_write_text
from probe.corpus.bpe import TOKENIZER_FILE, CodeTokenizer, train_bpe
from probe.corpus.files import find_sources, split_files
from probe.errors import ProbeError
from probe.tasks.batches import EncodedSet

CODE_TASK = "code"
CORPUS_FOLDER = "corpus"
MANIFEST, TOKENS = "manifest.json", "tokens.safetensors"
TOKENIZER = TOKENIZER_FILE
Progress = Callable[[str], None]
BPE = "bpe"  # CorpusSpec.tokenizer: probe trains its own


def tokenizer_digest(tokenizer_json: str) -> str:
    """A given tokenizer's name in ``CorpusSpec.tokenizer``: the SHA-256 of its JSON, 16 hex digits."""
    return hashlib.sha256(tokenizer_json.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CorpusSpec:
    """The task options of a code run: which corpus, how it is split and tokenized, the training context.

    ``corpus``: ``stdlib`` (the standard library's Python files), ``packages`` (and the installed
    packages') or a folder. ``context``: tokens per training window (the paper: 1024).
    ``tokenizer``: ``bpe`` (a byte-level BPE of ``vocab_size`` ids trained on the training files), or
    the SHA-256 (first 16 hex digits) of a given ``tokenizer.json``, for models that bring their own
    (`probe import`): the corpus is then tokenized with that file, handed to :func:`prepare_corpus`.
    """

    corpus: str = "stdlib"
    heldout: float = 0.1
    vocab_size: int = 2048
    context: int = 128
    tokenizer: str = BPE

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus:
            raise ProbeError(f"corpus must be 'stdlib', 'packages' or a folder, got {self.corpus!r}")
        if not isinstance(self.heldout, (int, float)) or not 0 < self.heldout < 1:
            raise ProbeError(f"heldout must be a fraction in (0, 1), got {self.heldout!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 258:
            raise ProbeError(f"vocab_size must be an integer of at least 258, got {self.vocab_size!r}")
        if not isinstance(self.context, int) or self.context < 2:
            raise ProbeError(f"context must be an integer of at least 2 tokens, got {self.context!r}")
        if self.corpus not in ("stdlib", "packages"):
            object.__setattr__(self, "corpus", str(Path(self.corpus).expanduser().resolve()))

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> CorpusSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options or {}) - known)
        if unknown:
            raise ProbeError(
                f"unknown option(s) of {CODE_TASK}: {', '.join(unknown)}; accepted: {', '.join(sorted(known))}"
            )
        return cls(**(options or {}))

    @property
    def options(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def given(self) -> dict[str, Any]:
        """The options that differ from the defaults: what names the task folder."""
        default = CorpusSpec()
        return {k: v for k, v in self.options.items() if v != getattr(default, k)}

    def source(self) -> dict[str, Any]:
        """What decides the prepared corpus (the context does not: it only cuts windows)."""
        return {k: v for k, v in self.options.items() if k != "context"}


def corpus_folder_name(options: dict[str, Any] | None) -> str:
    """``code``, ``code+context=256``, or for a folder ``code+corpus=myproject-1a2b3c4d`` (its name and
    a hash of its full path, so a folder name never holds a path)."""
    spec = CorpusSpec.from_options(options)
    parts = []
    for key, value in sorted(spec.given().items()):
        if key == "corpus" and value not in ("stdlib", "packages"):
            value = f"{Path(value).name}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"
        parts.append(f"+{key}={value}")
    return CODE_TASK + "".join(parts)


@dataclass
class PreparedCorpus:
    """The tokenized corpus: the training stream, the held-out files, the tokenizer, the sizes."""

    folder: Path
    tokenizer: CodeTokenizer
    train: torch.Tensor  # [train tokens] int32: files joined by <|endoftext|>
    heldout_tokens: torch.Tensor  # [held-out tokens] int32, file after file
    heldout_offsets: torch.Tensor  # [held-out files + 1] int64
    manifest: dict[str, Any]

    @property
    def heldout_names(self) -> list[str]:
        return list(self.manifest["heldout_files"])

    def heldout_file(self, index: int) -> torch.Tensor:
        """[tokens] int64 of held-out file ``index`` (no end-of-file token)."""
        start, stop = int(self.heldout_offsets[index]), int(self.heldout_offsets[index + 1])
        return self.heldout_tokens[start:stop].long()

    def heldout_lengths(self) -> torch.Tensor:
        return self.heldout_offsets.diff()

    def windows(self, context: int) -> EncodedSet:
        """Non-overlapping windows of ``context`` tokens of the training stream; every next-token
        prediction in a window is scored."""
        n = self.train.numel() // context
        if n < 1:
            raise ProbeError(
                f"the corpus has {self.train.numel()} training tokens, fewer than one window of "
                f"{context}; "
                "give a larger corpus or a shorter context"
            )
        tokens = self.train[: n * context].view(n, context).long()
        return EncodedSet(tokens, torch.full((n,), context), torch.ones(n, dtype=torch.long))

    def heldout_windows(self, context: int) -> torch.Tensor:
        """[windows, context] long: every held-out file's non-overlapping windows, file after file
        (none across files)."""
        rows = [
            tokens[: len(tokens) // context * context].view(-1, context)
            for tokens in (self.heldout_file(i) for i in range(len(self.heldout_names)))
        ]
        rows = [r for r in rows if len(r)]
        return torch.cat(rows) if rows else torch.empty(0, context, dtype=torch.long)

    def require_heldout_window(self, context: int) -> None:
        """ProbeError where no held-out file holds one window of ``context`` tokens: training would have
        nothing to validate on."""
        if not len(self.heldout_windows(context)):
            raise ProbeError(
                f"no held-out file of the corpus has {context} tokens, the training context: nothing to validate "
                "on; a larger corpus or --heldout, or a smaller --context"
            )

    def summary(self) -> dict[str, Any]:
        return dict(self.manifest["sizes"])


def _fingerprint(files) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + hashlib.sha256(f.text.encode()).digest())
    return digest.hexdigest()


def _build(spec: CorpusSpec, folder: Path, progress: Progress | None, tokenizer_json: str | None) -> None:
    say = progress or (lambda message: None)
    say(f"reading {spec.corpus}")
    files, skipped = find_sources(spec.corpus)
    train, heldout = split_files(files, spec.heldout)
    if spec.tokenizer == BPE:
        say(f"training a {spec.vocab_size}-id byte-level BPE on {len(train)} files")
        tokenizer = train_bpe((f.text for f in train), spec.vocab_size)
    else:
        tokenizer = CodeTokenizer.from_json(tokenizer_json)
    say(f"tokenizing {len(files)} files")
    train_ids = tokenizer.encode_batch([f.text for f in train])
    heldout_ids = tokenizer.encode_batch([f.text for f in heldout])
    lengths = [len(ids) for ids in heldout_ids]
    eof = [tokenizer.eof_id]
    tensors = {
        "train": torch.cat([torch.tensor(ids + eof, dtype=torch.int32) for ids in train_ids]),
        "heldout": torch.tensor([t for ids in heldout_ids for t in ids], dtype=torch.int32),
        "heldout_offsets": torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0),
    }
    sizes = {
        "files": len(files),
        "skipped_files": skipped,
        "train_files": len(train),
        "train_bytes": sum(len(f.text.encode()) for f in train),
        "train_tokens": sum(len(ids) for ids in train_ids),
        "heldout_files": len(heldout),
        "heldout_bytes": sum(len(f.text.encode()) for f in heldout),
        "heldout_tokens": sum(lengths),
    }
    manifest = {
        "spec": spec.source(),
        "fingerprint": _fingerprint(files),
        "sizes": sizes,
        "heldout_files": [f.name for f in heldout],
    }
    atomic_write_text(folder / TOKENIZER, tokenizer.to_json())
    atomic_write(folder / TOKENS, lambda tmp: save_file(tensors, str(tmp)))
    atomic_write_json(folder / MANIFEST, manifest)


def prepare_corpus(
    spec: CorpusSpec, folder: str | Path, progress: Progress | None = None, tokenizer_json: str | None = None
) -> PreparedCorpus:
    """The corpus of ``spec`` prepared in ``folder``: read from there if it is ready and was made
    from the same spec, else built (read, split, BPE or ``tokenizer_json``, tokenize) and written there first.

    A ready folder is kept even if the source files changed since: runs compared on it saw the
    same tokens. Delete the folder to prepare it again."""
    folder = Path(folder)
    if spec.tokenizer != BPE and (tokenizer_json is None or tokenizer_digest(tokenizer_json) != spec.tokenizer):
        raise ProbeError(
            f"the corpus of {folder} is tokenized with a given tokenizer ({spec.tokenizer}); "
            "`probe import` prepares it with the model's tokenizer.json"
        )
    manifest = folder / MANIFEST
    if manifest.is_file():
        stored = _read_manifest(manifest)
        if {"tokenizer": BPE, **stored.get("spec", {})} != spec.source():  # corpora prepared before `tokenizer`
            raise ProbeError(
                f"{folder} holds a corpus prepared with other settings ({stored.get('spec')}); "
                "choose another --checkpoints or delete that folder"
            )
    else:
        _build(spec, folder, progress, tokenizer_json)
    return load_corpus(folder)


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ProbeError(
            f"{path} is not a readable corpus manifest ({error}); delete its folder to prepare it again"
        ) from None
    if not isinstance(manifest, dict) or not {"spec", "sizes", "heldout_files"} <= set(manifest):
        raise ProbeError(f"{path} is not a probe corpus manifest; delete its folder to prepare it again")
    return manifest


def load_corpus(folder: str | Path) -> PreparedCorpus:
    """A prepared corpus folder (ProbeError if it is missing, unfinished or damaged)."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise ProbeError(f"no prepared corpus in {folder}; `probe pretrain` prepares it")
    manifest = _read_manifest(folder / MANIFEST)
    try:
        tokenizer = CodeTokenizer.from_json((folder / TOKENIZER).read_text())
        tensors = load_file(str(folder / TOKENS))
    except (OSError, SafetensorError, ValueError) as error:
        raise ProbeError(
            f"the corpus in {folder} is damaged ({error}); delete that folder to prepare it again"
        ) from None
    if len(tensors["heldout_offsets"]) != len(manifest["heldout_files"]) + 1:
        raise ProbeError(f"the corpus in {folder} does not match its manifest; delete that folder to prepare it again")
    return PreparedCorpus(folder, tokenizer, tensors["train"], tensors["heldout"], tensors["heldout_offsets"], manifest)


def corpus_of_run(run_path: str | Path) -> Path:
    """The corpus folder a code run trained on: ``<task folder>/corpus`` beside its PE folders."""
    return Path(run_path).parents[1] / CORPUS_FOLDER


def run_tokenizer_json(path: str | Path) -> str:
    """The BPE a code run saved beside its weights, as JSON."""
    try:
        return (Path(path) / TOKENIZER_FILE).read_text()
    except OSError:
        raise ProbeError(f"{path} has no readable {TOKENIZER_FILE}: not a complete `probe pretrain` run") from None


def run_corpus(path: str | Path, config: dict[str, Any]) -> PreparedCorpus:
    """The prepared corpus beside a code run, checked to be the one it was trained on."""
    folder = corpus_of_run(path)
    if not (folder / MANIFEST).is_file():
        raise ProbeError(
            f"no prepared corpus at {folder}: perplexity and the code analyses read the held-out files of "
            f"the corpus {path} was trained on, prepared beside its task folder by `probe pretrain`"
        )
    corpus = load_corpus(folder)
    if corpus.manifest.get("fingerprint") != config.get("corpus", {}).get("fingerprint"):
        raise ProbeError(f"the corpus in {folder} is not the one {path} was trained on (their fingerprints differ)")
    if corpus.tokenizer.to_json() != run_tokenizer_json(path):
        raise ProbeError(f"the corpus in {folder} has another tokenizer than {path} was trained with")
    return corpus
