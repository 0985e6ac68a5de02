"""A CLI that answers at once: building the parser (what `probe --help`, every subcommand's `--help` and
every usage error need) imports neither torch nor TransformerLens (bench/cli_startup.py times it); an
unknown flag gets its subcommand's usage; typos get a "did you mean"."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from probe.cli import main

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformer_lens", "numpy", "plotly", "streamlit")


def test_building_the_parser_imports_neither_torch_nor_transformer_lens():
    """A fresh interpreter builds the parser, prints every subcommand's help, and lists what got imported."""
    code = (
        "import contextlib, io, sys\n"
        "from probe.cli import build_parser\n"
        "parser = build_parser()\n"
        "sub = next(a for a in parser._actions if a.choices and 'eval' in a.choices)\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    parser.print_help()\n"
        "    for p in sub.choices.values(): p.print_help()\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"building the parser imported {done.stdout.strip()}"


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (["eval", "--bogus"], "usage: probe eval", "unrecognized arguments: --bogus"),
        (["eval", "--chekpoints", "x"], "usage: probe eval", "did you mean '--checkpoints'?"),
        (["evl"], "usage: probe ", "did you mean 'eval'?"),
        (["sweep", "--cpus", "1", "--dry-run"], "usage: probe sweep", "unrecognized arguments: --cpus 1"),
        (["train", "--check", "x"], "usage: probe train", "did you mean '--checkpoints'?"),
        (["extrapolate", "--family", "temprature"], "usage: probe extrapolate", "did you mean 'temperature'?"),
    ],
)
def test_a_usage_error_names_its_subcommand_and_the_closest_spelling(argv, usage, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and hint in err


@pytest.mark.parametrize(
    ("argv", "hints"),
    [
        (["reproduce", "--pe", "a", "--pe", "b"], []),  # reproduce trains every PE: no flag is like --pe
        (["train", "--chekpoints", "x", "--checkpoint", "y"], ["--checkpoints"]),
        (["sweep", "--tsk", "scan", "--sed", "1", "--task-x", "copy"], ["--task", "--seed"]),
    ],
)
def test_each_flag_hint_is_given_once_and_only_where_a_flag_is_alike(argv, hints, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert re.findall(r"did you mean '([^']*)'\?", err) == hints, err


def test_a_pe_is_taken_by_the_label_tables_print_and_a_typo_gets_the_closest(tmp_path, capsys):
    from probe.commands.common import pe_kind, pe_or_run
    from probe.models.registry import PE_LABELS

    assert {pe_kind(label) for label in PE_LABELS.values()} == set(PE_LABELS)
    assert pe_kind("ROTARY") == "rotary" and pe_or_run("Rotary+base=500") == "rotary+base=500"
    with pytest.raises(SystemExit):
        raise SystemExit(main(["train", "--pe", "Rotaryy", "--checkpoints", str(tmp_path)]))
    assert "did you mean 'rotary'?" in capsys.readouterr().err
    assert main(["compare", "NoPE", "alibii", "--checkpoints", str(tmp_path)]) == 2
    assert "did you mean 'alibi'?" in capsys.readouterr().err
    assert main(["train", "--task", "scna", "--checkpoints", str(tmp_path)]) == 2
    assert "did you mean 'scan'?" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_ctrl_c_says_what_is_kept_and_that_a_rerun_resumes(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("probe.commands.train.run", interrupted)
    assert main(["train"]) == 130
    err = capsys.readouterr().err
    assert "last checkpoint are kept" in err and "resumes" in err and len(err.strip().splitlines()) == 1


def test_the_readme_says_which_commands_take_checkpoints_and_json():
    """The sentence under the README's command table names exactly the commands without --checkpoints or
    --json, and the table lists every command."""
    import argparse
    import re

    from probe.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    without = {
        flag: {name for name, p in commands.items() if flag not in p._option_string_actions}
        for flag in ("--checkpoints", "--json")
    }
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("Every command that reads or writes runs") :].split("--json")[0]
    named = set(re.findall(r"`probe (\w+)`", sentence))
    assert without["--checkpoints"] == named - {"app"} and without["--json"] == {"app"}
    listed = set(re.findall(r"^\| `probe (\w+)", readme, re.M))
    assert listed == set(commands)


def test_dir_of_probe_lists_only_the_api():
    """No ``Any`` or ``annotations`` beside the entry points; ``read_eval`` is one of them."""
    code = "import probe; print(' '.join(dir(probe)))"
    names = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    listed = names.stdout.split()
    assert "read_eval" in listed and "evaluate_run" in listed and "analysis" in listed
    assert not {"Any", "annotations"} & set(listed)
    assert all(not name.startswith("_") or name == "__version__" for name in listed)
