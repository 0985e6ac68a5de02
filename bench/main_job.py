"""What the main job (`probe train` with no arguments) gives: every paper PE at three seeds, IID and OOD exact
match with the seeds' spread, and whether the PEs stand apart on unseen lengths by more than that spread.

    python bench/main_job.py --checkpoints checkpoints --docs

Reads (evaluating where missing) the main job's runs (``probe.presets.MAIN_JOB``) at ``--seeds`` under
``--checkpoints``: train the extra seeds with ``probe train --seed 1 --seed 2``. Writes
``bench/results/main_job_cpu.json``; ``--docs`` writes the table into docs/getting-started.md and the
README, so the numbers a newcomer is told to expect are the measured ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fill_block, machine, write_json  # noqa: E402

from probe.analysis.eval_report import read_eval  # noqa: E402
from probe.analysis.evaluation import evaluate_run  # noqa: E402
from probe.errors import ProbeError  # noqa: E402
from probe.models.checkpoint import read_checkpoint_config  # noqa: E402
from probe.models.registry import FIGURE_ORDER, PAPER_PES, PE_LABELS  # noqa: E402
from probe.presets import MAIN_JOB  # noqa: E402
from probe.reference import dataset_for, paper_summary  # noqa: E402
from probe.runs.folders import Run, run_dir  # noqa: E402
from probe.tasks import get as get_task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "docs" / "getting-started.md", ROOT / "README.md")


def measure(root: Path, seeds: list[int]) -> dict[str, dict]:
    """Per PE: its runs' IID and OOD exact match per seed, means and ranges."""
    out = {}
    for pe in [pe for pe in FIGURE_ORDER if pe in PAPER_PES]:
        rows = []
        for seed in seeds:
            path = run_dir(root, MAIN_JOB["task"], pe, seed, MAIN_JOB["options"])
            report = read_eval(path) or evaluate_run(Run(path, read_checkpoint_config(path)))
            config = read_checkpoint_config(path)
            rows.append(
                {
                    "seed": seed,
                    "iid": report.iid_accuracy,
                    "ood": report.ood_accuracy,
                    "train_seconds": config.get("metrics", {}).get("train_seconds"),
                }
            )
        iid, ood = [r["iid"] for r in rows], [r["ood"] for r in rows]
        out[pe] = {
            "runs": rows,
            "iid": {"mean": statistics.fmean(iid), "min": min(iid), "max": max(iid)},
            "ood": {"mean": statistics.fmean(ood), "min": min(ood), "max": max(ood)},
        }
    return out


def apart(pes: dict[str, dict]) -> list[tuple[str, str]]:
    """Pairs (a, b) whose OOD ranges do not overlap, a above b: every seed of a above every seed of b."""
    return [(a, b) for a in pes for b in pes if a != b and pes[a]["ood"]["min"] > pes[b]["ood"]["max"]]


def table(pes: dict[str, dict], seeds: list[int], cpu: str) -> str:
    """The Markdown the pages quote; ``cpu``: the processor whose runs they are (two CPU models train a seed
    otherwise)."""
    task = get_task(MAIN_JOB["task"], **MAIN_JOB["options"])
    paper = paper_summary(dataset_for(MAIN_JOB["task"], task.options)) or {}

    def span(entry: dict) -> str:
        return f"{100 * entry['mean']:.1f} [{100 * entry['min']:.1f}, {100 * entry['max']:.1f}]"

    lines = [
        f"| PE | IID, seen lengths (%) | OOD, unseen lengths (%) | the paper's OOD ({MAIN_JOB['task']}, `base`) |",
        "|---|---|---|---|",
    ]
    for pe, entry in pes.items():
        theirs = paper.get(pe, {}).get("ood")
        lines.append(
            f"| {PE_LABELS.get(pe, pe)} | {span(entry['iid'])} | {span(entry['ood'])} | "
            + ("–" if theirs is None else f"{100 * theirs:.1f}")
            + " |"
        )
    pairs = apart(pes)
    above = sorted({a for a, _ in pairs}, key=list(pes).index)
    lines += [
        "",
        f"Mean [lowest, highest] over seeds {', '.join(map(str, seeds))}, measured by `python bench/main_job.py` "
        f"(`probe eval`'s numbers) on an {cpu}. Apart beyond the seeds' spread: "
        + "; ".join(
            f"{PE_LABELS.get(a, a)} above {', '.join(PE_LABELS.get(b, b) for x, b in pairs if x == a)}" for a in above
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", default="checkpoints", help="where the main job's runs are")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--docs", action="store_true", help="write the table into the getting-started page and README")
    args = parser.parse_args()
    try:
        pes = measure(Path(args.checkpoints), args.seeds)
    except ProbeError as error:  # a run not trained yet: one line saying which
        sys.exit(f"bench/main_job.py: {error}")
    here = machine("cpu")  # the runs are read where they were trained: this machine's checkpoints
    result = {
        "benchmark": "main_job",
        "main_job": MAIN_JOB,
        "seeds": args.seeds,
        "machine": here,
        "pes": pes,
        "apart": apart(pes),
    }
    print(f"wrote {write_json('main_job', 'cpu', result)}")
    text = table(pes, args.seeds, str(here["cpu"]))
    print(text)
    if args.docs:
        for page in PAGES:
            fill_block(page, "main-job", text)
            print(f"wrote the table into {page}")


if __name__ == "__main__":
    main()
