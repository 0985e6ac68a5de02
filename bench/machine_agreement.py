"""One seed of a study trained on two CPU models, against the spread between two seeds on one.

    python bench/machine_agreement.py OTHER_SUMMARIES [--committed bench/results/section3] [--seed 3]
        [--against 2] [--name machine_agreement_section3]

A study's seed trains bit for bit alike on one CPU model, not across models: their matrix kernels round
differently, so the runs part ways within a few hundred steps and can select other checkpoints. This
compares every run that both folders hold at ``--seed`` (the same scenario, PE and recipe): whether the
selected step and the per-length exact matches are identical, and how far OOD exact match moves, beside how
far it moves between seeds ``--seed`` and ``--against`` of the committed summaries (the study's own noise).
Writes bench/results/<name>_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, write_result  # noqa: E402

from probe.studies.summaries import read_summary  # noqa: E402


def runs_by_part(folder: Path, seed: int) -> dict[str, tuple[dict, dict[str, dict]]]:
    """A part's file name less its seed (scenario and rung) -> (its summary, PE -> run row), at ``seed``."""
    out = {}
    for path in sorted(folder.glob(f"*+seed{seed}.json")):
        data, _ = read_summary(path)
        out[path.name.removesuffix(f"+seed{seed}.json")] = (data, {row["pe"]: row for row in data["runs"]})
    return out


def compare(ours: dict, theirs: dict) -> list[dict]:
    """Per run both hold with one recipe: identical (selected step and every length's count), OOD either side."""
    rows = []
    for name in sorted(set(ours) & set(theirs)):
        (a, a_runs), (b, b_runs) = ours[name], theirs[name]
        if a["recipe"] != b["recipe"]:
            continue
        for pe in a_runs.keys() & b_runs.keys():
            x, y = a_runs[pe], b_runs[pe]
            same = x["selected_step"] == y["selected_step"] and x["evaluation"]["buckets"] == y["evaluation"]["buckets"]
            rows.append(
                {"part": name, "pe": pe, "identical": same, "ood": [x["ood"], y["ood"]], "iid": [x["iid"], y["iid"]]}
            )
    return rows


def moved(rows: list[dict]) -> dict:
    """How far OOD exact match moves across ``rows``: mean and largest, in points, and the share identical."""
    gaps = [abs(r["ood"][0] - r["ood"][1]) for r in rows]
    return {
        "runs": len(rows),
        "identical": sum(r["identical"] for r in rows),
        "mean_ood_gap_points": 100 * statistics.fmean(gaps) if gaps else None,
        "largest_ood_gap_points": 100 * max(gaps) if gaps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("other", help="summaries trained on another CPU model")
    parser.add_argument("--committed", default=str(RESULTS / "section3"))
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--against", type=int, default=2, help="the committed seed the spread between seeds reads")
    parser.add_argument("--name", default="machine_agreement_section3")
    args = parser.parse_args()
    load_before = os.getloadavg()
    committed = runs_by_part(Path(args.committed), args.seed)
    other = runs_by_part(Path(args.other), args.seed)
    across_machines = compare(committed, other)
    seeds = compare(committed, runs_by_part(Path(args.committed), args.against))
    machines = {
        "committed": sorted({d["machine"].get("cpu", d["machine"]["platform"]) for d, _ in committed.values()}),
        "other": sorted({d["machine"].get("cpu", d["machine"]["platform"]) for d, _ in other.values()}),
    }
    write_result(
        args.name,
        f"seed {args.seed} of a study's summaries trained on two CPU models, run by run, beside seeds {args.seed} "
        f"and {args.against} of the committed summaries",
        load_before,
        machines=machines,
        across_machines=moved(across_machines),
        across_seeds=moved(seeds),
        runs=across_machines,
    )
    print(json.dumps({"across_machines": moved(across_machines), "across_seeds": moved(seeds)}, indent=1))


if __name__ == "__main__":
    main()
