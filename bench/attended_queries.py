"""Figure attended_distance read both ways on the same runs: every output query (the paper's text, "for tokens
in the output sequence", which the Section 6 study's summaries keep) against the answer's queries alone (the
released notebook's ``query_region == "output"``: the tokens after the scratchpad's end marker).

    python bench/attended_queries.py RUN_DIR ... [--docs]   # addition + full scratchpad runs, one per PE
    python bench/attended_queries.py --reuse --docs          # the docs' table from the results file

Per run, `probe distances`' reading at its defaults (unseen lengths, 10 examples a bucket, seed 0, d̄ as the
text writes it) under each choice of queries, its shape (:func:`probe.studies.attended.attended_shapes`) and
Section 6.1's reading of the five (:func:`probe.studies.attended.attended_claim`). Writes
bench/results/attended_queries_cpu.json; ``--docs`` renders its table into docs/reproducing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common import RESULTS, fill_block, header, write_json

from probe.analysis import attended_distance_report
from probe.models.registry import PE_LABELS
from probe.studies.attended import attended_claim, attended_shapes
from probe.studies.plans import PE_SETS
from probe.subjects.settings import ReadSettings

QUERIES = ("output", "answer")
PAGE = Path(__file__).resolve().parent.parent / "docs" / "reproducing.md"


def measure(runs: list[str]) -> dict:
    """Both readings of ``runs``: per choice of queries, each PE's shape and the claim's line."""
    readings = {}
    for queries in QUERIES:
        report = attended_distance_report(runs, ReadSettings(), queries=queries).to_json()
        scenario = report["runs"][0]["task"]
        attended = {(scenario, r["run"]["pe"], r["run"]["seed"]): r for r in report["runs"]}
        shapes = attended_shapes(attended, scenario)
        readings[queries] = {
            "n_queries": {r["run"]["pe"]: r["n_queries"] for r in report["runs"]},
            "shapes": shapes,
            "claim": attended_claim(shapes),
        }
    return {"runs": runs, "readings": readings}


def table(result: dict) -> str:
    """The docs' table: per PE, bimodality and near/far mass under each reading, then each reading's line."""
    rows = [
        "| PE | queries counted (output / answer) | bimodality, output | bimodality, answer | near / far, output "
        "| near / far, answer |",
        "|---|---|---|---|---|---|",
    ]
    output, answer = (result["readings"][q] for q in QUERIES)
    for pe in [pe for pe in PE_SETS["paper"] if pe in output["shapes"]]:
        shape, other = output["shapes"][pe], answer["shapes"][pe]
        rows.append(
            f"| {PE_LABELS[pe]} | {output['n_queries'][pe]:,} / {answer['n_queries'][pe]:,} "
            f"| {shape['bimodality']:.3f} | {other['bimodality']:.3f} "
            f"| {100 * shape['near']:.1f}% / {100 * shape['far']:.1f}% "
            f"| {100 * other['near']:.1f}% / {100 * other['far']:.1f}% |"
        )
    lines = [f"- every output query: {output['claim']}", f"- the answer's queries alone: {answer['claim']}"]
    return "\n".join(rows) + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR")
    parser.add_argument("--reuse", action="store_true", help="render the committed results, measure nothing")
    parser.add_argument("--docs", action="store_true", help="write the table into docs/reproducing.md")
    args = parser.parse_args()
    path = RESULTS / "attended_queries_cpu.json"
    if args.reuse:
        payload = json.loads(path.read_text())
    elif args.runs:
        before = os.getloadavg()
        what = "Figure attended_distance: every output query vs the answer's"
        payload = header("attended_queries", what, "cpu", before)
        payload |= measure(args.runs)
        print(write_json("attended_queries", "cpu", payload))
    else:
        sys.exit("name the addition + full scratchpad run folders, or --reuse")
    print(table(payload))
    if args.docs:
        fill_block(PAGE, "attended-queries", table(payload))


if __name__ == "__main__":
    main()
