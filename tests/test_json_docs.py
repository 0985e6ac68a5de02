"""docs/json.md lists the keys of every command's ``--json`` document: each command runs here in-process, on the
session's tiny runs (or a few seconds of training of its own), and prints exactly the keys the page lists, at the
top level and in each record the page has a table for. A key the code adds, renames or drops fails here until the
page says so.

The page's format, as parsed here: a section per document, headed ``## `probe eval --json` `` (or ``## `eval.json` ``
for the per-run file); in it "Top level: an object" or "a list"; each table (``| key | type | meaning |``) follows a
paragraph naming what it lists, "keys of `runs[]`" (``runs[]``: each object of the list ``runs``; ``tasks{}``: each
value of the object ``tasks``; ``[]``: each object of a document that is a list), or the "Top level" paragraph
itself; a row whose meaning begins with "Only" is a key printed only in that case.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import tiny_model

from probe.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "json.md"
TASK = ["--task", "reverse", "-o", "train_length=4"]
TINY = [arg for key, value in tiny_model(1).items() for arg in ("-m", f"{key}={value}")]
AUTHORS = ROOT / "tests" / "fixtures" / "authors_t5" / "none"  # a released model's layout, tiny and random
SECTION6 = ROOT / "bench" / "results" / "section6"  # the Section 6 study's committed summaries

STOOD_IN = {
    "probe reproduce --json": "the study's training: its runs are the committed Section 6 summaries, reported as a "
    "sitting whose training is done (hours of training otherwise)",
    "probe reproduce --dry-run --json": "the measured training speed: a fixed price per run (measuring it trains "
    "each kind of run for a few steps, about 30 s here)",
}
"""What the test stands in for where the real thing costs minutes; the command builds its document itself."""

NOT_EXERCISED: dict[tuple[str, str], tuple[set[str], str]] = {
    ("probe sweep --json", "manifest.runs[]"): (
        {
            "status",
            "steps",
            "train_seconds",
            "final_loss",
            "steps_per_second",
            "eval_seconds",
            "iid_accuracy",
            "ood_accuracy",
            "heldout_loss",
            "heldout_perplexity",
            "heldout_tokens",
            "history",
            "held_by",
        },
        "recorded by an attempt on Ray: the sweep here finds its runs done and starts nothing, so no attempt "
        "records them",
    ),
}
"""Optional keys the invocations here never print, and why: they are checked only never to appear undocumented."""


# -- the page ----------------------------------------------------------------------------------------------------
@dataclass
class Section:
    """One document the page describes: its shape, and per table (by path) each key and whether it is optional."""

    name: str
    shape: str | None = None
    tables: dict[str, dict[str, bool]] = field(default_factory=dict)


HEADING = re.compile(r"^## `(.+)`\s*$")
KEYS_OF = re.compile(r"keys of `([^`]*)`", re.IGNORECASE)
TOP_LEVEL = re.compile(r"Top level: an? (object|list)")
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|([^|]*)\|([^|]*)\|\s*$")


def paragraphs(lines: list[str]) -> list[list[str]]:
    """The lines of a section, split into blocks at blank lines."""
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def table_rows(block: list[str]) -> dict[str, bool]:
    """A table's keys, each optional or not; every row names one key in backticks and has a type and a meaning."""
    header, rule, *rows = block
    assert header.replace(" ", "") == "|key|type|meaning|" and set(rule) <= set("|-"), block[:2]
    keys = {}
    for row in rows:
        match = ROW.match(row)
        assert match and match[2].strip() and match[3].strip(), f"not a key row: {row}"
        assert match[1] not in keys, f"{match[1]} listed twice"
        keys[match[1]] = match[3].strip().startswith("Only")
    return keys


def read_section(name: str, lines: list[str]) -> Section:
    section = Section(name)
    before = ""
    for block in paragraphs(lines):
        text = " ".join(block)
        shape = TOP_LEVEL.search(text)
        if shape:
            section.shape = shape[1]
        if not block[0].startswith("|"):
            before = text
            continue
        named = KEYS_OF.search(before)
        assert named or TOP_LEVEL.search(before), f"{name}: a table follows no 'keys of `...`': {before!r}"
        path = named[1] if named else ""
        assert path not in section.tables, f"{name}: two tables of {path!r}"
        section.tables[path] = table_rows(block)
    assert section.shape and section.tables, f"{name}: no 'Top level' shape or no table"
    return section


def read_page(text: str) -> dict[str, Section]:
    """Every ``## `...` `` section of the page; other ``##`` headings end one."""
    sections, name, lines = {}, None, []
    for line in [*text.splitlines(), "## end"]:
        if line.startswith("## "):
            if name is not None:
                sections[name] = read_section(name, lines)
            heading = HEADING.match(line)
            name, lines = (heading[1] if heading else None), []
        elif name is not None:
            lines.append(line)
    return sections


SECTIONS = read_page(PAGE.read_text())


# -- the documents --------------------------------------------------------------------------------------------------
def _refuse(token: str) -> None:
    raise ValueError(f"not strict JSON: {token}")


def printed(argv: list[str], status: int = 0) -> Any:
    """What ``probe ARGV`` prints on stdout, read as strict JSON; the exit status checked."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == status, argv
    return json.loads(out.getvalue(), parse_constant=_refuse)


class Commands:
    """Each documented command run once, its documents kept (a section may have several: its cases), the inputs
    they share made once: tiny runs of reverse (the session's ``checkpoints``), a code model, a sweep's copy."""

    def __init__(self, checkpoints: Path, corpus: Path, tmp: Path):
        self.tmp, self.corpus = tmp, corpus
        self.checkpoints = checkpoints
        folder = checkpoints / "reverse+train_length=4"
        self.runs = [str(folder / pe / "seed0") for pe in ("nope", "t5")]  # each with its eval.json
        self.code = ["--corpus", str(corpus), "--context", "16", "--vocab-size", "300", "--heldout", "0.25"]

    def cpu(self, *argv: str, status: int = 0) -> Any:
        return printed([*argv, "--device", "cpu", "--json"], status)

    def out(self, name: str) -> list[str]:
        return ["--out", str(self.tmp / name)]

    @functools.cached_property
    def trained(self) -> list[Any]:
        """A run trained under the authors' protocol (checkpoint selection: its evaluation has ``selected_step``),
        and two whose loss blows up (failed records, exit status 1)."""
        train = ["train", *TASK, "--batch-size", "8", *TINY, "--no-eval", "--jobs", "1"]
        selected = ["--protocol", "authors", "--eval-every", "1", "--checkpoints", str(self.tmp / "train")]
        failing = ["--pe", "nope", "--pe", "t5", "--lr", "1e30", "--checkpoints", str(self.tmp / "failed")]
        return [
            self.cpu(*train, "--pe", "nope", "--steps", "2", *selected),
            self.cpu(*train, "--steps", "2", *failing, status=1),
        ]

    @functools.cached_property
    def evaluated(self) -> list[Any]:
        """The session's runs, with --show; and the selected run under an intervention."""
        _ = self.trained  # its run is evaluated here
        selected = str(self.tmp / "train" / "reverse+train_length=4" / "nope" / "seed0")
        small = ["--n", "4", "--valid", "4"]
        return [
            self.cpu("eval", *self.runs, *small, *self.out("eval/shown"), "--show", "1"),
            self.cpu("eval", selected, *small, *self.out("eval/selected"), "--intervene", "temperature=2"),
        ]

    def eval_files(self) -> list[Any]:
        """Every eval*.json `probe eval` wrote above, the session's runs' own, and the runs it printed."""
        files = [*(self.tmp / "eval").rglob("eval*.json"), *(Path(run) / "eval.json" for run in self.runs)]
        return [json.loads(path.read_text()) for path in files] + [r for doc in self.evaluated for r in doc["runs"]]

    @functools.cached_property
    def pretrained(self) -> list[Any]:
        """A code model trained 2 steps (the first document's run is read by the commands after), and two whose
        loss blows up."""
        argv = ["pretrain", *self.code, "--steps", "2", "--batch-size", "4", "--jobs", "1", *TINY]
        failing = ["--pe", "nope", "--pe", "alibi", "--lr", "1e30", "--checkpoints", str(self.tmp / "lm-failed")]
        return [
            self.cpu(*argv, "--pe", "nope", "--checkpoints", str(self.tmp / "lm")),
            self.cpu(*argv, *failing, status=1),
        ]

    def code_run(self) -> str:
        return self.pretrained[0][0]["path"]

    @functools.cached_property
    def sweep_root(self) -> Path:
        """The session's seed-0 runs copied (a sweep writes its manifest beside them), as a grid finds them done."""
        root = self.tmp / "sweep"
        for run in self.runs:
            shutil.copytree(run, root / Path(run).relative_to(self.checkpoints))
        return root

    def sweep(self, *argv: str) -> Any:
        grid = ["sweep", *TASK, "--pe", "nope", "--pe", "t5", "--seed", "0", "--steps", "3", "--batch-size", "16"]
        shape = [arg for key, value in tiny_model().items() for arg in ("-m", f"{key}={value}")]  # the session's
        return printed([*grid, *shape, "--checkpoints", str(self.sweep_root), *argv, "--json"])

    def code_sweep_report(self) -> Any:
        """`probe sweep --report` of the code run: its ``pretrained`` record."""
        options = ["-o", f"corpus={self.corpus}", "-o", "context=16", "-o", "vocab_size=300", "-o", "heldout=0.25"]
        grid = ["sweep", "--task", "code", *options, "--pe", "nope", "--seed", "0", "--steps", "2", "--batch-size", "4"]
        _ = self.pretrained  # the run it reports
        root = str(self.tmp / "lm")
        return printed([*grid, *TINY, "--checkpoints", root, "--report", *self.out("code-report"), "--json"])

    def reproduce(self) -> Any:
        """`probe reproduce --scale section6` on the committed summaries, its training stood in for (STOOD_IN)."""
        from probe.commands import reproduce

        summaries = self.tmp / "summaries"
        shutil.copytree(SECTION6, summaries, ignore=shutil.ignore_patterns("superseded"))
        where = ["--checkpoints", str(self.tmp / "study"), "--summaries", str(summaries), *self.out("study")]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(reproduce, "_train_here", lambda *args, **kwargs: None)
            return printed(["reproduce", "--scale", "section6", "--task", "all", "--seeds", "2", *where, "--json"])

    def reproduce_plan(self) -> Any:
        """`probe reproduce --dry-run`, the price of each run stood in for (STOOD_IN)."""
        import probe.studies.sweep

        def estimate_cost(runs, **_: Any) -> dict[str, Any]:
            return {"seconds": [60.0] * len(runs), "total_seconds": 60.0 * len(runs), "source": "given"}

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(probe.studies.sweep, "estimate_cost", estimate_cost)
            return printed(["reproduce", "--dry-run", "--checkpoints", str(self.tmp / "plan"), "--json"])


def _runners() -> dict[str, Any]:
    """Per section of the page, what prints its documents."""
    per_bucket = ["--n-per-bucket", "1"]
    return {
        "probe train --json": lambda c: c.trained,
        "probe eval --json": lambda c: c.evaluated,
        "eval.json": Commands.eval_files,
        "probe compare --json": lambda c: [
            c.cpu("compare", "nope", "t5", *TASK, "--checkpoints", str(c.checkpoints), *per_bucket, *c.out("compare"))
        ],
        "probe distances --json": lambda c: [c.cpu("distances", *c.runs, *per_bucket, *c.out("distances"))],
        "probe positions --json": lambda c: [
            c.cpu("positions", c.runs[0], *per_bucket, "--resamples", "10", "--max-positions", "8", *c.out("pos"))
        ],
        "probe theorem --json": lambda c: [printed(["theorem", "--max-length", "8", "--json"])],
        "probe theorem --match --json": lambda c: [
            printed(["theorem", "--match", "alibi", "--max-length", "8", "--json"]),
            printed(["theorem", "--match", "t5", "--max-length", "8", "--json"]),
        ],
        "probe tasks --json": lambda c: [printed(["tasks", "--json"])],
        "probe tasks show --json": lambda c: [printed(["tasks", "show", "reverse", "--json"])],
        "probe pes --json": lambda c: [printed(["pes", "--json"])],
        "probe sweep --json": lambda c: [c.sweep(*c.out("sweep-report"))],
        "probe sweep --dry-run --json": lambda c: [c.sweep("--dry-run", "--tokens-per-second", "1000")],
        "probe sweep --report --json": lambda c: [c.sweep("--report", *c.out("report")), c.code_sweep_report()],
        "probe reproduce --json": lambda c: [c.reproduce()],
        "probe reproduce --dry-run --json": lambda c: [c.reproduce_plan()],
        "probe pretrain --json": lambda c: c.pretrained,
        "probe perplexity --json": lambda c: [
            c.cpu("perplexity", *c.code, "--checkpoints", str(c.tmp / "lm"), "--max-files", "2", *c.out("ppl"))
        ],
        "probe extrapolate --json": lambda c: [
            c.cpu("extrapolate", c.code_run(), "--family", "temperature", "--max-files", "4", *c.out("extrapolate"))
        ],
        "probe extrapolate --dry-run --json": lambda c: [
            c.cpu("extrapolate", c.runs[0], "--family", "temperature", "--dry-run"),
            c.cpu("extrapolate", c.code_run(), "--family", "temperature", "--max-files", "4", "--dry-run"),
        ],
        "probe import --json": lambda c: [
            printed(
                ["import", str(AUTHORS), "--checkpoints", str(c.tmp / "imported"), "--corpus", str(c.corpus), "--json"]
            )
        ],
    }


RUNNERS = _runners()


@pytest.fixture(scope="module")
def commands(checkpoints, code_corpus, tmp_path_factory) -> Commands:
    return Commands(checkpoints, code_corpus, tmp_path_factory.mktemp("json-docs"))


# -- the checks -------------------------------------------------------------------------------------------------------
def objects_at(document: Any, path: str) -> list[dict[str, Any]]:
    """The objects ``path`` names in ``document`` (``runs[]``, ``tasks{}``, ``manifest.runs[]``, ``[]``; ``""``: the
    document); an optional key that is absent names none."""
    found = [document]
    for step in re.findall(r"\[\]|\{\}|[^.\[\]{}]+", path):
        if step == "[]":
            assert all(isinstance(f, list) for f in found), f"{path}: not a list"
            found = [item for f in found for item in f]
        elif step == "{}":
            assert all(isinstance(f, dict) for f in found), f"{path}: not an object"
            found = [value for f in found for value in f.values()]
        else:
            found = [f[step] for f in found if f.get(step) is not None]
    assert all(isinstance(f, dict) for f in found), f"{path}: holds something other than objects"
    return found


def check_table(name: str, path: str, keys: dict[str, bool], documents: list[Any]) -> None:
    """Every object at ``path`` prints the table's keys that are always printed and none it lacks; across the
    section's cases, every optional key is printed at least once (unless NOT_EXERCISED says why not)."""
    listed, always = set(keys), {key for key, optional in keys.items() if not optional}
    objects = [obj for document in documents for obj in objects_at(document, path)]
    skipped, _ = NOT_EXERCISED.get((name, path), (set(), ""))
    assert objects, f"{name}: no object at {path!r} was printed, so its table is not checked"
    for obj in objects:
        assert not set(obj) - listed, f"{name}, {path or 'top level'}: printed but not on the page: {set(obj) - listed}"
        assert not always - set(obj), f"{name}, {path or 'top level'}: on the page but not printed: {always - set(obj)}"
    seen = set().union(*(set(obj) for obj in objects))
    assert not listed - seen - skipped, f"{name}, {path or 'top level'}: never printed: {listed - seen - skipped}"


def test_the_page_documents_each_document_the_test_runs():
    assert len(SECTIONS) >= 20
    assert set(SECTIONS) == set(RUNNERS), "a section without a command here, or a command without its section"
    for (name, path), _ in NOT_EXERCISED.items():
        assert path in SECTIONS[name].tables, (name, path)
    assert set(STOOD_IN) <= set(SECTIONS)


def test_every_command_that_takes_json_has_a_section_and_each_section_names_its_flags():
    """`probe app` aside, each command (and `probe tasks show`) takes --json and has a section; a section's flags
    are its command's."""
    parsers = dict(next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices).choices)
    tasks = parsers["tasks"]
    parsers["tasks show"] = next(a for a in tasks._actions if hasattr(a, "choices") and a.choices).choices["show"]
    taking = {name for name, parser in parsers.items() if "--json" in parser._option_string_actions}
    assert taking == set(parsers) - {"app"}, set(parsers) - taking
    named = {}
    for section in SECTIONS:
        if section == "eval.json":
            continue
        words = section.split()
        command = " ".join(w for w in words[1:] if not w.startswith("-"))
        named.setdefault(command, []).append(section)
        flags = [w for w in words if w.startswith("--")]
        assert all(flag in parsers[command]._option_string_actions for flag in flags), section
    assert set(named) == taking


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_a_documents_keys_are_the_ones_its_section_lists(name, commands):
    section = SECTIONS[name]
    documents = RUNNERS[name](commands)
    assert documents
    kind = {"object": dict, "list": list}[section.shape]
    assert all(isinstance(document, kind) for document in documents), f"{name}: not a {section.shape}"
    for path, keys in section.tables.items():
        check_table(name, path, keys, documents)


def test_the_parser_reads_optional_keys_and_nested_paths():
    """The reading the checks rest on: a row beginning "Only" is optional, a table takes the path its paragraph
    names, and a key the page lacks or a key never printed fails."""
    page = (
        "## `probe x --json`\n\nTop level: an object.\n\n| key | type | meaning |\n|---|---|---|\n"
        "| `runs` | list | the runs |\n| `shown` | object | Only with --show: shown |\n\nKeys of `runs[]`:\n\n"
        "| key | type | meaning |\n|---|---|---|\n| `label` | string | its label |\n\n## Not a document\n"
    )
    (section,) = read_page(page).values()
    assert section.tables == {"": {"runs": False, "shown": True}, "runs[]": {"label": False}}
    check_table("x", "runs[]", {"label": False}, [{"runs": [{"label": "a"}]}])
    with pytest.raises(AssertionError, match="not on the page"):
        check_table("x", "runs[]", {"label": False}, [{"runs": [{"label": "a", "path": "p"}]}])
    with pytest.raises(AssertionError, match="never printed"):
        check_table("x", "", {"runs": False, "shown": True}, [{"runs": []}])
    assert objects_at({"manifest": {"runs": [{"a": 1}]}}, "manifest.runs[]") == [{"a": 1}]
    assert objects_at({"tasks": {"copy": {"summary": "s"}}}, "tasks{}") == [{"summary": "s"}]
