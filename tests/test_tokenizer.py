"""The word-level tokenizer: special ids, exact round trips for every task, clear errors."""

from __future__ import annotations

import json

import pytest

from probe.errors import ProbeError
from probe.tasks import SCRATCHPAD_TASKS, TASKS, Tokenizer, get
from probe.tasks.words import join_words, split_words

FIGURE = {"template": "figure"}
CONFIGS = [
    *(("copy", {"variant": v}) for v in ("count", "replace", "random", "count-2x", "random-2x")),
    *(("reverse", {"variant": v}) for v in ("random", "twice")),
    *((name, {}) for name in ("addition", "polynomial", "summation", "parity", "lego", "scan", "pcfg")),
    ("sorting", {"variant": "single-token"}),
    ("sorting", {"variant": "multi-digit"}),
    ("lego", {"shuffle": True}),
]
CONFIGS += [
    # updates (V) in the paper's figure's words where the authors' processor refuses them (sorting, LEGO)
    (name, {**options, "scratchpad": fmt, **({} if "V" not in fmt or get(name).AUTHORS_UPDATES else FIGURE)})
    for name, options in CONFIGS
    if name in SCRATCHPAD_TASKS
    for fmt in ("full", "empty", "C+V", "I+O+R")
]


def test_special_ids_come_first():
    tokenizer = Tokenizer(["a", "b"])
    assert tokenizer.vocab == ["<bos>", "<pad>", "<eos>", "<sep>", "a", "b"] and len(tokenizer) == 6
    assert (tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.sep_id) == (0, 1, 2, 3)
    assert tokenizer.encode("b a b") == [5, 4, 5]


@pytest.mark.parametrize("name, options", CONFIGS)
def test_every_example_round_trips(name, options):
    task = get(name, **options)
    tokenizer = Tokenizer.for_task(task)
    assert tokenizer.vocab[4:] == task.vocabulary()
    splits = ("train", "valid", "test")
    n = 120 if "scratchpad" in options else 300
    examples = [ex for split in splits for ex in task.examples(split, n=n)]
    for ex in examples:
        for text in (ex.source, ex.target):
            ids = tokenizer.encode(text)
            assert min(ids) >= 4 and tokenizer.decode(ids) == text
        ids, start = tokenizer.encode_example(ex)
        assert ids[0] == tokenizer.bos_id and ids[start - 1] == tokenizer.sep_id and ids[-1] == tokenizer.eos_id
        assert ids[:start] == tokenizer.encode_prompt(ex.source)
        assert tokenizer.decode(ids[start:]) == ex.target and tokenizer.decode(ids[:start]) == ex.source


def test_glued_punctuation_is_reversible():
    texts = [
        "The answer is 5 5 6 4 3.",
        "Which is equal to 3 .",
        "If a = -1; b = -a. Then what is b?",
        "3 1, 4 1 , 5",
        "5..",
    ]
    for text in texts:
        assert join_words(split_words(text)) == text
    assert split_words("is 3.") == ["is", "3", "##."] and split_words("3 .") == ["3", "."]
    assert split_words("1's") == ["1's"]
    # several marks come off in order; a word of marks alone keeps its first as its word
    assert split_words("a.b.,  x?") == ["a.b", "##.", "##,", "x", "##?"]
    assert split_words("... ;") == [".", "##.", "##.", ";"] and join_words(split_words("... ;")) == "... ;"


def test_unknown_words_are_named():
    tokenizer = Tokenizer.for_task(get("parity"))
    with pytest.raises(ProbeError) as error:
        tokenizer.encode("Is the number of 2's even in [ 1 0 ] ? banana")
    assert "2's" in str(error.value) and "banana" in str(error.value) and "\n" not in str(error.value)
    for text in ("<sep>", "The answer is <eos>"):
        with pytest.raises(ProbeError):
            tokenizer.encode(text)
    with pytest.raises(ProbeError):
        tokenizer.decode([len(tokenizer)])
    with pytest.raises(ProbeError):
        Tokenizer(["a", "<pad>"])


def test_decode_skips_specials():
    tokenizer = Tokenizer(["The", "answer", "is", "5", "##."])
    assert tokenizer.decode([0, 4, 5, 6, 7, 8, 2, 1, 1]) == "The answer is 5."


def test_json_round_trip():
    for name in TASKS:
        tokenizer = Tokenizer.for_task(get(name))
        data = json.loads(json.dumps(tokenizer.to_dict()))
        again = Tokenizer.from_dict(data)
        assert again.vocab == tokenizer.vocab
    for bad in ({}, {"kind": "bpe", "words": []}, {"kind": "word", "words": [], "specials": ["<s>"]}, []):
        with pytest.raises(ProbeError):
            Tokenizer.from_dict(bad)


def test_vocabulary_covers_unseen_lengths():
    """Built from the alphabet, the vocabulary already holds what only long test examples use."""
    task = get("addition", scratchpad="full", train_length=2)
    tokenizer = Tokenizer.for_task(task)
    test = task.examples("test", n=200)
    assert max(ex.length for ex in test) > 2  # lengths the training data never had
    for ex in test:
        assert tokenizer.decode(tokenizer.encode(ex.target)) == ex.target
