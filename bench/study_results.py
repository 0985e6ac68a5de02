"""A trained study's runs on SCAN's paper split, gathered into one results file.

    python bench/study_results.py --checkpoints /work/study_authors --name reproduce_small_authors \\
        --what "the default study under the authors' protocol, seeds 0 and 1" --conditions "..."

Reads every ``<checkpoints>/scan+split=paper/<pe>/seed<k>`` that has an ``eval.json`` (``probe eval``
or ``probe reproduce`` wrote it) and writes ``bench/results/<name>_cpu.json``: per run its IID and OOD
exact match, the step selection kept (with the last step's numbers and the validation history, under
the authors' protocol), its training seconds and accuracy per length; per PE the mean over seeds.
``bench/scale_figure.py --results`` draws the means as one point. Training seconds count every session
of a run (runs trained before a resumed run recorded its earlier sessions count only the last);
``--conditions`` says what else the machine ran meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402

from probe.analysis.eval_report import mean_over_seeds, read_eval  # noqa: E402
from probe.models.registry import FIGURE_ORDER  # noqa: E402

FOLDER = "scan+split=paper"


def gather(root: Path) -> list[dict]:
    """One row per evaluated run under ``root``'s SCAN folder, in the figures' PE order, then by seed."""
    rows = []
    for pe in FIGURE_ORDER:
        for run in sorted((root / FOLDER / pe).glob("seed*"), key=lambda p: int(p.name[4:])):
            evaluation = read_eval(run)
            if evaluation is None:
                continue
            config = json.loads((run / "config.json").read_text())
            selection = config["training"].get("selection") or {}
            rows.append(
                {
                    "pe": pe,
                    "seed": config["training"]["seed"],
                    "iid": evaluation.iid_accuracy,
                    "ood": evaluation.ood_accuracy,
                    "selected_step": evaluation.selected_step,
                    "last": evaluation.last and evaluation.last.to_json(),
                    "validation_history": selection.get("history"),
                    "train_seconds": config["metrics"].get("train_seconds"),
                    "training": config["training"],
                    "buckets": [b.to_json() for b in evaluation.buckets],
                }
            )
    return rows


def means(root: Path) -> dict[str, dict]:
    """Per PE: IID and OOD means over its seeds (:func:`probe.analysis.eval_report.mean_over_seeds`), and the seeds."""
    reports = [r for pe in FIGURE_ORDER for run in sorted((root / FOLDER / pe).glob("seed*")) if (r := read_eval(run))]
    return {m.pe: {"seeds": m.seeds, "iid": m.iid_accuracy, "ood": m.ood_accuracy} for m in mean_over_seeds(reports)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", required=True, help="the study's checkpoints folder")
    parser.add_argument("--name", required=True, help="results file name, without _cpu.json")
    parser.add_argument("--what", required=True, help="what the study is, for the file's reader")
    parser.add_argument("--conditions", default="", help="what else ran on the machine meanwhile")
    args = parser.parse_args()
    rows = gather(Path(args.checkpoints))
    if not rows:
        sys.exit(f"no evaluated runs under {Path(args.checkpoints) / FOLDER}")
    result = {
        "benchmark": args.name,
        "what": args.what,
        "conditions": args.conditions,
        "command": " ".join(sys.argv),
        "means": means(Path(args.checkpoints)),
        "runs": rows,
    }
    path = RESULTS / f"{args.name}_cpu.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    for pe, row in result["means"].items():
        print(f"{pe:<7} seeds {row['seeds']}  IID {100 * row['iid']:5.1f}  OOD {100 * row['ood']:5.1f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
