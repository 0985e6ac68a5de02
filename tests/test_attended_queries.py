"""Which queries the attended distance counts (Section 6.1): every output token, as the paper's text reads, or a
scratchpad's answer alone, as the released notebook's figure keeps them (``query_region == "output"``, the tokens
its tokenization labels after the scratchpad's end marker)."""

from __future__ import annotations

import json

import pytest

from probe.cli import main
from probe.subjects.examples import sample_buckets
from probe.subjects.inputs import ExampleGroup
from probe.tasks import Tokenizer, get

MODEL = ["-m", "n_layers=1", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]


@pytest.mark.parametrize(
    ("options", "marker"),
    [
        ({"scratchpad": "full"}, ". Thus,"),  # the authors' words, the default with a scratchpad
        ({"scratchpad": "C", "template": "figure"}, "</scratch>"),
        ({}, None),  # no scratchpad: the answer is the whole target
    ],
)
def test_the_answers_queries_are_the_tokens_after_the_scratchpads_end(options, marker):
    """The tokens from each example's answer start decode to the text after the target's first end marker (split
    by hand here), then <eos>; without a scratchpad they are the whole target."""
    task = get("addition", train_length=3, **options)
    tokenizer = Tokenizer.for_task(task, authors=task.options.get("template") == "authors")
    buckets = sample_buckets(task, n_per_bucket=2, seed=0, lengths="unseen")
    group = ExampleGroup(buckets, tokenizer, task)
    examples = [e for b in buckets for e in b.examples]
    assert examples and len(group.answer_starts) == len(examples)
    for example, (ids, target_start), answer_start in zip(examples, group.encoded, group.answer_starts):
        answer = example.target if marker is None else example.target.split(marker, 1)[1]
        assert tokenizer.decode(ids[answer_start:]) == " ".join(answer.split())
        assert ids[-1] == tokenizer.eos_id and target_start <= answer_start < len(ids)
        assert (answer_start == target_start) == (marker is None)
    assert group.answer_queries == sum(len(ids) - start for (ids, _), start in zip(group.encoded, group.answer_starts))


def test_distances_counts_the_answers_queries_alone_when_asked(tmp_path, capsys):
    """On an addition + full scratchpad run: the answer's queries are a few of the output's, each counted over
    every layer and head, and their distribution is not the output's."""
    folder = str(tmp_path / "runs")
    train = ["train", "--task", "addition", "--scratchpad", "full", "-o", "train_length=3", "--pe", "nope"]
    assert main([*train, "--steps", "2", *MODEL, "--no-eval", "--checkpoints", folder]) == 0
    read = {}
    for queries in ("output", "answer"):
        out = tmp_path / queries
        argv = ["distances", "--task", "addition", "--scratchpad", "full", "-o", "train_length=3"]
        assert (
            main([*argv, "--queries", queries, "--n-per-bucket", "2", "--checkpoints", folder, "--out", str(out)]) == 0
        )
        stem = "attended_distance" if queries == "output" else "attended_distance_answer"
        read[queries] = json.loads((out / f"{stem}.json").read_text())
        assert read[queries]["queries"] == queries
    capsys.readouterr()
    task = get("addition", train_length=3, scratchpad="full")
    group = ExampleGroup(sample_buckets(task, 2, 0, "unseen"), Tokenizer.for_task(task, authors=True), task)
    output, answer = (read[q]["runs"][0] for q in ("output", "answer"))
    assert (output["n_queries"], answer["n_queries"]) == (
        group.queries * 2,
        group.answer_queries * 2,
    )  # 1 layer, 2 heads
    assert answer["n_queries"] < output["n_queries"] / 3
    assert answer["weightings"]["argmax"]["histogram"] != output["weightings"]["argmax"]["histogram"]


def test_an_unknown_choice_of_queries_is_one_line(tmp_path, capsys):
    from probe.analysis import attended_distance_report
    from probe.errors import ProbeError

    with pytest.raises(ProbeError, match="unknown queries 'scratchpad'; accepted: output, answer"):
        attended_distance_report([str(tmp_path)], queries="scratchpad")
