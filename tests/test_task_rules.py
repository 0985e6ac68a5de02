"""The task builders against the authors' rules (McGill-NLP/length-generalization).

Each hand-worked example below was derived by reading the authors' dataset builders
(``scripts/dataset_builders/make_*_dataset.py``) and instance processors
(``src/data/data_instance_processor/*``): what the answer of an instance is, how its length bucket
λ is counted, and which lengths each split holds. The texts are written in probe's format (the
paper's Table tab:dataset-examples where probe follows it; see docs/paper-splits.md for where the
authors' wording differs). The grid checks read ``probe/studies/grids/section3.toml`` itself, so a
scenario added there is checked here too.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import pytest

from probe.presets import PRESETS
from probe.studies.sweep.grid import expand_grid, load_grid
from probe.tasks import Tokenizer, get
from probe.tasks.base import FiniteTask
from probe.tasks.lego import VARIABLES
from probe.tasks.pcfg import BINARY, UNARY
from probe.tasks.sorting import TOKENS

N_CTX = 1024  # probe.models.model_config.ModelConfig.n_ctx; no task preset overrides it


@cache
def scenarios(grid: str) -> tuple[tuple[str, tuple[tuple[str, object], ...]], ...]:
    """Each distinct (task, options) of ``grid``, in grid order."""
    seen: dict[tuple, None] = {}
    for run in expand_grid(load_grid(grid), "/tmp/unused-probe-root"):
        seen[(run.config.task, tuple(sorted(run.config.task_options.items())))] = None
    return tuple(seen)


SECTION3 = scenarios("section3")
SECTION3_IDS = [f"{name}{dict(options) or ''}" for name, options in SECTION3]


def test_section3_has_the_papers_17_scenarios():
    count = Counter(name for name, _ in SECTION3)
    assert count == {
        "copy": 5,
        "reverse": 3,
        "sorting": 2,
        **{t: 1 for t in ("scan", "pcfg", "addition", "polynomial", "summation", "parity", "lego")},
    }


def test_every_preset_has_the_context_the_checks_assume():
    assert all(PRESETS[p].get("n_ctx", N_CTX) == N_CTX for p in ("tiny", "small", "base"))


# --- lengths and splits ------------------------------------------------------------------------


@pytest.mark.parametrize("name, options", SECTION3, ids=SECTION3_IDS)
def test_section3_lengths_and_buckets(name, options):
    """train and valid only on λ <= L; test reaches 2L and holds unseen lengths; every bucket drawn."""
    task = get(name, **dict(options))
    big = 2 * task.train_length
    finite = isinstance(task, FiniteTask)
    train = Counter(e.length for e in task.examples("train", n=None if finite else 4000))
    valid = Counter(e.length for e in task.examples("valid", n=None if finite else 1000))
    test = Counter(e.length for e in task.examples("test", n=None if finite else 4000))
    assert max(train) <= task.train_length and max(valid) <= task.train_length
    assert max(test) == big or (name == "scan" and max(test) == 48)  # SCAN's longest command has 48 actions
    assert any(length > task.train_length for length in test)
    assert all(task.is_seen(n) for n in train) and not any(task.is_seen(n) for n in test if n > task.train_length)
    if dict(options).get("split") == "paper" and name in ("copy", "reverse"):
        # make_copy_dataset / make_reverse_dataset: train bins 2..20 (the released runs' valid_acc_2..20),
        # test bins L+1..2L only (test_min = train_max + 1, test_max = 2 * train_max)
        assert set(train) == set(valid) == set(range(2, 21)) and set(test) == set(range(21, 41))
    elif not finite:
        # Section 3's generative process: λ ~ U(1, L) for train and valid, U(1, 2L) for test
        assert set(train) == set(range(1, task.train_length + 1)) and set(test) == set(range(1, big + 1))
        assert max(test.values()) < 2 * min(test.values())


@pytest.mark.parametrize("name, options", SECTION3, ids=SECTION3_IDS)
def test_section3_default_sizes(name, options):
    """What a study trains and tests on when it asks for the default sizes."""
    task = get(name, **dict(options))
    sizes = {split: len(task.examples(split)) for split in ("train", "valid", "test")}
    if name == "scan":  # the authors' mdlen_tr25_ts48: 17,774 commands on the train side, 3,136 in test
        assert sizes["train"] + sizes["valid"] == 17_774 and sizes["test"] == 3_136
    elif name == "pcfg":  # PCFG SET's productivity train file (81,010 inputs) over λ 1..8; 1,000 per λ 9..16
        assert sizes["train"] + sizes["valid"] == 81_010 and sizes["test"] == 8_000
    else:  # the authors' 100K / 15% / 10K, scaled down for a CPU
        assert sizes == {"train": 10_000, "valid": 1_000, "test": 2_000}


def test_scan_paper_buckets_are_the_authors():
    """make_scan_dataset: category = number of output actions, test = more than 25 (the released
    runs' test_acc_* keys: 26, 27, 28, 30, 32, 33, 36, 40, 48)."""
    task = get("scan", split="paper")
    test = Counter(e.length for e in task.examples("test"))
    assert sorted(test) == [26, 27, 28, 30, 32, 33, 36, 40, 48]
    assert all(e.length == len(e.target.split()) for e in task.examples("train"))


def test_pcfg_bucket_is_the_number_of_functions():
    """make_pcfg_dataset: category = how many source tokens are function names; productivity: train <= 8."""
    task = get("pcfg")
    names = set(UNARY) | set(BINARY)
    for split in ("train", "valid", "test"):
        for e in task.examples(split):
            assert e.length == sum(word in names for word in e.source.split())
    assert {e.length for e in task.examples("train")} == set(range(1, 9))
    assert {e.length for e in task.examples("test")} == set(range(9, 17))


# --- formats: one hand-worked example per task --------------------------------------------------


def test_addition_example():
    # make_addition_dataset: {"a": 53726, "b": 1917, "sum": 55643, "cat": "5-by-4"}; the authors'
    # plots bucket "a-by-b" at max(a, b) digits (notebooks/plot_aggregate_final: get_category)
    e = get("addition").example_for(53726, 1917)
    assert (e.source, e.target, e.length) == ("Compute: 5 3 7 2 6 + 1 9 1 7 ?", "The answer is 5 5 6 4 3.", 5)
    e = get("addition").example_for(7, 99999999)  # a carry into a new digit; the shorter number first
    assert (e.target, e.length) == ("The answer is 1 0 0 0 0 0 0 0 6.", 8)


def test_polynomial_example():
    # make_poly_dataset (modular): ans = sum(c * x ** d) % 10 with Python's %, so never negative:
    # x = -2, terms -3 x^3 + 2 x^0 -> 24 + 2 = 26 -> 6; x = -2, 3 x^1 -> -6 -> 4; cat = number of terms
    task = get("polynomial")
    e = task.example_for(-2, [(-3, 3), (2, 0)])
    assert (e.source, e.target, e.length) == (
        "Evaluate x = -2 in ( -3 x ** 3 + 2 x ** 0 ) % 10 ?",
        "The answer is 6.",
        2,
    )
    assert task.example_for(-2, [(3, 1)]).target == "The answer is 4."


def test_sorting_examples():
    # make_sort_dataset: single-token sorts by the alphabet's fixed order (its index), multi-digit
    # sorts numbers ascending; cat = number of items
    single, multi = get("sorting"), get("sorting", variant="multi-digit")
    e = single.example_for(["b", "A", "3", "A"])
    assert (e.source, e.target, e.length) == (
        "Sort the following numbers: b A 3 A ?",
        "The answer is 3 A A b.",
        4,
    )
    e = multi.example_for([31, 4017, 9])
    assert (e.source, e.target, e.length) == (
        "Sort the following numbers: 3 1, 4 0 1 7, 9 ?",
        "The answer is 9, 3 1, 4 0 1 7.",
        3,
    )
    assert len(TOKENS) == 50  # the authors' get_unique_tokens()[:50]


def test_summation_example():
    # make_sum_dataset --modular: values ~ randint(1, 10), answer = sum % 10 (9 + 8 + 7 = 24 -> 4)
    e = get("summation").example_for([9, 8, 7])
    assert (e.source, e.target, e.length) == ("Compute: ( 9 + 8 + 7 ) % 10 ?", "The answer is 4.", 3)


def test_parity_example():
    # make_parity_dataset: answer = sum % 2; the processor's NICE_VALUES: 0 -> Yes (even), 1 -> No
    task = get("parity")
    e = task.example_for([1, 0, 1, 1])
    assert (e.source, e.target, e.length) == ("Is the number of 1's even in [ 1 0 1 1 ] ?", "The answer is No.", 4)
    assert task.example_for([1, 1]).target == "The answer is Yes."


def test_lego_example_and_queries():
    # make_lego_dataset: first clause "v0 = value", then "vi = (+ if equal to v(i-1) else -) v(i-1)";
    # queries: indices from n // 2 (n even) or n // 2 + 1 (n odd) to n - 1; cat = (n, query index)
    e = get("lego").example_for(list("abcd"), [-1, -1, 1, 1], 2, [0, 1, 2, 3])
    assert (e.source, e.target, e.length) == (
        "If a = -1; b = +a; c = -b; d = +c. Then what is c?",
        "The answer is +1.",
        4,
    )
    task = get("lego")
    for e in task.examples("test", n=500):
        clauses = e.source[3:].split(". Then")[0].split("; ")
        names = [c.split(" = ")[0] for c in clauses]
        query = e.source.rsplit(" ", 1)[1][:-1]
        index = names.index(query)
        first = (e.length + 1) // 2 if e.length > 1 else 0
        assert first <= index <= e.length - 1
        assert e.target == "The answer is " + ("+1." if resolve(clauses)[query] > 0 else "-1.")


def resolve(clauses: list[str]) -> dict[str, int]:
    """Each variable's value, read off the clauses in chain order (the authors' truth_values)."""
    values: dict[str, int] = {}
    for clause in clauses:
        name, rhs = clause.split(" = ")
        values[name] = int(rhs) if rhs in ("+1", "-1") else (1 if rhs[0] == "+" else -1) * values[rhs[1:]]
    return values


def test_copy_and_reverse_examples_follow_the_authors_processors():
    # s2s_copy processor: "Copy: {src}" or "Replace {source_char} with {target_char} in {src}";
    # rsc: target = the source; rsc2x: the word 2n times, no [NEXT]; cmc2x: src [NEXT] src;
    # s2s_reverse: "Reverse: {src}"; mcrv: reversed [NEXT] src
    cases = [
        ("copy", "count", ["w5"] * 3, "Copy: w5 w5 w5", "w5 w5 w5"),
        ("copy", "count-2x", ["w5"] * 3, "Copy: w5 w5 w5", "w5 w5 w5 w5 w5 w5"),
        ("copy", "random-2x", ["w1", "w2"], "Copy: w1 w2", "w1 w2 [NEXT] w1 w2"),
        ("reverse", "twice", ["w1", "w2", "w3"], "Reverse: w1 w2 w3", "w3 w2 w1 [NEXT] w1 w2 w3"),
    ]
    for name, variant, words, source, target in cases:
        e = get(name, split="paper", variant=variant).example_for(words)
        assert (e.source, e.target, e.length) == (source, target, len(words))
    e = get("copy", split="paper", variant="replace").example_for(["w6"] * 3, "w9")
    assert (e.source, e.target, e.length) == ("Replace w6 with w9 in w6 w6 w6", "w9 w9 w9", 3)


def test_copy_count_draws_one_word_repeated():
    for e in get("copy", split="paper", variant="count").examples("test", n=200):
        assert len(set(e.source.split()[1:])) == 1 and e.target == " ".join(e.source.split()[1:])


def test_scan_examples():
    # the authors' scan_bos processor: "Solve: {command}"; actions as in SCAN (category = how many)
    by_source = {e.source: e for e in get("scan", split="paper").dataset()}
    e = by_source["Solve: walk after turn right"]
    assert (e.target, e.length) == ("TURN_RIGHT WALK", 2)
    e = by_source["Solve: jump opposite left twice and look around right twice"]
    assert e.target == " ".join(["TURN_LEFT TURN_LEFT JUMP"] * 2 + ["TURN_RIGHT LOOK"] * 8) and e.length == 22


def test_pcfg_example():
    # the authors' pcfg processor's own example (PCFG SET productivity data), 5 functions
    source = "echo append copy Q10 E4 S15 P7 , shift remove_second K15 D8 M9 W5 , H12 Q5 G10 J6 J10"
    x, y, z = "Q10 E4 S15 P7".split(), "K15 D8 M9 W5".split(), "H12 Q5 G10 J6 J10".split()
    value = UNARY["echo"](BINARY["append"](UNARY["copy"](x), UNARY["shift"](BINARY["remove_second"](y, z))))
    assert " ".join(value) == "Q10 E4 S15 P7 D8 M9 W5 K15 K15"
    assert sum(w in UNARY or w in BINARY for w in source.split()) == 5


# --- no sequence over the context -----------------------------------------------------------------


def longest(name: str, options: dict, length: int):
    """The longest instance of bucket ``length`` each task can build (worst-case values)."""
    task = get(name, **options)
    if name in ("copy", "reverse"):
        words = ["w99"] * length
        return task.example_for(words, "w98") if options.get("variant") == "replace" else task.example_for(words)
    if name == "addition":
        return task.example_for(10**length - 1, 10**length - 1)
    if name == "polynomial":
        return task.example_for(-2, [(-3, 3)] * length)
    if name == "sorting":
        return task.example_for([9999] * length if options.get("variant") == "multi-digit" else ["n"] * length)
    if name == "summation":
        return task.example_for([9] * length)
    if name == "parity":
        return task.example_for([1] * length)
    if name == "lego":
        return task.example_for(
            list(VARIABLES[:length]), [-1, 1] * (length // 2) + [-1] * (length % 2), length - 1, list(range(length))
        )
    raise KeyError(name)


def tokens(name: str, options: dict) -> int:
    """The most positions a sequence of the task takes at 2L, in either sequence format."""
    task = get(name, **options)
    if isinstance(task, FiniteTask):
        examples = task.dataset()
    else:
        examples = [longest(name, options, 2 * task.train_length)]
    most = 0
    for authors in (False, True):
        tokenizer = Tokenizer.for_task(task, authors=authors)
        most = max(most, *(len(tokenizer.encode_example(e)[0]) for e in examples))
    return most


@pytest.mark.parametrize("name, options", SECTION3, ids=SECTION3_IDS)
def test_section3_fits_the_context(name, options):
    assert tokens(name, dict(options)) <= N_CTX


SCRATCHPAD = [
    (run.config.task, run.config.task_options, run.config.model.get("n_ctx", N_CTX))
    for run in expand_grid(load_grid("paper"), "/tmp/unused-probe-root")
    if run.config.task_options.get("scratchpad") and run.config.seed == 0 and run.config.pe == "nope"
]


def test_section5_scratchpads_fit_their_context():
    """Each scratchpad scenario's longest sequence at 2L fits the context its grid block gives it."""
    assert len(SCRATCHPAD) == 4 * 7 + 2 * 6 + 6  # the formats of grids/paper.toml, as the authors generate them
    over = {
        f"{name} {options['scratchpad']}{' ' + options['variant'] if 'variant' in options else ''}": (n, n_ctx)
        for name, options, n_ctx in SCRATCHPAD
        if (n := tokens(name, dict(options))) > n_ctx
    }
    assert not over, f"longest sequences at 2L over their n_ctx: {over}"


def test_section6_fits_its_context():
    """The Section 6 study's runs (grids/section6.toml: scratchpads and baselines in the authors' words)
    each fit the context their block gives them at 2L."""
    runs = [run for run in expand_grid(load_grid("section6"), "/tmp/unused-probe-root") if run.config.pe == "nope"]
    over = {
        run.path.parent.parent.name: (n, n_ctx)
        for run in runs
        if (n := tokens(run.config.task, dict(run.config.task_options)))
        > (n_ctx := run.config.model.get("n_ctx", N_CTX))
    }
    assert len(runs) == 27 and not over, f"longest sequences at 2L over their n_ctx: {over}"
