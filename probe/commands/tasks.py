"""`probe tasks`: list the tasks with their options and scratchpad formats, or show a task's examples.

``probe tasks`` lists; ``probe tasks show TASK`` prints examples of a split (source, target,
length bucket) exactly as a model sees them, or exports them as JSONL with ``--jsonl FILE|-``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from probe.commands.common import add_task_options, parse_options, print_json
from probe.errors import ProbeError

PARTS = ("train", "valid", "test")

SHOWN = 5
PRINTED_AT_MOST = 1_000  # rows of the table `probe tasks show` prints: a look at the task, not its data
EXPORTED_AT_MOST = 1_000_000  # --jsonl: ten times the paper's training set (D.1: 100K), a few seconds to write


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tasks",
        help="list the tasks, or show a task's examples",
        description="List the tasks (the paper's ten and any added to probe.tasks.TASKS) with their options and "
        "scratchpad formats (Section 3, Appendix D.1, Section 6), or show the examples of one part of a task "
        "(train, valid, test) with 'probe tasks show TASK'.",
    )
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="print or export examples of a task",
        description="Print examples of a task's split (source, target, length bucket, seen or unseen length), "
        "or export them as JSONL. --scratchpad takes none, full, empty, or components like I+C+O (see 'probe tasks').",
    )
    show.add_argument("task", metavar="TASK", help="task name (see 'probe tasks')")
    show.add_argument(
        "--part",
        default="train",
        help="which examples: train, valid (held-out IID) or test (default: train)",
    )
    show.add_argument(
        "--n",
        type=int,
        default=None,
        help=f"number of examples (default: {SHOWN} printed; "
        "with --jsonl the whole split, or the task's default size for generated tasks)",
    )
    show.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    add_task_options(show, "of the examples")
    show.add_argument(
        "--jsonl", metavar="FILE", default=None, help="write the examples as JSON lines to FILE ('-': stdout)"
    )
    show.add_argument(  # SUPPRESS: `probe tasks --json show TASK` keeps the --json given before show
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the examples shown as one JSON document"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "show":
        return show(args)
    return list_tasks(args.json)


def catalog() -> dict[str, Any]:
    from probe.tasks import TASKS, scratchpad
    from probe.tasks.base import ScratchpadTask

    return {
        "tasks": {
            name: {
                "summary": cls.summary,
                "length_bucket": cls.length_unit,
                "scratchpad": issubclass(cls, ScratchpadTask),
                "options": {
                    key: {
                        "default": option.default,
                        "shown": option.shown or shown(option.default),
                        "accepts": option.accepts,
                        "help": option.help,
                    }
                    for key, option in cls.OPTIONS.items()
                },
            }
            for name, cls in TASKS.items()
        },
        "scratchpad_formats": list(scratchpad.FORMATS),
        "scratchpad_components": scratchpad.COMPONENT_NAMES,
    }


def shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def list_tasks(as_json: bool) -> int:
    info = catalog()
    if as_json:
        print_json(info)
        return 0
    from rich.console import Console
    from rich.table import Table

    from probe.tasks.base import POSITIVE_INTEGER

    table = Table(title="Tasks (probe tasks show TASK [-o KEY=VALUE] prints examples)", show_lines=True)
    for column in ("task", "what", "λ counts", "options: default (accepted)"):
        table.add_column(column, overflow="fold")
    for name, task in info["tasks"].items():
        options = "\n".join(
            f"{key}: {option['shown']}" + ("" if option["accepts"] == POSITIVE_INTEGER else f" ({option['accepts']})")
            for key, option in task["options"].items()
            if key != "scratchpad"
        )
        if task["scratchpad"]:
            options += "\nscratchpad: none (formats below)"
        table.add_row(name, task["summary"], task["length_bucket"], options)
    console = Console()
    console.print(table)
    components = ", ".join(f"{key} = {name}" for key, name in info["scratchpad_components"].items())
    with_scratchpad = ", ".join(name for name, task in info["tasks"].items() if task["scratchpad"])
    console.print(f"Scratchpad formats ({with_scratchpad}; {components}; train_length defaults to 8 with one):")
    console.print("  " + ", ".join(info["scratchpad_formats"]) + "; none = no scratchpad", soft_wrap=True)
    return 0


def show(args: argparse.Namespace) -> int:
    from probe.tasks import Tokenizer, get

    options = parse_options(args.option, args.scratchpad)
    if options.get("split") in PARTS:  # --split once chose these here; it names the task's split everywhere
        raise ProbeError(
            f"--split names the task's split (length or paper), as in every command; for its "
            f"{options['split']} examples use --part {options['split']}"
        )
    if args.part not in PARTS:
        raise ProbeError(f"--part {args.part!r}: choose one of {', '.join(PARTS)}")
    _check_show(args)
    task = get(args.task, **options)
    n = args.n if args.n is not None or args.jsonl else SHOWN
    examples = task.examples(args.part, n=n, seed=args.seed)

    def record(ex) -> dict[str, Any]:
        return {
            "task": task.name,
            "part": args.part,
            "source": ex.source,
            "target": ex.target,
            "length": ex.length,
            "seen": task.is_seen(ex.length),
        }

    if args.jsonl:
        write_lines(args.jsonl, [json.dumps(record(ex)) for ex in examples])
        return 0
    tokenizer = Tokenizer.for_task(task)
    if getattr(args, "json", False):
        rows = [{**record(ex), "tokens": len(tokenizer.encode_example(ex)[0])} for ex in examples]
        print_json({"task_options": task.options, "seed": args.seed, "examples": rows})
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{task!r} · {args.part} · seed {args.seed}", show_lines=True)
    for column in ("λ", "seen", "tokens", "source", "target"):
        table.add_column(column, overflow="fold")
    for ex in examples:
        ids, _ = tokenizer.encode_example(ex)
        table.add_row(str(ex.length), "yes" if task.is_seen(ex.length) else "no", str(len(ids)), ex.source, ex.target)
    console = Console()
    console.print(table)
    console.print(
        f"λ = {task.length_unit}; seen lengths: λ <= {task.train_length}; vocabulary: {len(tokenizer)} tokens "
        "(with <bos>, <pad>, <eos>, <sep>); tokens = <bos> source <sep> target <eos>"
    )
    return 0


def _check_show(args: argparse.Namespace) -> None:
    """``--n``, ``--seed`` and ``--jsonl`` checked before an example is made: a count the command can make in
    seconds (the examples are held in memory, then printed or written), and an export that never replaces a file
    of another kind (a run's config.json) nor writes into a folder's name."""
    from pathlib import Path

    from probe.commands.common import check_seeds

    check_seeds(args.seed)
    if args.jsonl and getattr(args, "json", False):
        raise ProbeError("--json prints the examples as one document, --jsonl writes them a line each: give one")
    if args.n is not None:
        most, why = (
            (EXPORTED_AT_MOST, "ten times the paper's training set")
            if args.jsonl
            else (PRINTED_AT_MOST, "a table to read; export more with --jsonl FILE")
        )
        if not 1 <= args.n <= most:
            raise ProbeError(f"--n must be from 1 to {most:,} ({why}), got {args.n}")
    if args.jsonl in (None, "-"):
        return
    path = Path(args.jsonl)
    if path.is_dir():
        raise ProbeError(f"--jsonl {args.jsonl} is a folder; give a file name (e.g. {path / 'examples.jsonl'})")
    if path.exists() and (path.parent / "config.json").is_file():  # a run's metrics.jsonl is finished work too
        raise ProbeError(f"--jsonl {args.jsonl} is a file of a run folder; give a new file name outside it")
    if path.exists() and path.suffix != ".jsonl":
        raise ProbeError(
            f"--jsonl {args.jsonl} exists and is no .jsonl file; probe tasks show replaces only a .jsonl file: "
            "give a new file name, or one ending in .jsonl"
        )


def write_lines(path: str, lines: list[str]) -> None:
    """Writes ``lines`` to ``path`` atomically (``-``: stdout)."""
    text = "".join(line + "\n" for line in lines)
    if path == "-":
        sys.stdout.write(text)
        return
    from probe.atomic import atomic_write_text

    atomic_write_text(path, text, make_parents=False)
    print(f"wrote {len(lines)} examples to {path}", file=sys.stderr)
