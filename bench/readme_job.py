"""The README's first command as a newcomer runs it: a fresh clone of this repository's HEAD, the "Start here"
block run as written in bash, timed in two parts (the set-up, then `probe train`), with each run's training
seconds and IID and OOD exact match as the main job wrote them.

    python bench/readme_job.py            # bench/results/readme_job_cpu.json
    python bench/readme_job.py --docs     # and the timing sentence of the README and docs/getting-started.md

The clone is of HEAD, so commit first. The box is shared: the JSON keeps the load average before and after,
and the sentence names it, so a time measured beside other work reads as such.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fill_block, header, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "getting-started.md")
MAIN_JOB = "probe train"
WHAT = "the README's set-up and main job from a fresh clone, as written"


def start_here(readme: str) -> tuple[str, str]:
    """(set-up, main job) of the README's first ``bash`` block: the one line a newcomer pastes, cut before its
    ``probe train``."""
    block = re.search(r"```bash\n(.*?)\n```", readme, re.S)
    if block is None or f"&& {MAIN_JOB}" not in block.group(1):
        sys.exit(f"the README's first bash block does not end in `{MAIN_JOB}`")
    setup, _, rest = block.group(1).strip().rpartition(f"&& {MAIN_JOB}")
    return setup.strip(), (MAIN_JOB + rest).strip()


def timed(command: str, cwd: Path, log: Path) -> tuple[float, int]:
    """(wall seconds, exit status) of ``command`` run by bash in ``cwd``, its output appended to ``log``."""
    start = time.perf_counter()
    with log.open("a") as out:
        status = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    return time.perf_counter() - start, status


def runs_of(checkpoints: Path) -> list[dict[str, Any]]:
    """Each run the main job wrote: PE, seed, training seconds (as its config records them), IID and OOD."""
    from probe.analysis.eval_report import read_eval
    from probe.models.checkpoint import read_checkpoint_config

    rows = []
    for config_file in sorted(checkpoints.glob("*/*/seed*/config.json")):
        folder = config_file.parent
        config, report = read_checkpoint_config(folder), read_eval(folder)
        rows.append(
            {
                "run": str(folder.relative_to(checkpoints)),
                "train_seconds": config.get("metrics", {}).get("train_seconds"),
                "iid": None if report is None else report.iid_accuracy,
                "ood": None if report is None else report.ood_accuracy,
            }
        )
    return rows


def sentence(result: dict[str, Any]) -> str:
    """The pages' line: what the command took here, and beside what load."""
    cpu = result["machine"]["cpu"]
    load = result["load_average_1_5_15min"]["before"][0]
    training = sum(r["train_seconds"] or 0 for r in result["runs"])
    return (
        f"Measured from a fresh clone as written (`python bench/readme_job.py`, {result['date']}, a "
        f"{result['machine']['cpu_count']}-core {cpu}, load average {load:.1f} before it): set-up "
        f"{result['setup_seconds']:.0f} s, `probe train` {result['train_seconds']:.0f} s ("
        f"{len(result['runs'])} runs, {training:,.0f} s of training between them, two side by side, then "
        "scoring).\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", action="store_true", help="write the timing sentence into the pages")
    parser.add_argument("--keep", type=Path, help="clone into this new folder and keep it (default: a temporary one)")
    args = parser.parse_args()

    setup, job = start_here((ROOT / "README.md").read_text())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.keep or Path(scratch) / "probe"
        log = Path(scratch) / "readme_job.log"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
        setup_seconds, setup_status = timed(setup, where, log)
        train_seconds, train_status = (None, None)
        if setup_status == 0:
            train_seconds, train_status = timed(f". .venv/bin/activate && {job}", where, log)
        tail = log.read_text().splitlines()[-15:]
        result = {
            **header("readme_job", WHAT, "cpu", load_before),
            "date": time.strftime("%Y-%m-%d"),
            "commit": commit,
            "setup": setup,
            "job": job,
            "setup_seconds": setup_seconds,
            "setup_status": setup_status,
            "train_seconds": train_seconds,
            "train_status": train_status,
            "runs": runs_of(where / "checkpoints"),
            "output_tail": tail,
        }
    path = write_json("readme_job", "cpu", result)
    print(f"wrote {path}")
    if setup_status or train_status:
        sys.exit(f"the README's command failed (set-up {setup_status}, main job {train_status}); see {path}")
    line = sentence(result)
    print(line, end="")
    if args.docs:
        for page in PAGES:
            fill_block(page, "readme-job", line)


if __name__ == "__main__":
    main()
