"""An evaluation says how far it has got: a scratchpad's examples are decoded token by token, the unended ones on to
the authors' 1,500 positions, which takes minutes where training took one, so `probe train`'s and `probe eval`'s
status lines count the examples scored."""

from __future__ import annotations

from pathlib import Path

from test_scratchpad_template import Scripted

from probe.analysis.evaluation import evaluate_run
from probe.subjects.settings import ReadSettings
from probe.tasks import Tokenizer, get
from probe.tasks.decoding import evaluate_examples


def test_decoding_tells_how_many_examples_are_scored_after_each_batch():
    task = get("addition", scratchpad="C")
    tokenizer = Tokenizer.for_task(task)
    examples = [task.example_for(seed, length) for seed, length in enumerate((2, 2, 2, 3, 3))]
    heard: list[int] = []
    model = Scripted(tokenizer.encode(examples[0].target) + [tokenizer.eos_id], len(tokenizer))
    evaluate_examples(
        model,
        tokenizer,
        examples,
        batch_size=2,
        use_cache=False,
        answer_of=task.answer_reader(),
        on_scored=heard.append,
    )
    steps = [b - a for a, b in zip([0, *heard], heard)]
    assert heard[-1] == 5 and len(heard) >= 3 and all(1 <= step <= 2 for step in steps)  # a batch of 2 at most


def test_an_evaluation_hears_its_examples_scored(checkpoints: Path, tmp_path: Path):
    """A run scored in one teacher-forced pass says so once, at the end, with the whole count."""
    heard: list[tuple[str, int, int]] = []
    run = checkpoints / "reverse+train_length=4" / "nope" / "seed0"
    settings = ReadSettings(progress=lambda what, done, total: heard.append((what, done, total)))
    report = evaluate_run(run, settings, n_test=6, n_valid=4, out=tmp_path)
    assert heard == [("scoring", report.n_examples, report.n_examples)] and report.n_examples == 10
