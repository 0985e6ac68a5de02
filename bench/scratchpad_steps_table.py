"""Where scratchpad runs first go wrong on unseen lengths: the tables docs/reproducing.md quotes, from the files
bench/scratchpad_errors.py writes with --unseen.

    python bench/scratchpad_steps_table.py           # print the tables
    python bench/scratchpad_steps_table.py --docs    # and write them into docs/reproducing.md

Reads every ``bench/results/scratchpad_steps_unseen*_cpu.json``. A part is a scenario at one seed, its five
runs; each row counts its wrong predictions by where their scratchpad first departs from the gold's
(:func:`probe.tasks.scratchpad.first_wrong_step`): nowhere (every step right, the conclusion missed), at the
opening (step 0), at a step a training length's gold also has, or past the most steps one has; and in which
component (:func:`probe.tasks.scratchpad.first_wrong_component`). The same counts per PE over every part follow.
Formats that copy the rest of the input (R) come first: their first step is already longer than any training
showed. Typed numbers drift as parts land; these are the files' own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, fill_block  # noqa: E402

from probe.models.registry import FIGURE_ORDER, PE_LABELS  # noqa: E402
from probe.studies.formats import task_key_of, task_label  # noqa: E402
from probe.studies.section6 import planned  # noqa: E402
from probe.tasks.scratchpad import components  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproducing.md"
BLOCK = "scratchpad-steps"
PATTERN = "scratchpad_steps_unseen*_cpu.json"
COLUMNS = ("wrong", "every step right", "at the opening", "within the training steps", "past them")


def read_runs(folder: Path = RESULTS) -> dict[tuple[str, str, int], dict]:
    """{(scenario, pe, seed): its row} over every file; a run measured in two files is one line and an exit."""
    runs: dict[tuple[str, str, int], dict] = {}
    for path in sorted(folder.glob(PATTERN)):
        for row in json.loads(path.read_text())["runs"]:
            run = Path(row["run"])
            key = (run.parent.parent.name, run.parent.name, int(run.name.removeprefix("seed")))
            if key in runs:
                sys.exit(f"{run} is measured twice (in {path.name} and another file): keep one")
            runs[key] = row
    return runs


def counts(row: dict) -> Counter:
    """One run's wrong predictions by where they first depart from the gold (the columns) and in which component."""
    off = row["wrong_first_step_off"]
    opening = off.get("0", 0)
    out = Counter(
        {
            "runs": 1,
            "examples": row["unseen"],
            "wrong": row["unseen"] - row["right"],
            "every step right": row["wrong_steps_right"],
            "at the opening": opening,
            "within the training steps": row["wrong_first_step_off_within_training_steps"] - opening,
            "at step 1": off.get("1", 0),
            "past them": row["wrong_first_step_off_past_training_steps"],
        }
    )
    out.update({f"component {c}": n for c, n in row["wrong_first_component_off"].items() if c != "opening"})
    return out


def parts(counted: dict[tuple[str, str, int], Counter]) -> dict[tuple[str, int], Counter]:
    """Per (scenario, seed): its runs' counts summed, with a scratchpad that copies the rest first, then in the
    study's planned order."""
    plan = list(planned())
    summed = _summed(counted, lambda scenario, pe, seed: (scenario, seed))

    def order(part: tuple[str, int]) -> tuple[bool, int, int]:
        return ("R" not in components(_format(part[0])), plan.index(part[0]), part[1])

    return {part: summed[part] for part in sorted(summed, key=order)}


def _summed(counted: dict[tuple[str, str, int], Counter], group: Callable[[str, str, int], Any]) -> dict[Any, Counter]:
    """The runs' counts summed per ``group(scenario, pe, seed)``."""
    out: dict[Any, Counter] = {}
    for key, n in counted.items():
        out.setdefault(group(*key), Counter()).update(n)
    return out


def _format(scenario: str) -> str:
    return planned()[scenario][0].config.task_options["scratchpad"]


def part_label(scenario: str, seed: int) -> str:
    """``sorting (single-token), I+C+O+R (1)``: the task as the Section 6 report names it, the format, the seed."""
    config = planned()[scenario][0].config
    return f"{task_label(task_key_of(config.task, config.task_options))}, {_format(scenario)} ({seed})"


def markdown(runs: dict[tuple[str, str, int], dict]) -> str:
    """The sentence of totals, the table per part, the table per PE."""
    counted = {key: counts(row) for key, row in runs.items()}
    rows, pes = parts(counted), _summed(counted, lambda scenario, pe, seed: pe)
    total = sum(rows.values(), Counter())
    examples = [n["examples"] // n["runs"] for n in rows.values()]
    lines = [
        f"Read on the {total['runs']} runs at hand ({len(rows)} parts, a scenario at one seed each, "
        f"{min(examples)}–{max(examples)} unseen-length examples a run), {total['past them']:,} of the "
        f"{total['wrong']:,} wrong predictions first depart from the gold past that step, "
        f"{total['at the opening']:,} before their first step (the opening, `Thinking step by step:`, miswritten), "
        f"{total['every step right']:,} not at all (every step right, the conclusion missed), and "
        f"{total['within the training steps']:,} at a step training's lengths also have:",
        "",
        "| part (seed) | " + " | ".join(COLUMNS) + " | component first wrong |",
        "|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for (scenario, seed), n in rows.items():
        components = sorted(
            ((k.removeprefix("component "), v) for k, v in n.items() if k.startswith("component ")),
            key=lambda item: -item[1],
        )
        cells = [f"{n[c]:,}" for c in COLUMNS]
        cells[3] += f" ({n['at step 1']:,} at step 1)"
        lines.append(
            f"| {part_label(scenario, seed)} | "
            + " | ".join(cells)
            + " | "
            + ", ".join(f"{c} {v}" for c, v in components)
            + " |"
        )
    lines += ["", "The same per PE, over every part:", "", "| PE | runs | " + " | ".join(COLUMNS) + " |"]
    lines.append("|---|---|" + "---|" * len(COLUMNS))
    for pe in (pe for pe in FIGURE_ORDER if pe in pes):
        lines.append(
            f"| {PE_LABELS[pe]} | {pes[pe]['runs']} | " + " | ".join(f"{pes[pe][c]:,}" for c in COLUMNS) + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", action="store_true", help="write the tables into docs/reproducing.md")
    args = parser.parse_args()
    text = markdown(read_runs())
    print(text)
    if args.docs:
        fill_block(DOCS, BLOCK, text)
        print(f"wrote the tables into {DOCS}")


if __name__ == "__main__":
    main()
