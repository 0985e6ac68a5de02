"""What a user meets: `probe eval` keeps a finished evaluation and applies inference options to the runs
that have them; an unknown PE or word is named."""

from __future__ import annotations

import json

import pytest

from probe.cli import main
from probe.errors import ProbeError
from probe.models.checkpoint import load_checkpoint

COMMON = ["--task", "reverse", "-o", "train_length=4"]
MODEL = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """NoPE and Rotary on reverse, a few steps each: enough to evaluate."""
    folder = tmp_path_factory.mktemp("eval") / "ck"
    argv = [
        "train",
        *COMMON,
        "--pe",
        "nope",
        "--pe",
        "rotary",
        "--steps",
        "20",
        *MODEL,
        "--no-eval",
        "--checkpoints",
        str(folder),
    ]
    assert main(argv) == 0
    return folder


def _eval(root, *extra) -> int:
    return main(["eval", *COMMON, "--checkpoints", str(root), "--valid", "20", *extra])


def _run(root, pe):
    return root / "reverse+train_length=4" / pe / "seed0"


def test_a_smaller_evaluation_goes_beside_the_finished_one(root, capsys):
    assert _eval(root, "--n", "60") == 0
    full = json.loads((_run(root, "nope") / "eval.json").read_text())
    capsys.readouterr()
    assert _eval(root, "--n", "10") == 0
    assert "its evaluation on more examples is kept" in capsys.readouterr().out
    assert json.loads((_run(root, "nope") / "eval.json").read_text()) == full
    quick = json.loads((_run(root, "nope") / "eval+n=30.json").read_text())
    assert quick["n_examples"] == 30 and full["n_examples"] == 80
    assert _eval(root, "--n", "10", "--force") == 0
    assert json.loads((_run(root, "nope") / "eval.json").read_text())["n_examples"] == 30


def test_no_test_examples_is_one_line(root, capsys):
    before = (_run(root, "nope") / "eval.json").read_bytes() if (_run(root, "nope") / "eval.json").exists() else None
    assert _eval(root, "--n", "0") == 2
    err = capsys.readouterr().err
    assert "--n must be at least 1" in err and "Traceback" not in err
    after = (_run(root, "nope") / "eval.json").read_bytes() if (_run(root, "nope") / "eval.json").exists() else None
    assert after == before


def test_rope_scaling_applies_to_the_runs_that_have_it(root, capsys):
    """The README's example over a NoPE and a Rotary run: Rotary evaluated scaled, NoPE left alone."""
    scaled = ["-p", "scaling=yarn", "-p", "factor=4", "-p", "original_length=50", "--n", "10", "--json"]
    assert _eval(root, *scaled) == 0
    captured = capsys.readouterr()
    reports = json.loads(captured.out)["runs"]
    assert [r["pe"] for r in reports] == ["rotary"]
    assert reports[0]["pe_options_at_inference"] == {"scaling": "yarn", "factor": 4.0, "original_length": 50}
    assert (_run(root, "rotary") / "eval+factor=4+original_length=50+scaling=yarn.json").is_file()
    assert not list(_run(root, "nope").glob("eval+factor*"))
    assert "skipping" in captured.err and "nope has none of" in captured.err


def test_an_option_no_run_has_is_one_line(root, capsys):
    assert _eval(root, "-p", "slopes=geometric") == 2
    err = capsys.readouterr().err
    assert "no run here has the option(s) slopes" in err and "Traceback" not in err


def test_an_unknown_pe_is_named_before_runs_are_looked_for(tmp_path, capsys):
    assert main(["distances", "--pe", "alibbi", "--checkpoints", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown positional encoding 'alibbi'" in err and "probe train" not in err


def test_to_tokens_names_the_words_the_vocabulary_lacks(root):
    model = load_checkpoint(_run(root, "nope"))
    with pytest.raises(ProbeError, match=r"unknown word\(s\) 'walk', 'twicee'"):
        model.to_tokens("walk twicee")


def test_tasks_show_says_what_each_task_flag_takes():
    """-o takes a task option; the scratchpad formats belong to --scratchpad, and the help still names them."""
    import argparse

    from probe.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = next(a for a in commands.choices["tasks"]._actions if isinstance(a, argparse._SubParsersAction))
    show = actions.choices["show"]
    option, scratchpad = (show._option_string_actions[flag].help for flag in ("-o", "--scratchpad"))
    assert "I+C+O" not in option and "none, full" not in option and "variant=count" in option
    assert "scratchpad format" in scratchpad and "I+C+O" in show.format_help()


def test_dir_of_probe_lists_the_public_api_without_importing_it():
    """A notebook's tab completion: the entry points and subpackages, and `import probe` still light."""
    import subprocess
    import sys

    names = ("build_model", "compare_runs", "train_stacked", "evaluate_run", "analysis", "models")
    code = f"import probe, sys; d = dir(probe); print(all(n in d for n in {names!r}), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]
    import probe

    assert all(getattr(probe, name) is not None for name in probe.__all__)


def test_the_docs_count_the_paper_grid_as_the_grid_does(tmp_path):
    import re
    from pathlib import Path

    from probe.studies.sweep import expand_grid, load_grid

    page = (Path(__file__).resolve().parent.parent / "docs" / "sweeps.md").read_text()
    (said,) = re.findall(r"the paper's (\d+) runs", page)
    assert int(said) == len(expand_grid(load_grid("paper"), tmp_path))


def _lines_at_100_columns(monkeypatch, capsys, argv) -> list[str]:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("command", ["eval", "positions"])
def test_tables_fit_100_columns_with_every_header_whole(root, monkeypatch, capsys, tmp_path, command):
    """A table wider than the terminal folds into one block per run (column: value), nothing cut."""
    extra = ["--n", "10", "--valid", "10"] if command == "eval" else ["--n-per-bucket", "2", "--resamples", "10"]
    argv = [command, *COMMON, "--checkpoints", str(root), *extra, "--out", str(tmp_path)]
    lines = _lines_at_100_columns(monkeypatch, capsys, argv)
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    text = "\n".join(lines)
    headers = (
        ["IID (seen lengths)", "OOD (unseen lengths)"]
        if command == "eval"
        else ["probe held-out", "probe unseen", "heads r/a/c", "var slope"]
    )
    assert all(header in text for header in headers) and "…" not in text


def test_eval_says_how_many_examples_each_length_bucket_holds(root, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["eval", *COMMON, "--checkpoints", str(root), "--n", "10", "--json"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()  # with --json the tables go to stderr
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in lines if line.startswith("│")]
    for bucket in json.loads(captured.out)["runs"][0]["buckets"]:
        length = f"{bucket['length']}{'' if bucket['seen'] else '*'}"
        assert [length, str(bucket["n"])] in [row[:2] for row in rows], bucket


def test_a_folder_that_is_not_a_probe_run_is_skipped_with_a_line(checkpoints, capsys):
    """The fixture's `ape` folder holds valid JSON that names no PE: eval skips it, saying so, where it
    used to stop with a KeyError traceback; its corrupt `rotary` run is one error line, exit 2."""
    assert (
        main(["eval", "--task", "reverse", "-o", "train_length=4", "--checkpoints", str(checkpoints), "--n", "4"]) == 2
    )
    captured = capsys.readouterr()
    assert "ape/seed0" in captured.out and "names no positional encoding" in captured.out
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1


def test_eval_written_to_a_log_says_it_is_going_before_it_ends(root, monkeypatch, capsys):
    """A file or pipe gets no spinner: the status's lines say what is evaluated, with the time since it began,
    ahead of the table."""
    import probe.commands.common

    monkeypatch.setattr(probe.commands.common, "LOG_EVERY", 0.0)  # every update a line
    capsys.readouterr()
    assert _eval(root, "--n", "10") == 0
    out = capsys.readouterr().out
    first, nope, rotary = (
        out.index(s) for s in ("[0:00] evaluating 2 run(s)", "nope/seed0 (1/2)", "rotary/seed0 (2/2)")
    )
    assert first < nope < rotary < out.index("│")


def test_a_logs_status_writes_its_updates_at_most_every_so_often(monkeypatch):
    import io

    from rich.console import Console

    import probe.commands.common as common

    now = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: now[0])
    out = Console(file=io.StringIO(), width=120)
    with common.LogStatus(out, "training", every=30.0) as status:
        for step, at in enumerate([110.0, 131.0, 140.0, 161.0, 225.0]):
            now[0] = at
            status.update(f"step {step}")
        status.update()  # no message: nothing
    assert out.file.getvalue().splitlines() == ["[0:00] training", "[0:31] step 1", "[1:01] step 3", "[2:05] step 4"]


def test_a_logs_status_line_is_never_wrapped(monkeypatch):
    """A study's status (run, step, loss, the sitting's progress) runs past 120 columns: one line of the log."""
    import io

    from rich.console import Console

    import probe.commands.common as common

    monkeypatch.setattr(common.time, "monotonic", lambda: 0.0)
    out = Console(file=io.StringIO(), width=120)
    message = "copy+split=paper+variant=random-2x/rotary/seed2 step 2900/4000, loss 0.0002; " + "x" * 80
    with common.LogStatus(out, message):
        pass
    assert out.file.getvalue().splitlines() == [f"[0:00] {message}"]


def test_eval_says_what_a_constant_guess_scores_where_it_is_a_floor_worth_saying(tmp_path, monkeypatch, capsys):
    """Parity's answer is Yes or No: `probe eval` names the share of the unseen-length examples it scored that the
    commonest training answer gets right (counted here from the gold text), in its JSON and in a line."""
    from collections import Counter

    from probe.tasks import get

    monkeypatch.setenv("COLUMNS", "200")
    parity = ["--task", "parity", "-o", "train_length=4"]
    train = ["train", *parity, "--pe", "nope", "--steps", "2", *MODEL, "--no-eval", "--checkpoints", str(tmp_path)]
    assert main(train) == 0
    capsys.readouterr()
    assert main(["eval", *parity, "--checkpoints", str(tmp_path), "--n", "60", "--valid", "10", "--json"]) == 0
    captured = capsys.readouterr()
    task = get("parity", train_length=4)
    ((said, _),) = Counter(e.target for e in task.examples("train", n=1000, seed=0)).most_common(1)
    unseen = [e.target for e in task.examples("test", n=60, seed=0) if not task.is_seen(e.length)]
    assert set(unseen) == {"The answer is Yes.", "The answer is No."}
    guess = unseen.count(said) / len(unseen)
    assert json.loads(captured.out)["guess"] == {"parity+train_length=4": pytest.approx(guess)}
    assert (
        f"parity+train_length=4: a constant guess (its commonest training answer) scores {100 * guess:.1f}%"
        in " ".join(captured.err.split())
    )


def test_eval_keeps_a_negligible_floor_in_its_json_and_does_not_say_it(root, capsys):
    """Reverse's answers are each their own: a constant guess scores nothing, said in the JSON alone."""
    assert main(["eval", *COMMON, "--checkpoints", str(root), "--n", "40", "--valid", "10", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["guess"]["reverse+train_length=4"] == 0.0
    assert "constant guess" not in captured.err


def test_trains_next_steps_name_the_pes_and_seed_it_trained_and_run_as_printed(tmp_path, capsys, monkeypatch):
    """Not `compare nope t5` after a run of ALiBi and Rotary at seed 1: the hint is pasted back as it is."""
    import shlex

    monkeypatch.setenv("COLUMNS", "300")
    flags = [*COMMON, "--pe", "alibi", "--pe", "rotary", "--seed", "1", "--steps", "2", *MODEL, "--no-eval"]
    assert main(["train", *flags, "--checkpoints", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    hints = [line.strip() for line in lines[lines.index("next:") + 1 :]]
    compare = next(hint for hint in hints if hint.startswith("probe compare")).split("   ")[0]
    assert compare == f"probe compare alibi rotary --task reverse -o train_length=4 --seed 1 --checkpoints {tmp_path}"
    distances = next(hint for hint in hints if hint.startswith("probe distances")).split("   ")[0]
    for hint in (compare, distances):
        assert main([*shlex.split(hint)[1:], "--n-per-bucket", "1", "--out", str(tmp_path / "out")]) == 0
