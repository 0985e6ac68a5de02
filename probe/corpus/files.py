"""Which files make the corpus, and which of them are held out.

The split is by file, never by line, and depends on nothing but each file's name: a file's
SHA-256 decides whether it is held out, so adding or removing other files moves no file across.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from probe.errors import ProbeError

SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".tox", ".mypy_cache"})
SPLIT_SALT = "probe-corpus-split"


@dataclass(frozen=True)
class SourceFile:
    """One file of the corpus: a stable name (``stdlib/json/decoder.py``) and its text."""

    name: str
    text: str


def corpus_roots(corpus: str) -> list[tuple[str, Path, str]]:
    """(name prefix, folder, suffix filter) per root: ``stdlib`` is the standard library's ``*.py``;
    ``packages`` adds the installed packages'; anything else is a folder, every text file in it,
    named by its path inside the folder (so moving the folder keeps the split)."""
    paths = sysconfig.get_paths()
    stdlib = ("stdlib", Path(paths["stdlib"]), ".py")
    if corpus == "stdlib":
        return [stdlib]
    if corpus == "packages":
        sites = dict.fromkeys(Path(paths[key]) for key in ("purelib", "platlib"))
        return [stdlib] + [(f"packages{i or ''}", site, ".py") for i, site in enumerate(sites)]
    folder = Path(corpus).expanduser()
    if not folder.exists():
        raise ProbeError(
            f"corpus folder {corpus} does not exist; give a folder of source files, 'stdlib' or 'packages'"
        )
    if not folder.is_dir():
        raise ProbeError(f"corpus {corpus} is not a folder; give a folder of source files, 'stdlib' or 'packages'")
    return [("", folder.resolve(), "")]


def read_text(path: Path) -> str | None:
    """The file's text if it is UTF-8 without NUL bytes (source, not binary), else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _walk(folder: Path, suffix: str, exclude: Path | None) -> Iterable[Path]:
    for path in sorted(folder.rglob(f"*{suffix}")):
        relative = path.relative_to(folder).parts
        if any(part in SKIPPED_FOLDERS or part.startswith(".") for part in relative[:-1]):
            continue
        if exclude is not None and path.is_relative_to(exclude):
            continue
        if path.is_file() and not path.is_symlink():
            yield path


def find_sources(corpus: str) -> tuple[list[SourceFile], int]:
    """The corpus's readable, non-empty text files in name order, and how many files were skipped
    (binary, not UTF-8, empty). The standard library leaves out its ``site-packages``."""
    files, skipped = [], 0
    for prefix, folder, suffix in corpus_roots(corpus):
        exclude = folder / "site-packages" if prefix == "stdlib" else None
        for path in _walk(folder, suffix, exclude):
            text = read_text(path)
            if not text or not text.strip():
                skipped += 1
                continue
            relative = path.relative_to(folder).as_posix()
            files.append(SourceFile(f"{prefix}/{relative}" if prefix else relative, text))
    if not files:
        raise ProbeError(
            f"corpus {corpus} has no readable text files ({skipped} skipped: binary, empty or not "
            "UTF-8); give a folder of source files"
        )
    return files, skipped


def split_fraction(name: str) -> float:
    """A number in [0, 1) fixed by the file's name alone."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_heldout(name: str, fraction: float) -> bool:
    return split_fraction(name) < fraction


def split_files(files: list[SourceFile], fraction: float) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, held-out) by file. Where no file's hash falls under ``fraction`` (a handful of files),
    the one with the smallest is held out, so both sides are never empty when two files exist."""
    if not 0 < fraction < 1:
        raise ProbeError(f"heldout must be a fraction in (0, 1), got {fraction}")
    if len(files) < 2:
        raise ProbeError(
            f"the corpus has {len(files)} readable file(s); at least two are needed (one to train on, one held out)"
        )
    heldout = [f for f in files if is_heldout(f.name, fraction)]
    if not heldout:
        heldout = [min(files, key=lambda f: split_fraction(f.name))]
    if len(heldout) == len(files):
        heldout = heldout[:-1]
    names = {f.name for f in heldout}
    return [f for f in files if f.name not in names], heldout
