"""Rebuild ``paper_results.json`` from the authors' released results (run once, by a maintainer).

Reads ``results/classic.jsonl`` (SCAN, PCFG) and ``results/sanity_check.jsonl`` (copy, reverse)
from a checkout of McGill-NLP/length-generalization and keeps, for every final run
(``job_type == "best_run_seed_exp"``: the chosen hyperparameters rerun with three seeds), the
exact match on the held-out IID split and on the test split, overall and per length bucket.

    python -m probe.reference.build PATH/TO/length-generalization COMMIT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from probe.reference import DATASETS, PE_NAMES, RESULTS_FILE, SOURCE_FILES


def buckets(run: dict[str, Any], split: str) -> dict[str, float]:
    prefix = f"sum__pred/{split}_acc_"
    found = {
        int(key[len(prefix) :]): value
        for key, value in run.items()
        if key.startswith(prefix) and key[len(prefix) :].isdigit() and value is not None
    }
    return {str(length): found[length] for length in sorted(found)}


def build(repo: Path, commit: str) -> dict[str, Any]:
    runs = []
    for name in SOURCE_FILES:
        for line in (repo / name).read_text().splitlines():
            run = json.loads(line)
            dataset = run["run_group"].split("___data-")[-1]
            if run.get("job_type") != "best_run_seed_exp" or dataset not in DATASETS:
                continue
            runs.append(
                {
                    "dataset": dataset,
                    "pe": PE_NAMES[run["cfg__model.position_encoding_type"]],
                    "seed": run["cfg__global_vars.seed"],
                    "iid": run["sum__pred/valid_acc_overall"],
                    "ood": run["sum__pred/test_acc_overall"],
                    "iid_buckets": buckets(run, "valid"),
                    "ood_buckets": buckets(run, "test"),
                    "steps": run["cfg__trainer.max_steps"],
                    "batch_size": run["cfg__trainer.target_batch_size"],
                    "lr": run["cfg__trainer.learning_rate"],
                    "source": f"{name}#{run['id']}",
                }
            )
    runs.sort(key=lambda r: (r["dataset"], r["pe"], r["seed"]))
    return {
        "source": {
            "repository": "https://github.com/McGill-NLP/length-generalization",
            "commit": commit,
            "files": list(SOURCE_FILES),
        },
        "datasets": DATASETS,
        "runs": runs,
    }


if __name__ == "__main__":
    repo, commit = Path(sys.argv[1]), sys.argv[2]
    data = build(repo, commit)
    RESULTS_FILE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(data['runs'])} runs to {RESULTS_FILE}")
