"""The Section 6 study's report: scratchpad formats ranked per task, a scratchpad's gain per PE, the claims.

    python bench/section6_report.py                  # bench/results/section6/*.json, seeds 0 1 2
    python bench/section6_report.py --seeds 0 --docs --figures docs/img

`probe reproduce --scale section6 --task all --summaries bench/results/section6` writes a summary per
scenario and seed as it lands (grids/section6.toml: each task with its scratchpad formats and without one,
every example in the authors' wording), and ends each sitting with the Section 6 report of every summary landed
(:mod:`probe.studies.section6`) in its report folder. This script writes that report of the committed
summaries into ``bench/results/section6_report.{json,md}`` (``--name``: another stem), with ``--docs`` into
docs/reproducing.md, with ``--figures`` its figures as PNG: per task each format's mean reciprocal rank over
(PE, seed) with its interval over seeds (Figure scratchpad_formats_per_ds); per PE the formats every task
trains, ranked over (task, seed) (the appendix's Figure scratchpad_formats_per_model), and each PE's OOD per
format and task (its per-task figures); the full format's and C's gain over no scratchpad per PE; the PEs
ranked with a scratchpad; each PE's IID and its OOD beside a constant guess; the attended distances of
addition with the full scratchpad (Figure attended_distance); and one line per claim of the paper's Section 6.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, add_study_arguments, fill_block  # noqa: E402

from probe.atomic import atomic_write_json, atomic_write_text  # noqa: E402
from probe.figures import write_figure  # noqa: E402
from probe.studies.section6 import STUDY, study_report  # noqa: E402
from probe.studies.section6_view import figures, markdown  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproducing.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_study_arguments(parser, STUDY)
    parser.add_argument("--docs", action="store_true", help="write the tables into docs/reproducing.md")
    parser.add_argument(
        "--figures",
        help="folder for the figures as PNG (e.g. docs/img): the formats' ranks per task and per PE, each PE's OOD "
        "per format and task, and Figure attended_distance once addition's full-format runs have kept theirs",
    )
    args = parser.parse_args()
    if not Path(args.summaries).is_dir():
        sys.exit(f"no folder of summaries at {args.summaries}")
    report = study_report(args.summaries, args.seeds)
    text = markdown(report)
    atomic_write_json(RESULTS / f"{args.name}.json", report)
    atomic_write_text(RESULTS / f"{args.name}.md", text)
    print(text)
    if args.docs:
        fill_block(DOCS, STUDY, text)
        print(f"wrote the tables into {DOCS}")
    if args.figures:
        for name, figure in figures(report).items():
            write_png(figure, Path(args.figures), name)


def write_png(figure, folder: Path, name: str) -> None:
    """The figure's PNG alone into ``folder``: the page embeds it."""
    with tempfile.TemporaryDirectory() as scratch:
        for path in write_figure(figure, Path(scratch) / name):
            if path.suffix == ".png":
                shutil.copy(path, folder / path.name)
                print(f"wrote {folder / path.name}")


if __name__ == "__main__":
    main()
