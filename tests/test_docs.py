"""The documentation: the site builds strict (a broken link, anchor or API reference fails it), the
commands page holds every command's `--help` as the CLI prints it, and the README stays short."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_site_builds_strict(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("compare_runs") > 0


def test_every_commands_help_is_on_the_commands_page():
    spec = importlib.util.spec_from_file_location("docs_help", ROOT / "docs" / "help.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    page = helper.PAGE.read_text()
    assert page == helper.written(page), "docs/commands.md is out of date: run python docs/help.py"
    for name in ("train", "eval", "compare", "distances", "positions", "sweep", "reproduce", "import", "pes"):
        assert f"### `probe {name} --help`" in page


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(((?:docs|bench)/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
    assert "shared/" not in readme and not any("../shared" in p.read_text() for p in (ROOT / "docs").glob("*.md"))
