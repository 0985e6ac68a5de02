"""Flags and output shared by several commands (one spelling everywhere)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError
from probe.presets import CONTEXTS

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from probe.analysis.report import Report
    from probe.corpus import CorpusSpec
    from probe.models.interventions import Intervention


def add_checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoints", metavar="DIR", default="checkpoints", help="root folder of the runs (default: checkpoints/)"
    )


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda if available)")


def add_dtype(parser: argparse.ArgumentParser) -> None:
    from probe.device import DTYPES

    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help="the models' weights and forward passes in this precision (default: as saved, float32); "
        "bfloat16 halves their memory: a 1B model on a CPU",
    )


def add_intervention(parser: argparse.ArgumentParser) -> None:
    """``--intervene SPEC``: every model read under an intervention on its attention (`probe extrapolate`'s)."""
    parser.add_argument(
        "--intervene",
        metavar="SPEC",
        help="read every model under this change to its attention: temperature=T, log-length[=L], "
        "head-temperature=FILE, window=W[+sinks=K], cap[=D], scaling=yarn+factor=S (terms joined by +; "
        "outputs go to <folder>+<SPEC>/)",
    )


def intervention_of(args: argparse.Namespace) -> Intervention:
    """The :class:`~probe.models.interventions.Intervention` ``--intervene`` names (none if not given)."""
    return read_intervention(getattr(args, "intervene", None))


def read_intervention(spec: str | None) -> Intervention:
    """:func:`~probe.models.interventions.parse_intervention` of a flag's ``spec``; a ``head-temperature=PATH``
    that names a folder, or a file that cannot be read, is one line saying so (not a hint about outputs)."""
    from probe.models.interventions import parse_intervention

    try:
        return parse_intervention(spec)
    except IsADirectoryError as error:
        raise ProbeError(
            f"head-temperature: {error.filename} is a folder, not a file; give the JSON file of temperatures "
            '({"temperatures": [[t per head] per layer]})'
        ) from None
    except OSError as error:
        raise ProbeError(f"head-temperature: cannot read {error.filename}: {error.strerror or error}") from None


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")


def add_reading_outputs(parser: argparse.ArgumentParser, folder: str, batch_size: int, beside: bool = True) -> None:
    """The flags every analysis that reads models ends with: batch size, where its files go (``folder/`` in the
    runs' task folder, or with ``beside`` next to the run folders given), the runs, device, dtype, an
    intervention, JSON; and its handler's default."""
    parser.add_argument("--batch-size", type=int, default=batch_size)
    where = f"{folder}/ in the runs' task folder" + (", or beside the run folders given" if beside else "")
    parser.add_argument("--out", metavar="DIR", help=f"output folder (default: {where})")
    add_checkpoints(parser)
    add_device(parser)
    add_dtype(parser)
    add_intervention(parser)
    add_json(parser)


def print_json(data: Any) -> None:
    """``--json``'s one document on stdout, strict JSON (:func:`probe.atomic.json_text`: no NaN tokens)."""
    from probe.atomic import json_text

    sys.stdout.write(json_text(data) + "\n")


def scoring_line(status: Any, what: str) -> Callable[[str, int, int], None]:
    """An evaluation's progress (:class:`~probe.subjects.settings.ReadSettings`' ``progress``) on a rich
    ``status``: ``what``, then how many examples are scored of how many; a scratchpad's, decoded on to the
    authors' budget, can take minutes."""

    def hear(step: str, done: int, total: int) -> None:
        last = "" if step == "scoring" else f", {step}"
        status.update(f"{what}{last}: {done:,} of {total:,} examples")

    return hear


def bar_columns(width: int, *extra: Any) -> tuple[Any, ...]:
    """A progress line's columns: what (``width`` wide), the bar, how far, ``extra`` (a loss, a speed),
    elapsed and time left."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return (
        TextColumn(f"{{task.description:<{width}}}"),
        BarColumn(),
        MofNCompleteColumn(),
        *extra,
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )


@contextlib.contextmanager
def progress_bar(out: Console, what: str, width: int = 30) -> Iterator[Callable[[str, int, int], None]]:
    """A transient progress bar (what, how far, elapsed, time left) for a library call's ``progress``
    callback; it appears at the first call, once the inputs are found and checked, so an error stays one
    clean line; once the work is done, one line says how long it took."""
    from rich.progress import Progress

    progress = Progress(*bar_columns(width), console=out, transient=True)
    bar = progress.add_task(what, total=None)

    drawn: list[bool] = []

    def on_progress(description: str, done: int, total: int) -> None:
        progress.start()
        progress.update(bar, description=description, completed=done, total=total)
        drawn.append(True)

    start = time.monotonic()
    try:
        yield on_progress
    finally:
        if progress.live.is_started:  # a bar never drawn leaves no blank line before an error
            progress.stop()
    if drawn:  # the work went through: how long it took
        out.print(f"[dim]{what}: {elapsed(time.monotonic() - start)}[/dim]")


def elapsed(seconds: float) -> str:
    """``42 s``, ``3 min 7 s``, ``1 h 2 min``."""
    minutes, whole = divmod(round(seconds), 60)
    if not minutes:
        return f"{whole} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {whole} s"


def write_report(report: Report, args: argparse.Namespace, out: Console) -> list[str]:
    """Write ``report`` (any :class:`~probe.analysis.report.Report`: it writes itself) to ``--out`` or the folder
    its name says beside its runs, say where, and print its JSON with the files under ``--json``; the paths."""
    from pathlib import Path

    from probe.presets import HF_CONTEXT

    if report.context is not None:
        hf = f"the smaller of their n_ctx and {HF_CONTEXT}, or -o context=N"
        if report.name == "extrapolation":  # probe extrapolate reads an hf: model at its n_ctx, T given by --context
            hf = "their n_ctx; or --context N"
        out.print(f"context T = {report.context} tokens (code models: their training context; hf: models: {hf})")
    folder = report.name
    intervention = intervention_of(args)
    if not intervention.is_identity:
        folder += "+" + "".join(c if c.isalnum() or c in "-_.=+" else "-" for c in intervention.name)
    files = report.write(Path(args.out) if args.out else report.folder / folder)
    out.print("wrote: " + ", ".join(files))
    if args.json:
        print_json({**report.to_json(), "files": files})
    return files


def check_out(args: argparse.Namespace, folder: str | Path, command: str) -> None:
    """One line before any work when the outputs cannot be written: ``--out`` if given, else ``folder`` (where
    they go by default, e.g. beside a colleague's read-only runs), naming --out."""
    target = args.out or folder
    problem = folder_problem(target)
    if problem:
        hint = "choose another --out" if args.out else "pass --out DIR to write them elsewhere"
        raise ProbeError(f"{problem}, and probe {command} writes its results there; nothing was computed: {hint}")


def folder_problem(folder: str | Path) -> str | None:
    """Why files cannot be written into ``folder`` (``afile is a file, not a folder``, ``X is read-only here``),
    or None where they can: where it does not exist yet, the nearest path above it that does is asked."""
    from pathlib import Path

    from probe.atomic import writable

    if writable(folder):
        return None
    path = Path(folder)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{folder} is a file, not a folder" if existing == path else f"{existing} is a file, not a folder"
    return f"{folder} is read-only here"


def check_at_least(*checks: tuple[str, float | None, float]) -> None:
    """One line for the first ``(flag, value, least)`` whose value (None: not given) is under its least:
    ``--batch-size must be at least 1, got 0``."""
    for flag, value, least in checks:
        if value is not None and value < least:
            raise ProbeError(f"{flag} must be at least {least}, got {value}")


def check_seeds(seeds: int | Sequence[int] | None, flag: str = "--seed") -> None:
    """A seed names a run folder (``seed3``) and seeds the generators: a negative one is one line, before any work
    (it would write ``seed-1`` or stop deep in numpy)."""
    for seed in [seeds] if isinstance(seeds, int) else seeds or ():
        if seed < 0:
            raise ProbeError(f"{flag} must not be negative, got {seed}")


def check_pe_options(pairs: Sequence[str]) -> None:
    """``-p KEY=VALUE`` whose key no positional encoding has (a typo) is one line naming the PEs' options, as `probe
    eval` refuses options no run takes: never ignored silently."""
    if not pairs:
        return
    from probe.models.registry import PE_KINDS, pe_class

    known = {name for kind in PE_KINDS for name in pe_class(kind).options}
    unknown = sorted(set(parse_options(list(pairs), None)) - known)
    if unknown:
        raise ProbeError(
            f"no positional encoding has the option(s) {', '.join(unknown)} (-p); see `probe pes` for each PE's options"
        )


def check_out_beside(
    args: argparse.Namespace, names: Sequence[str], options: dict[str, Any] | None, stem: str, command: str
) -> None:
    """:func:`check_out` for a report that goes beside the runs ``names`` (their home, then ``stem``) unless
    ``--out`` is given: one line before any work when it cannot be written there."""
    if args.out:
        check_out(args, args.out, command)
        return
    from probe.subjects.resolve import home, resolve_all

    check_out(args, home(resolve_all(list(names)), args.checkpoints, options) / stem, command)


LOG_EVERY = 30.0  # seconds between a status's lines in a log


class LogStatus:
    """A status for a file or pipe, where a terminal's spinner would write nothing: its message as a line when
    it begins, then the latest update at most every ``every`` seconds, each with the time since it began, so a
    long command's log shows it going (an evaluation, a study's training) rather than nothing until the end."""

    def __init__(self, out: Console, message: str, every: float | None = None) -> None:
        self.out, self.message, self.every = out, message, LOG_EVERY if every is None else every
        self.began = self.printed = time.monotonic()

    def __enter__(self) -> LogStatus:
        self._line()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, status: str | None = None, **_: Any) -> None:
        """The spinner's ``update``: a new message, printed once ``every`` seconds have passed since the last."""
        if status is None:
            return
        self.message = str(status)
        if time.monotonic() - self.printed >= self.every:
            self._line()

    def _line(self) -> None:
        self.printed = time.monotonic()
        elapsed = int(self.printed - self.began)
        line = f"[{elapsed // 60}:{elapsed % 60:02d}] {self.message}"
        self.out.print(line, markup=False, highlight=False, soft_wrap=True)  # one line of the log, however long


def console(stderr: bool = False) -> Console:
    """A rich console; one writing to a file or pipe of no stated width (``COLUMNS``) gets 120 columns (not
    rich's 80) for its tables and never breaks a line of text (a path or a run name stays whole, to be read
    or pasted back), and its ``status`` writes lines (:class:`LogStatus`)."""
    import os

    from rich.console import Console

    class _Console(Console):
        def status(self, status, **kwargs):  # a spinner on a terminal, lines in a log
            return super().status(status, **kwargs) if self.is_terminal else LogStatus(self, str(status))

    out = _Console(stderr=stderr)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width, out.soft_wrap = 120, True
    return out


def say_skipping(out: Console) -> Callable[[Path, str], None]:
    """Says a run left out as broken (unreadable, another task's in this folder): never left out silently."""

    def say(path: Path, why: str) -> None:
        out.print(f"[yellow]skipping {path}: {why}[/yellow]")

    return say


def add_task_options(
    parser: argparse.ArgumentParser, what: str = "of the runs (as given to `probe train`; `probe tasks` lists them)"
) -> None:
    """``--scratchpad FORMAT`` and repeatable ``-o KEY=VALUE``: the options that name a task's runs."""
    parser.add_argument("--scratchpad", metavar="FORMAT", help=f"scratchpad format {what}")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"task option {what}, e.g. -o variant=count",
    )
    parser.add_argument(
        "--split",
        action=_SplitOption,
        dest="option",
        metavar="NAME",
        help="the task's split: length (Section 3's, the default) or paper (the authors' released "
        "data: SCAN, copy, reverse); the same as -o split=NAME",
    )


def add_corpus_options(parser: argparse.ArgumentParser) -> None:
    """``--corpus``, ``--context``, ``--vocab-size``, ``--heldout``: which code corpus, split and context name
    a pretraining task folder (``code+context=256``), the same flags for `probe pretrain` and what reads its runs."""
    parser.add_argument(
        "--corpus",
        default="stdlib",
        metavar="DIR",
        help="stdlib (this Python's standard library, the default), packages (and the installed "
        "packages) or a folder of source files",
    )
    parser.add_argument(
        "--context",
        type=int,
        help=f"training context in tokens (default: the preset's, {CONTEXTS['tiny']} for tiny; the paper: 1024)",
    )
    parser.add_argument("--vocab-size", type=int, default=2048, help="byte-level BPE vocabulary (default 2048)")
    parser.add_argument("--heldout", type=float, default=0.1, help="fraction of files held out (default 0.1)")


def corpus_spec(args: argparse.Namespace, context: int) -> CorpusSpec:
    """The :class:`probe.corpus.CorpusSpec` of :func:`add_corpus_options`' flags (``context`` if none given)."""
    from probe.corpus import CorpusSpec

    check_at_least(("--context", args.context, 2))  # 0 is no context, not "the default"
    return CorpusSpec(
        corpus=args.corpus,
        heldout=args.heldout,
        vocab_size=args.vocab_size,
        context=context if args.context is None else args.context,
    )


def pe_kind(name: str) -> str:
    """``--pe``'s reading of a name: a PE's registry name, or the label tables print (``Rotary``, ``T5's Relative
    Bias``), in any case; anything else is one line naming the PEs, with the closest if one is close. The
    registry (and torch) is imported only when a name is given, so ``--help`` stays instant."""
    from probe.errors import closest
    from probe.models.registry import PE_KINDS, PE_LABELS

    by_folded = {kind.casefold(): kind for kind in PE_KINDS} | {
        label.casefold(): kind for kind, label in PE_LABELS.items()
    }
    if name.casefold() in by_folded:
        return by_folded[name.casefold()]
    close = closest(name, list(by_folded))
    hint = f"; did you mean {by_folded[close]!r}?" if close else ""
    raise ProbeError(
        f"unknown positional encoding {name!r}{hint} (choose one of {', '.join(PE_KINDS)}; see `probe pes`)"
    )


def pe_or_run(name: str) -> str:
    """A model named on the command line: a run folder or ``hf:`` name as given, else a PE name whose PE part
    is read by :func:`pe_kind` (``Rotary+base=500`` is ``rotary+base=500``); a name that is neither is one line
    with the closest PE."""
    from pathlib import Path

    if name.startswith("hf:") or Path(name).exists():
        return name
    pe, plus, options = name.partition("+")
    try:
        return pe_kind(pe) + plus + options
    except ProbeError as error:
        raise ProbeError(f"{name!r} is neither a run folder nor a PE: {error}") from None


def pe_kinds(names: Sequence[str] | None) -> list[str] | None:
    """``--pe``'s names read by :func:`pe_kind` (None stays None: the command's default set)."""
    return None if names is None else [pe_kind(name) for name in names]


def add_pe_options(parser: argparse.ArgumentParser, what: str) -> None:
    """Repeatable ``-p KEY=VALUE``: an option of the positional encoding (see `probe pes`)."""
    parser.add_argument(
        "-p",
        "--pe-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"option of the positional encoding {what}, e.g. -p base=500 (see `probe pes`)",
    )


class _SplitOption(argparse.Action):
    """``--split NAME`` is ``-o split=NAME``: one list of task options, whichever way they came."""

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), f"split={value}"])


def task_options(task: str | None, pairs: list[str], scratchpad: str | None) -> tuple[str, dict[str, Any]]:
    """The task a command reads and its options (``-o`` flags, ``--scratchpad``), checked: the task named, else
    the main job's with its options, the flags over them (:func:`probe.presets.main_task`)."""
    from probe.corpus import CODE_TASK
    from probe.presets import main_task

    task, options = main_task(task, parse_options(pairs, scratchpad))
    if task != CODE_TASK:
        from probe.tasks import resolved_options

        options = resolved_options(task, options)  # an unknown task, option or value: one line
    return task, options


def parse_options(pairs: list[str], scratchpad: str | None) -> dict[str, Any]:
    """``KEY=VALUE`` strings to options; values are read as JSON where they parse (8, true), else as text.
    ``--scratchpad`` is ``-o scratchpad=``: given both ways, they must agree."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ProbeError(f"option {pair!r} is not KEY=VALUE (e.g. variant=count)")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    if scratchpad is not None:
        if options.get("scratchpad", scratchpad) != scratchpad:
            raise ProbeError(
                f"--scratchpad {scratchpad} and -o scratchpad={options['scratchpad']} disagree; give the format once"
            )
        options["scratchpad"] = scratchpad
    return options
