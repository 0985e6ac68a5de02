"""What every report is (compare, distances, positions, perplexity, exact match, extrapolation): a name, its JSON, a
table of rows, and the files it writes, so a command, the explorer or a notebook handles any of them one way;
and the files every report writes the same way (its JSON, its rows as CSV, its Markdown table where it has one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from probe.atomic import atomic_write_text, write_json_and_csv


class Report(Protocol):
    """A measure's result, as every face reads it."""

    @property
    def name(self) -> str:
        """The report's kind as its outputs are named (``compare``, ``distances``, ``perplexity+hf-gpt2``): the
        folder `probe <command>` writes it to beside the runs."""
        ...

    def to_json(self) -> dict[str, Any]:
        """Everything it found, as `--json` prints it and its ``.json`` file holds it."""
        ...

    def to_rows(self) -> list[dict[str, Any]]:
        """One flat row per cell, for its ``.csv`` file, a table or a DataFrame."""
        ...

    def write(self, out_dir: str | Path) -> list[str]:
        """Its files under ``out_dir`` (JSON, CSV, figures, ...); the paths written."""
        ...


def write_tables(report: Report, out_dir: str | Path, stem: str, markdown: str | None = None) -> list[Path]:
    """``<stem>.json`` (:meth:`Report.to_json`) and ``<stem>.csv`` (:meth:`Report.to_rows`) under ``out_dir``, and
    ``<stem>.md`` with ``markdown`` where given, each written atomically; their paths, in that order."""
    out_dir = Path(out_dir)
    written = write_json_and_csv(out_dir, stem, report.to_json(), report.to_rows())
    if markdown is not None:
        atomic_write_text(out_dir / f"{stem}.md", markdown)
        written.append(out_dir / f"{stem}.md")
    return written
