"""Bad input to the commands, as a review from a user's seat found it: one line on stderr and exit 2 before any
work, never a traceback, and never a finished run's files lost, overwritten, or read as another task's."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from helpers import FOLDER, tiny_model

from probe.cli import main
from probe.errors import ProbeError

SWEEP = ["sweep", "--task", "reverse", "-o", "train_length=4", "--pe", "nope", "--steps", "2", "--batch-size", "8"]
SWEEP += [arg for key, value in tiny_model(1).items() for arg in ("-m", f"{key}={value}")]
AUTHORS = Path(__file__).resolve().parent / "fixtures" / "authors_t5" / "none"


def _one_line(capsys, says: str) -> str:
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    return err


def _refused(capsys, args: list[str], says: str) -> str:
    capsys.readouterr()
    assert main([str(a) for a in args]) == 2
    return _one_line(capsys, says)


@pytest.fixture
def nothing_starts(monkeypatch):
    """A sweep that would train or price its grid, or a study that would plan its runs, fails the test: the
    refusals come before any of it."""
    from probe.studies import reproduce, sweep

    def started(*args, **kwargs):
        raise AssertionError("work started before the flags were checked")

    for module, name in ((sweep, "run_with_progress"), (sweep, "dry_run"), (reproduce, "plan")):
        monkeypatch.setattr(module, name, started)


@pytest.fixture
def run(checkpoints) -> Path:
    return checkpoints / FOLDER / "nope" / "seed0"


# -- 1, 2: probe sweep -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags", [["--list"], ["--tokens-per-second", "1000"], ["--measure-steps", "3"], ["--cluster-size", "3"]]
)
def test_a_dry_runs_flag_without_dry_run_starts_nothing(tmp_path, capsys, nothing_starts, flags):
    _refused(capsys, [*SWEEP, "--checkpoints", tmp_path / "ck", *flags], f"{flags[0]} shapes a dry run's plan")
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--tokens-per-second", "0"], "--tokens-per-second must be a positive number, got 0"),
        (["--tokens-per-second", "-5"], "--tokens-per-second must be a positive number, got -5"),
        (["--tokens-per-second", "nan"], "--tokens-per-second must be a positive number, got nan"),
        (["--measure-steps", "0"], "--measure-steps must be at least 1, got 0"),
        (["--cluster-size", "0"], "--cluster-size must be at least 1, got 0"),
        (["--lr", "-1"], "--lr must be a finite number above 0, got -1.0"),
        (["--lr", "0"], "--lr must be a finite number above 0, got 0.0"),
        (["--lr", "inf"], "--lr must be a finite number above 0, got inf"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be a whole number, at least 1"),
        (["--eval-n", "0"], "--eval-n must be at least 1, got 0"),
        (["--eval-valid", "-1"], "--eval-valid must be at least 0, got -1"),
        (["--cpus-per-run", "-1"], "--cpus-per-run must not be negative, got -1"),
        (["--gpus-per-run", "-1"], "--gpus-per-run must not be negative, got -1"),
        (["--num-cpus", "0"], "--num-cpus 0 gives Ray fewer CPUs than one run asks for (--cpus-per-run 1)"),
        (["--num-cpus", "1", "--cpus-per-run", "2"], "no run would ever start"),
        (["--num-cpus", "2", "--address", "auto"], "a cluster joined with --address has its own CPUs"),
        (["--seed", "-1"], "--seed must not be negative, got -1"),
    ],
)
def test_a_dry_run_refuses_bad_values(tmp_path, capsys, nothing_starts, flags, says):
    _refused(capsys, [*SWEEP, "--checkpoints", tmp_path, "--dry-run", *flags], says)


def test_a_dry_run_still_takes_its_flags(tmp_path, capsys):
    args = [*SWEEP, "--checkpoints", tmp_path, "--dry-run", "--tokens-per-second", "1000", "--cluster-size", "2"]
    assert main([*map(str, args), "--list", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert list(plan["wall_seconds"]) == ["1", "2"] and len(plan["runs"]) == 1


# -- 3: --batch-size -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["0", "-2"])
def test_eval_refuses_a_batch_of_no_examples(run, tmp_path, capsys, size):
    """0 was the default's 256, -2 a RuntimeError traceback."""
    args = ["eval", run, "--batch-size", size, "--n", "2", "--valid", "2", "--out", tmp_path]
    _refused(capsys, args, f"--batch-size must be at least 1, got {size}")
    assert not list(tmp_path.iterdir())


def test_a_library_caller_batch_of_zero_is_not_the_default(run):
    from probe.analysis.evaluation import run_scorer
    from probe.runs.folders import Run
    from probe.subjects.settings import ReadSettings

    with pytest.raises(ProbeError, match="batch_size must be at least 1, got 0"):
        run_scorer(Run.of(run), ReadSettings(batch_size=0))


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "nope", "t5"],
        ["distances"],
        ["positions"],
        ["perplexity", "RUN"],
        ["extrapolate", "RUN"],
    ],
)
def test_every_reading_command_says_the_same_of_a_batch_of_zero(checkpoints, run, capsys, command):
    args = [run if part == "RUN" else part for part in command]
    task = ["--task", "reverse", "-o", "train_length=4"] if command[0] != "perplexity" else []
    _refused(
        capsys, [*args, *task, "--checkpoints", checkpoints, "--batch-size", "0"], "--batch-size must be at least 1"
    )


# -- 4: probe theorem ------------------------------------------------------------------------------------------------
def test_theorem_refuses_a_negative_seed(capsys):
    _refused(capsys, ["theorem", "--seed", "-1", "--max-length", "4"], "--seed must not be negative, got -1")


def test_theorem_matches_a_negative_alibi_slope(capsys):
    """The construction is linear in the slope (q = [s, -s t], tolerance 2 |s| ...): a negative one is a bias
    towards distant keys the NoPE layer reproduces as exactly, so it is taken, not refused."""
    args = ["theorem", "--match", "alibi", "--slope", "-1", "--max-length", "8", "--sequences", "1", "--json"]
    assert main([*args, "--dtype", "float64"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"]


# -- 5: --context 0 --------------------------------------------------------------------------------------------------
def test_pretrain_context_zero_is_refused_not_the_default(tmp_path, capsys, monkeypatch):
    import probe.corpus
    from probe.commands.common import corpus_spec

    args = argparse.Namespace(corpus="stdlib", heldout=0.1, vocab_size=2048, context=0)
    with pytest.raises(ProbeError, match="--context must be at least 2, got 0"):
        corpus_spec(args, 128)
    assert corpus_spec(argparse.Namespace(**{**vars(args), "context": None}), 128).context == 128

    def prepared(*args, **kwargs):
        raise AssertionError("the corpus was prepared before --context was checked")

    monkeypatch.setattr(probe.corpus, "prepare_corpus", prepared)
    _refused(capsys, ["pretrain", "--context", "0", "--checkpoints", tmp_path], "--context must be at least 2, got 0")


def test_import_context_zero_is_refused_not_the_models(tmp_path, capsys):
    from probe.runs.released import import_released

    _refused(capsys, ["import", AUTHORS, "--context", "0", "--checkpoints", tmp_path], "--context must be at least 2")
    with pytest.raises(ProbeError, match="context must be a whole number of at least 2 tokens, got 0"):
        import_released(AUTHORS, tmp_path, context=0)
    assert not list(tmp_path.iterdir())


# -- 6: probe tasks show --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "metrics.jsonl"])
def test_tasks_show_never_writes_over_a_runs_files(run, tmp_path, capsys, name):
    copy = Path(shutil.copytree(run, tmp_path / "seed0"))
    before = (copy / name).read_bytes()
    _refused(capsys, ["tasks", "show", "copy", "--n", "3", "--jsonl", copy / name], "--jsonl")
    assert (copy / name).read_bytes() == before


def test_tasks_show_replaces_only_a_jsonl_file(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    _refused(capsys, ["tasks", "show", "copy", "--n", "3", "--jsonl", notes], "is no .jsonl file")
    _refused(capsys, ["tasks", "show", "copy", "--n", "3", "--jsonl", tmp_path], "is a folder")
    assert notes.read_text() == "mine"
    export = tmp_path / "copy.jsonl"
    for _ in range(2):  # an export again over the same .jsonl: what a user expects
        assert main(["tasks", "show", "copy", "--n", "3", "--jsonl", str(export)]) == 0
    assert len(export.read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--n", "1001"], "--n must be from 1 to 1,000"),
        (["--n", "0"], "--n must be from 1 to 1,000"),
        (["--n", "1000001", "--jsonl", "-"], "--n must be from 1 to 1,000,000"),
        (["--seed", "-1"], "--seed must not be negative, got -1"),
    ],
)
def test_tasks_show_refuses_counts_it_cannot_preview(capsys, flags, says):
    _refused(capsys, ["tasks", "show", "copy", *flags], says)


# -- 7: a run folder holding another task's run ----------------------------------------------------------------------
@pytest.fixture
def stranger(checkpoints, tmp_path) -> Path:
    """A reverse run (L = 4) copied into copy+train_length=4/nope/seed0, beside the reverse runs it came from."""
    root = tmp_path / "ck"
    shutil.copytree(checkpoints / FOLDER, root / FOLDER, ignore=shutil.ignore_patterns("alibi", "ape", "rotary"))
    shutil.copytree(checkpoints / FOLDER / "nope" / "seed0", root / "copy+train_length=4" / "nope" / "seed0")
    return root


@pytest.mark.parametrize("task, options", [("copy", {"train_length": 4}), ("reverse", {"train_length": 5})])
def test_a_run_of_another_task_or_options_is_broken_where_it_sits(stranger, task, options):
    from probe.runs.folders import find_runs, task_folder_name

    folder = stranger / task_folder_name(task, options)
    if not folder.exists():
        shutil.copytree(stranger / "copy+train_length=4", folder)
    runs, broken = find_runs(stranger, task, options)
    assert runs == [] and [path for path, _ in broken] == [folder / "nope" / "seed0"]
    assert "a run of reverse+train_length=4" in broken[0][1] and task_folder_name(task, options) in broken[0][1]
    everything, broken_anywhere = find_runs(stranger)  # the explorer's scan of the whole root says the same
    assert folder / "nope" / "seed0" in [path for path, _ in broken_anywhere]
    assert {r.label for r in everything} == {f"{FOLDER}/nope/seed0", f"{FOLDER}/t5/seed0", f"{FOLDER}/nope/seed1"}


def test_runs_in_their_own_folder_are_not_strangers(checkpoints):
    from probe.runs.folders import _folder_options, find_runs

    runs, _ = find_runs(checkpoints, "reverse", {"train_length": 4})
    assert len(runs) == 4  # nope seeds 0 and 1, t5, and the run with corrupt weights (broken when loaded)
    assert _folder_options("addition+scratchpad=I+C+train_length=8") == (
        "addition",
        {"scratchpad": "I+C", "train_length": 8},
    )
    assert _folder_options("my-own-runs") is None


def test_a_moved_run_named_by_its_path_is_labelled_by_its_config(stranger):
    """Named by its folder it is read (the user asked for it), as the reverse run it is, outside the layout."""
    from probe.runs.folders import Run

    moved = Run.of(stranger / "copy+train_length=4" / "nope" / "seed0")
    assert not moved.in_layout and moved.task_folder == FOLDER
    assert moved.label == f"{FOLDER}/nope/seed0 (seed0)"
    assert Run.of(stranger / FOLDER / "nope" / "seed0").in_layout


def test_eval_compare_and_distances_do_not_read_it_as_the_folders(stranger, capsys):
    run = stranger / "copy+train_length=4" / "nope" / "seed0"
    before = (run / "eval.json").read_bytes()
    copy = ["--task", "copy", "-o", "train_length=4", "--checkpoints", str(stranger)]
    capsys.readouterr()
    assert main(["eval", *copy, "--n", "2", "--valid", "2"]) == 2
    captured = capsys.readouterr()
    assert "skipping" in captured.out and "a run of reverse+train_length=4" in captured.out
    assert "no runs of copy+train_length=4" in captured.err
    assert (run / "eval.json").read_bytes() == before
    _refused(capsys, ["compare", "nope", *copy], "a run of reverse+train_length=4")
    _refused(capsys, ["distances", *copy], "no complete runs")
    assert main(["extrapolate", *copy, "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "skipping" in captured.out and "no runs of copy+train_length=4" in captured.err


@pytest.mark.parametrize(
    "command",
    [
        ["distances", "--n-per-bucket", "1"],
        ["positions", "--n-per-bucket", "2"],
        ["compare", "nope", "--n-per-bucket", "1", "--no-baseline"],  # A with every other PE found
    ],
)
def test_a_broken_run_the_task_holds_is_said_when_the_others_are_read(checkpoints, tmp_path, capsys, command):
    """distances, positions and compare-with-every-other-PE read the task folder's good runs and say each broken
    entry beside them (a config that is not JSON, one that is no run), as eval and extrapolate do."""
    root = tmp_path / "ck"
    shutil.copytree(checkpoints / FOLDER, root / FOLDER, ignore=shutil.ignore_patterns("rotary"))
    flags = ["--task", "reverse", "-o", "train_length=4", "--checkpoints", str(root), "--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert main([*command, *flags]) == 0
    out = capsys.readouterr().out
    skipped = [line.split(":")[0] for line in out.splitlines() if line.startswith("skipping ")]
    assert skipped == [f"skipping {root / FOLDER / pe / 'seed0'}" for pe in ("alibi", "ape")]


# -- 8: probe reproduce --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, says",
    [
        (["--n-per-bucket", "0"], "--n-per-bucket must be at least 1, got 0"),
        (["--n-per-bucket", "-1"], "--n-per-bucket must be at least 1, got -1"),
        (["--out", "FILE"], "is a file, not a folder, and probe reproduce writes its report there"),
        (["--summaries", "FILE"], "is a file, not a folder, and probe reproduce writes each scenario's summary"),
        (["--checkpoints", "FILE"], "is a file, not a folder, and probe reproduce writes its runs there"),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_reproduce_checks_what_it_reads_after_training_before_it(
    tmp_path, capsys, nothing_starts, flags, says, dry_run
):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    given = [str(afile) if flag == "FILE" else flag for flag in flags]
    root = [] if "--checkpoints" in flags else ["--checkpoints", str(tmp_path / "ck")]
    _refused(
        capsys,
        ["reproduce", "--task", "scan", "--steps", "1", *root, *given, *(["--dry-run"] if dry_run else [])],
        says,
    )
    assert afile.read_text() == "mine" and not (tmp_path / "ck").exists()


# -- 9: messages -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["compare", "nope", "t5"], ["distances"], ["positions"], ["perplexity", "RUN"], ["extrapolate", "RUN"]],
)
def test_out_naming_a_file_says_it_is_a_file(checkpoints, run, tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    args = [run if part == "RUN" else part for part in command]
    task = ["--task", "reverse", "-o", "train_length=4"] if command[0] != "perplexity" else []
    err = _refused(capsys, [*args, *task, "--checkpoints", checkpoints, "--out", afile], "is a file, not a folder")
    assert "read-only" not in err and afile.read_text() == "mine"


@pytest.mark.parametrize(
    "command", [["compare", "nope", "t5", "--task", "reverse", "-o", "train_length=4"], ["perplexity", "RUN"]]
)
def test_a_pe_option_no_pe_has_is_refused_as_eval_refuses_it(checkpoints, run, capsys, command):
    args = [run if part == "RUN" else part for part in command]
    _refused(capsys, [*args, "--checkpoints", checkpoints, "-p", "bogus=1"], "the option(s) bogus")


def test_eval_points_code_models_to_perplexity(run, tmp_path, capsys):
    _refused(capsys, ["eval", "--task", "code", "--checkpoints", tmp_path], "use `probe perplexity`")
    code = Path(shutil.copytree(run, tmp_path / "code" / "nope" / "seed0"))
    config = json.loads((code / "config.json").read_text())
    config["task"] = {"name": "code", "options": {}}
    (code / "config.json").write_text(json.dumps(config))
    _refused(capsys, ["eval", code, "--out", tmp_path / "out"], "is a code model; probe eval scores")


def test_a_head_temperature_folder_is_said_to_be_a_folder(run, tmp_path, capsys):
    err = _refused(
        capsys, ["eval", run, "--intervene", f"head-temperature={tmp_path}", "--out", tmp_path / "o"], "is a folder"
    )
    assert "--checkpoints or --out" not in err


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--task", "reverse", "-o", "train_length=4", "--pe", "nope", "--steps", "1"],
        ["import", str(AUTHORS)],
        ["tasks", "show", "copy", "--n", "1"],
        ["compare", "nope", "t5", "--task", "reverse", "-o", "train_length=4"],
        ["theorem", "--max-length", "4"],
    ],
)
def test_a_negative_seed_is_refused_at_the_flag(tmp_path, capsys, monkeypatch, command):
    import probe.commands.train

    def trained(*args, **kwargs):
        raise AssertionError("training started before --seed was checked")

    monkeypatch.setattr(probe.commands.train, "train_with_progress", trained)
    root = [] if command[0] in ("tasks", "theorem") else ["--checkpoints", str(tmp_path)]
    _refused(capsys, [*command, *root, "--seed", "-1"], "--seed must not be negative, got -1")
    assert not list(tmp_path.rglob("seed-1"))
