"""The documentation: the site builds strict (a broken link, anchor or API reference fails it), its API
reference holds every entry point with its parameters and no raw Sphinx role, site search finds them, the
walk-through notebook runs, the commands page holds every command's `--help` as the CLI prints it, every
cross-reference in probe's docstrings and every `probe.x.y` the pages name resolves, and the README stays
short."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import bench_script

from probe.studies import section6, section6_view

ROOT = Path(__file__).resolve().parent.parent


ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|obj|exc):")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation site, built strict once for this module."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert build.returncode == 0, build.stderr[-3000:]
    return out


def _entry_points() -> dict[str, str]:
    """Each name ``dir(probe)`` offers as API, by the path the reference documents it at (where it is defined)."""
    import probe

    paths = {}
    for name in probe.__all__:
        value = getattr(probe, name)
        module = getattr(value, "__module__", None) if callable(value) else None
        paths[name] = f"{module or probe._LAZY[name]}.{name}"
    return paths


def test_the_api_reference_documents_every_entry_point_with_its_parameters(site):
    page = (site / "api" / "index.html").read_text()
    for name, path in _entry_points().items():
        assert f'id="{path}"' in page, f"probe.{name} is not in the API reference ({path})"
    for path in (
        "probe.runs.folders.load_run",
        "probe.models.checkpoint.load_checkpoint",
        "probe.extrapolation.extrapolate.extrapolate",
    ):
        section = page.split(f'id="{path}"', 1)[1].split("<h2 id=", 1)[0]
        assert "Parameters:" in section and ("<code>device</code>" in section or "<code>settings</code>" in section), (
            path
        )
    assert page.count('class="autorefs autorefs-internal"') > 10  # roles became links between entries
    pages = {p.relative_to(site): p.read_text() for p in site.rglob("*.html")}
    raw = {str(p): ROLE.findall(text)[:3] for p, text in pages.items() if ROLE.search(text)}
    assert not raw, f"raw Sphinx roles on the site: {raw}"
    assert not list(site.rglob("*.py")), "the docs' Python files are tooling, not pages"


def test_site_search_finds_the_entry_points(site):
    index = json.loads((site / "search" / "search_index.json").read_text())["docs"]
    for name in (
        "load_run",
        "load_checkpoint",
        "save_checkpoint",
        "ModelConfig",
        "Tokenizer",
        "extrapolate",
        "read_eval",
    ):
        found = [d["location"] for d in index if re.search(rf"\b{name}\b", d["title"])]
        assert any(location.startswith("api/") for location in found), f"site search does not find {name}: {found}"


def test_the_walkthrough_notebook_runs(checkpoints, tmp_path, monkeypatch):
    """docs/walkthrough.ipynb, each cell run in order by IPython (in this process: a kernel would import torch
    again) on the tiny runs the explorer tests read, its parameters cell pointed at them: every call it
    teaches works as written."""
    import nbformat
    from helpers import FOLDER
    from IPython.core.interactiveshell import InteractiveShell

    notebook = nbformat.read(ROOT / "docs" / "walkthrough.ipynb", as_version=4)
    nbformat.validate(notebook)
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in cells), "commit it without outputs"
    parameters = next(c for c in cells if "parameters" in c.metadata.get("tags", []))
    runs = checkpoints / FOLDER
    parameters.source = (
        f"RUN_A = {str(runs / 'nope' / 'seed0')!r}\nRUN_B = {str(runs / 't5' / 'seed0')!r}\n"
        f"N_PER_BUCKET = 2\nOUT = {str(tmp_path / 'out')!r}"
    )
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    try:
        for cell in cells:
            shell.run_cell(cell.source, store_history=False, silent=True).raise_error()
    finally:
        InteractiveShell.clear_instance()
    assert (tmp_path / "out" / "t5-copy" / "model.safetensors").is_file()


REFERENCE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc):`(?:[^`<]*<)?[~!]?([\w.]+)>?`")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
DOTTED = re.compile(r"(?<![\w./-])probe(?:\.[A-Za-z_]\w*)+")


def _docstring_references() -> list[tuple[str, list[str], str]]:
    """(where, the scopes a name is looked up in from the innermost out, target) for every Sphinx role in a
    docstring of probe/, the scopes as Sphinx reads them: the object's class (a class's own, for its
    docstring) or module, then its packages."""
    found: list[tuple[str, list[str], str]] = []
    for path in sorted((ROOT / "probe").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        _visit(ast.parse(path.read_text()), module, [], str(path.relative_to(ROOT)), found)
    return found


def _visit(node: ast.AST, module: str, classes: list[str], file: str, found: list) -> None:
    inner = [*classes, node.name] if isinstance(node, ast.ClassDef) else classes
    packages = [module.rsplit(".", i)[0] for i in range(module.count(".") + 1)]
    scopes = [".".join([module, *inner[:i]]) for i in range(len(inner), 0, -1)] + packages
    doc = ast.get_docstring(node) if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) else None
    found.extend((f"{file}:{getattr(node, 'lineno', 1)}", scopes, t) for t in REFERENCE.findall(doc or ""))
    for child in ast.iter_child_nodes(node):
        _visit(child, module, inner, file, found)


PAGES = "probe.explorer.views"  # modules that run a Streamlit page when imported: read, never imported


@functools.cache
def _page_names(module: str) -> set[str]:
    """The top-level functions, classes and assigned names of a page module, read from its source."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return names | {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute of one (a class's annotated field counts); a page module's
    names are read from its source (importing one would run its page, and a page that stops half-way leaves
    Streamlit's state behind for every later test)."""
    parts = dotted.split(".")
    for cut in range(1, len(parts) + 1):
        module = ".".join(parts[:cut])
        if module.startswith(PAGES + ".") and (ROOT / (module.replace(".", "/") + ".py")).is_file():
            return len(parts) == cut or parts[cut] in _page_names(module)
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            fields = {k for c in getattr(value, "__mro__", ()) for k in getattr(c, "__annotations__", {})}
            if not hasattr(value, name) and name not in fields:
                return False
            value = getattr(value, name, None)
        return True
    return False


def _broken_docstring_references() -> list[str]:
    return [
        f"{where}: {target}"
        for where, scopes, target in _docstring_references()
        if not any(_resolves(f"{scope}.{target}") for scope in scopes) and not _resolves(target)
    ]


def _broken_page_names() -> list[str]:
    broken = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # fenced blocks: code, not names
        names = {m for span in CODE_SPAN.findall(text) for m in DOTTED.findall(span)}
        names |= set(re.findall(r"^::: (probe[\w.]*)", text, re.M))
        broken += [f"{page.name}: {name}" for name in sorted(names) if not _resolves(name)]
    return broken


def test_every_cross_reference_resolves():
    """Each ``:func:``/``:mod:``/``:class:``/``:meth:``/``:attr:`` in probe's docstrings names a real object, looked
    up as Sphinx does (the object's scope outwards, then absolute), and so does each ``probe.x.y`` in the pages'
    code spans: a renamed function leaves no pointer at nothing. Imports the modules, builds no site."""
    assert len(_docstring_references()) > 300  # the roles are found at all
    assert not _broken_docstring_references(), "docstring references to nothing:\n" + "\n".join(
        _broken_docstring_references()
    )
    assert not _broken_page_names(), "names in docs/*.md that are not in probe:\n" + "\n".join(_broken_page_names())


def test_a_reference_to_nothing_is_found(tmp_path):
    """The check can fail: a role or a code span naming what probe lacks is reported."""
    assert _resolves("probe.training.stacked.train_stack") and _resolves("probe.models.attention.PEAttention.route")
    assert _resolves("probe.training.bookkeeping.RunResult.path")  # a dataclass field
    assert not _resolves("probe.training.loop.group_key") and not _resolves("probe.no_such_module")
    assert REFERENCE.findall("see :func:`~probe.training.loop.group_key` and :meth:`Trainer.run_step`") == [
        "probe.training.loop.group_key",
        "Trainer.run_step",
    ]
    assert DOTTED.findall("`probe.training.loop.group_key(config)`, not `probe/models/x.py`") == [
        "probe.training.loop.group_key"
    ]


def test_every_commands_help_is_on_the_commands_page():
    spec = importlib.util.spec_from_file_location("docs_help", ROOT / "docs" / "help.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    page = helper.PAGE.read_text()
    assert page == helper.written(page), "docs/commands.md is out of date: run python docs/help.py"
    for name in ("train", "eval", "compare", "distances", "positions", "sweep", "reproduce", "import", "pes"):
        assert f"### `probe {name} --help`" in page


def _documented_commands(text: str) -> list[str]:
    """Every `probe ...` command in the page's fenced code blocks, continuations joined, one per shell step."""
    commands = []
    for block in re.findall(r"(?ms)^```[a-z]*\n(.*?)^```", text):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            steps = re.split(r"&&|;|\|", line.strip().removeprefix("$ "))
            commands += [step.strip() for step in steps if step.strip().startswith("probe ")]
    return commands


def test_every_command_the_pages_show_parses_as_written(capsys):
    """A flag renamed, or one the pages abbreviate (the parser takes a flag only as spelled), fails here."""
    from probe.cli import build_parser

    parser = build_parser()
    shown = [
        c
        for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
        for c in _documented_commands(page.read_text())
    ]
    assert len(shown) >= 30
    for command in shown:
        try:
            _, extras = parser.parse_known_args(shlex.split(command, comments=True)[1:])
        except SystemExit as exit_:
            extras = [] if exit_.code == 0 else [capsys.readouterr().err.strip().splitlines()[-1]]
        assert not extras, f"{command!r}: {extras}"
    assert _documented_commands("```bash\nprobe train --pe nope \\\n  --steps 5 && probe eval\n```\n") == [
        "probe train --pe nope --steps 5",
        "probe eval",
    ]


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(((?:docs|bench)/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
    assert "shared/" not in readme and not any("../shared" in p.read_text() for p in (ROOT / "docs").glob("*.md"))


def _block(page: Path, name: str) -> str:
    text = page.read_text()
    return text.split(f"<!-- {name}:begin -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]


def test_the_numbers_the_docs_quote_are_the_committed_results_as_their_scripts_write_them():
    """The main job's table (README, Start here), the walk's tables, and the tables of the main job's runs in
    How models represent position and What rescues length generalization are bench/main_job.py's and
    bench/getting_started.py's rendering of the results files in bench/results/, not typed numbers."""
    main_job, walk = bench_script("main_job"), bench_script("getting_started")
    measured = json.loads((ROOT / "bench" / "results" / "main_job_cpu.json").read_text())
    expected = main_job.table(measured["pes"], measured["seeds"], measured["machine"]["cpu"])
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        assert _block(page, "main-job") == expected, page
    walked = json.loads((ROOT / "bench" / "results" / "getting_started_walk_cpu.json").read_text())
    assert _block(ROOT / "docs" / "getting-started.md", "walk") == walk.docs_block(walked)
    written = walk.blocks(walked)
    assert {(page.name, name) for page, name, _ in written} >= {
        ("positions.md", "positions"),
        ("extrapolation.md", "extrapolate-default"),
        ("extrapolation.md", "distraction"),
    }
    for page, name, text in written:
        assert _block(page, name) == text, (
            f"{page.name}'s {name} block: run python bench/getting_started.py --reuse --docs"
        )


def test_the_readme_job_runs_the_start_here_line_and_its_timing_is_the_committed_measurement():
    """bench/readme_job.py runs the README's first bash block as written, cut before `probe train` to time the
    set-up apart; the README and Start here quote its committed measurement, not a typed time."""
    readme_job = bench_script("readme_job")
    readme = (ROOT / "README.md").read_text()
    setup, job = readme_job.start_here(readme)
    line = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1)
    assert f"{setup} && {job}" == line and job == "probe train" and setup.startswith("python3 -m venv .venv")
    with pytest.raises(SystemExit, match="does not end in"):
        readme_job.start_here("```bash\npip install probe\n```")
    measured = json.loads((ROOT / "bench" / "results" / "readme_job_cpu.json").read_text())
    assert measured["setup_status"] == 0 and measured["train_status"] == 0
    assert measured["setup"] == setup and measured["job"] == job  # the line the pages show is the one timed
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        assert _block(page, "readme-job") == readme_job.sentence(measured), page


def test_the_interventions_cost_table_is_the_committed_measurement():
    """docs/extrapolation.md's cost of each intervention is bench/interventions.py's rendering of its results file,
    every variant it timed in its column."""
    interventions = bench_script("interventions")
    measured = json.loads((ROOT / "bench" / "results" / "interventions_cpu.json").read_text())
    block = _block(ROOT / "docs" / "extrapolation.md", "interventions")
    assert block == interventions.docs_table(measured), "run python bench/interventions.py --reuse --docs"
    timed = {variant for result in measured["results"].values() for variant in result["vs_none"]}
    cap = measured["results"]["tiny/rotary"]["vs_none"]["cap"]
    assert timed <= set(interventions.COLUMNS) and "| tiny / Rotary |" in block and f"{cap:.2f} |" in block


def test_the_attended_queries_table_is_the_committed_measurement():
    """docs/reproducing.md's two readings of Figure attended_distance are bench/attended_queries.py's rendering of
    its results file."""
    script = bench_script("attended_queries")
    measured = json.loads((ROOT / "bench" / "results" / "attended_queries_cpu.json").read_text())
    block = _block(ROOT / "docs" / "reproducing.md", "attended-queries")
    assert block == script.table(measured), "run python bench/attended_queries.py --reuse --docs"
    output, answer = (measured["readings"][q]["n_queries"]["nope"] for q in ("output", "answer"))
    assert f"| {output:,} / {answer:,} |" in block and answer < output


def test_the_docs_number_layers_from_0():
    """Every layer and stream label on the pages of measured numbers counts from 0, as the commands print them:
    the 2-layer main job has layers 0 and 1, never a layer 2."""
    for page in ("positions.md", "extrapolation.md", "getting-started.md"):
        text = (ROOT / "docs" / page).read_text()
        assert not re.search(r"layers 1, 2\b|layers 1-4\b", text), page


def test_the_section6_tables_are_the_committed_summaries_as_the_report_script_merges_them():
    """docs/reproducing.md's Section 6 block is bench/section6_report.py's rendering of the merge of the
    committed summaries (bench/results/section6/), and the committed report
    JSON is that merge: a summary added without rerunning the script fails here."""
    results = ROOT / "bench" / "results"
    merged = section6.merged_runs(results / "section6", [0, 1, 2])
    report = json.loads(json.dumps(section6.report_of(merged, section6.costs_of(results / "section6"))))
    assert report == json.loads((results / "section6_report.json").read_text())
    assert _block(ROOT / "docs" / "reproducing.md", "section6") == section6_view.markdown(report)


def test_the_unseen_length_scratchpad_errors_table_is_the_committed_files_as_its_script_sums_them():
    """docs/reproducing.md's table of where scratchpad runs first go wrong on unseen lengths is
    bench/scratchpad_steps_table.py's rendering of bench/scratchpad_errors.py's committed files, and each row's
    columns add up to its wrong predictions (every one departs nowhere, at the opening, within or past)."""
    table = bench_script("scratchpad_steps_table")
    runs = table.read_runs()
    assert _block(ROOT / "docs" / "reproducing.md", "scratchpad-steps") == table.markdown(runs), (
        "run python bench/scratchpad_steps_table.py --docs"
    )
    for row in runs.values():
        n = table.counts(row)
        assert n["wrong"] == sum(n[c] for c in table.COLUMNS[1:]), row["run"]
