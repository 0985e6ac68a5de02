"""`probe perplexity` over several runs: every run of one table reads the same prepared corpus (a vocabulary
or held-out split of its own is one line, not another run's tokens), two runs with one label keep their own
numbers in every table and legend, and the hint `probe pretrain` prints finds the runs it trained."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model

from probe.analysis.perplexity import perplexity_report
from probe.cli import build_parser, main
from probe.corpus import CorpusSpec
from probe.errors import ProbeError
from probe.runs.folders import run_dir
from probe.training.bookkeeping import train_run
from probe.training.train_config import TrainConfig

CPU = torch.device("cpu")
T = 16
MODEL = tiny_model(1, n_ctx=3 * T)


def _train(root, options: dict, steps: int, pe: str = "nope"):
    config = TrainConfig(
        task="code", pe=pe, steps=steps, batch_size=4, eval_examples=2, task_options=options, model=MODEL
    )
    return train_run(config, run_dir(root, "code", pe, 0, CorpusSpec.from_options(options).given()), CPU).path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, code_corpus):
    """NoPE on the session's corpus: trained 1 and 12 steps under two checkpoints folders with the same options
    (the same prepared corpus, made twice), and runs of another vocabulary and another held-out split."""
    options = {"corpus": str(code_corpus), "vocab_size": 300, "context": T, "heldout": 0.5}
    first, second, other = (tmp_path_factory.mktemp(name) for name in ("first", "second", "other"))
    return SimpleNamespace(
        short=_train(first, options, 1),
        long=_train(second, options, 12),
        vocab=_train(other, {**options, "vocab_size": 320}, 1),
        heldout=_train(other, {**options, "heldout": 0.25}, 1),
    )


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


# -- one prepared corpus per table ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "other, says", [("vocab", "its vocab_size 320, not 300"), ("heldout", "its heldout 0.25, not 0.5")]
)
def test_runs_of_another_vocabulary_or_split_are_not_scored_on_the_first_ones_tokens(
    runs, capsys, tmp_path, other, says
):
    """Before, only the source files' fingerprint was compared: the second run read the first's token ids (another
    vocabulary: wrong numbers, or an IndexError the other way round) and held-out files it had trained on."""
    for names in ([runs.short, getattr(runs, other)], [getattr(runs, other), runs.short]):
        with pytest.raises(ProbeError, match="another prepared corpus"):
            perplexity_report(names, max_files=2)
        assert main(["perplexity", *map(str, names), "--device", "cpu", "--out", str(tmp_path)]) == 2
        assert f"its {says.split()[1]} " in one_line_error(capsys)  # which option differs, either way round
    assert not any(tmp_path.iterdir())
    with pytest.raises(ProbeError, match=says):
        perplexity_report([runs.short, getattr(runs, other)], max_files=2)


def test_runs_of_the_same_options_in_two_checkpoints_folders_are_scored_together(runs):
    report = perplexity_report([runs.short, runs.long], max_files=4)
    alone = perplexity_report([runs.long], max_files=4)
    torch.testing.assert_close(report.runs[1].nll, alone.runs[0].nll, equal_nan=True)


# -- one label, two runs -------------------------------------------------------------------------------
def test_two_runs_with_one_label_keep_their_own_numbers_in_every_table(runs, monkeypatch):
    from probe.commands.perplexity import _table
    from probe.figures import perplexity_figure

    monkeypatch.setenv("COLUMNS", "300")
    report = perplexity_report([runs.short, runs.long], max_files=4)
    labels = [r.label for r in report.runs]
    assert labels == [f"nope ({runs.short.parents[2].name})", f"nope ({runs.long.parents[2].name})"]
    alone = [perplexity_report([path], max_files=4) for path in (runs.short, runs.long)]
    by_run = [
        [row["perplexity"] for row in report.to_rows() if row["run"] == label and row["bucket"] == "all"]
        for label in labels
    ]
    expected = [[row["perplexity"] for row in a.to_rows() if row["bucket"] == "all"] for a in alone]
    for got, want in zip(by_run, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-9)
    assert by_run[0] != pytest.approx(by_run[1])
    markdown = report.to_markdown().split("\n\n")[2].splitlines()[2:]  # the "all" block's rows
    assert [line.split(" | ")[1] for line in markdown] == [f"{v:.3f}" for v in (by_run[0][0], by_run[1][0])]
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(_table(report))
    lines = [line for line in console.export_text().splitlines() if "nope (" in line]
    assert [line.split("│")[2].strip() for line in lines] == [f"{v:.4g}" for v in (by_run[0][0], by_run[1][0])]
    figure = perplexity_figure(report.to_rows(), T, "t")
    assert {trace.name for trace in figure.data} == set(labels)


def test_labels_are_told_apart_by_their_folders_else_by_their_place():
    from probe.analysis.perplexity import distinct_labels

    assert distinct_labels(
        ["nope", "rotary", "nope"], ["ck/code/nope/seed0", "ck/code/rotary/seed0", "ck2/code/nope/seed0"]
    ) == [
        "nope (ck)",
        "rotary",
        "nope (ck2)",
    ]
    assert distinct_labels(["nope", "nope"], ["a/b/nope/seed0", "a/b/nope/seed0"]) == ["nope #1", "nope #2"]
    assert distinct_labels(["x", "x"], ["r/code/x", "r/code+vocab=1/x"]) == ["x (code)", "x (code+vocab=1)"]


# -- the hint after `probe pretrain` -------------------------------------------------------------------
def test_the_hint_after_pretrain_finds_the_runs_it_trained(tmp_path, capsys):
    """A preset's context, a vocabulary, a held-out split and a seed other than 0 name where the runs are: the
    hinted `probe perplexity` arguments, parsed as the command parses them, find the run (before, only --corpus
    and a --context given made it into the hint)."""
    from probe.commands.perplexity import _runs

    root, corpus = tmp_path / "ck", tmp_path / "long"
    corpus.mkdir()
    for i in range(12):  # held-out files of more than the preset's 256 tokens (its held-out loss reads windows)
        (corpus / f"m{i:02d}.py").write_text("".join(f"def f{j}(x):\n    return x * {j} + {i}\n\n" for j in range(60)))
    model = [arg for key, value in tiny_model(1).items() for arg in ("-m", f"{key}={value}")]
    flags = ["--corpus", str(corpus), "--vocab-size", "300", "--heldout", "0.25", "--preset", "small"]
    argv = ["pretrain", *flags, "--seed", "1", "--pe", "nope", *model, "--steps", "1", "--batch-size", "2"]
    assert main([*argv, "--jobs", "1", "--checkpoints", str(root), "--device", "cpu"]) == 0
    hint = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("next: "))
    words = shlex.split(hint.removeprefix("next: "))
    assert words[:2] == ["probe", "perplexity"]
    args = build_parser().parse_args(words[1:])
    assert [(run.pe, run.seed, run.path.parents[2]) for run in _runs(args)] == [("nope", 1, root)]


def test_a_report_with_no_cell_is_one_line_not_an_empty_csv(runs, monkeypatch):
    """Files of 50 to 71 tokens at T = 100 fill no bucket (from 48, 24 wide, read from 50) and reach no 2.5 T."""
    import probe.analysis.perplexity as perplexity

    plan = perplexity.ScoringPlan.scaled(100)
    nll = torch.ones(1, len(plan.contexts), dtype=torch.float64)
    empty = perplexity.PerplexityReport(
        plan, ["a.py"], torch.tensor([55]), [perplexity.RunPerplexity("n", "nope", "x", nll)]
    )
    assert empty.to_rows() == []
    monkeypatch.setattr(perplexity, "_read", lambda *args: empty)
    with pytest.raises(ProbeError, match="nothing to score"):
        perplexity.perplexity_report([runs.short])
