"""The tasks: the paper's ten answers re-derived by a computation written apart from the generators, and every
registered task's splits, determinism and vocabulary checked.

Each ``solve_*`` parses an example's source text and computes what the target must say (Python
integers, ``sorted``, sums modulo 10, counting ones, evaluating the polynomial, walking the LEGO
chain), plus what its scratchpad steps must output; the generators' code is not used. The per-task checks
read ``TASKS``, so a task added there is checked too (its answers by its own oracle test: docs/tasks.md).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter

import pytest

from probe.errors import ProbeError
from probe.tasks import FORMATS, SCRATCHPAD_TASKS, TASKS, Example, get
from probe.tasks.base import GeneratedTask
from probe.tasks.copy import VARIANTS as COPY_VARIANTS
from probe.tasks.reverse import VARIANTS as REVERSE_VARIANTS
from probe.tasks.scratchpad import final_answer
from probe.tasks.sorting import VARIANTS as SORTING_VARIANTS
from probe.tasks.words import split_words

NAMES = ["copy", "reverse", "addition", "polynomial", "sorting", "summation", "parity", "lego", "scan", "pcfg"]
"""The paper's ten tasks, in the order `probe tasks` lists them."""
CHECKED_OPTIONS: dict[str, list[dict]] = {
    "copy": [{"variant": v} for v in COPY_VARIANTS],
    "reverse": [{"variant": v} for v in REVERSE_VARIANTS],
    "sorting": [{"variant": v} for v in SORTING_VARIANTS],
    "lego": [{}, {"shuffle": True}],
    "pcfg": [{"train_size": 400, "size_per_length": 50}],  # a small dataset, quick to generate
}
"""The option sets the per-task checks build each task with; a task not named here, with its defaults."""
CASES = [(name, options) for name in TASKS for options in CHECKED_OPTIONS.get(name, [{}])]
GENERATED = [(name, options) for name, options in CASES if issubclass(TASKS[name], GeneratedTask)]


# --- independent solutions -------------------------------------------------------------------


def answer(text: str) -> str:
    return f"The answer is {text}."


def solve_copy(source: str, options: dict) -> dict:
    variant = options["variant"]
    if variant == "replace":
        m = re.fullmatch(r"Replace (\S+) with (\S+) in the following words: (.*) \.", source)
        words = m[3].split()
        assert set(words) == {m[1]} and m[2] != m[1]
        return {"answer": " ".join([m[2]] * len(words)), "length": len(words)}
    twice = variant.endswith("2x")
    m = re.fullmatch(r"Copy the following words%s: (.*) \." % (" twice" if twice else ""), source)
    words = m[1].split()
    if variant.startswith("count"):
        assert len(set(words)) == 1
    return {"answer": " ".join(words * (2 if twice else 1)), "length": len(words)}


def solve_reverse(source: str, options: dict) -> dict:
    prompt = {"random": "", "twice": " twice", "random-2x": ", twice over"}[options["variant"]]
    m = re.fullmatch(rf"Reverse the following words{prompt}: (.*) \.", source)
    words = m[1].split()
    second = {"twice": words, "random-2x": list(reversed(words))}.get(options["variant"], [])
    out = list(reversed(words)) + second
    return {"answer": " ".join(out), "length": len(words)}


def solve_addition(source: str, options: dict) -> dict:
    m = re.fullmatch(r"Compute: ([0-9 ]+) \+ ([0-9 ]+) \?", source)
    a_digits, b_digits = m[1].split(), m[2].split()
    for digits in (a_digits, b_digits):
        assert len(digits) == 1 or digits[0] != "0"
    total = int("".join(a_digits)) + int("".join(b_digits))
    columns = max(len(a_digits), len(b_digits))
    outputs = list(reversed(str(total)))  # one digit per column, least significant first
    assert len(outputs) in (columns, columns + 1)
    carries = [
        str(int(int("".join(a_digits[-k:]) or 0) + int("".join(b_digits[-k:]) or 0) >= 10**k))
        for k in range(1, len(outputs) + 1)
    ]
    remaining = [
        " ".join(filter(None, [" ".join(a_digits[:-k]), "+", " ".join(b_digits[:-k])]))
        for k in range(1, len(outputs) + 1)
    ]
    return {
        "answer": answer(" ".join(str(total))),
        "length": columns,
        "outputs": outputs,
        "updates": carries,
        "remaining": remaining,
    }


def solve_polynomial(source: str, options: dict) -> dict:
    m = re.fullmatch(r"Evaluate x = (-?\d) in \( (.*) \) % 10 \?", source)
    x = int(m[1])
    terms = [re.fullmatch(r"(-?\d) x \*\* (\d)", t).groups() for t in m[2].split(" + ")]
    assert -2 <= x <= 2
    values, sums, total = [], [], 0
    for c, d in terms:
        assert -3 <= int(c) <= 3 and 0 <= int(d) <= 3
        term = int(c) * x ** int(d)
        values.append(str(term))
        total += term
        sums.append(str(total % 10))
    written = m[2].split(" + ")
    remaining = [" + ".join(written[i + 1 :]) for i in range(len(written))]
    return {
        "answer": answer(str(total % 10)),
        "length": len(terms),
        "outputs": values,
        "updates": sums,
        "remaining": remaining,
    }


SINGLE_TOKENS = set("0123456789") | set("ABCDEFGHIJKLMNOPQRSTUVWXYZ") | set("abcdefghijklmn")


def solve_sorting(source: str, options: dict) -> dict:
    body = re.fullmatch(r"Sort the following numbers: (.*) \?", source)[1]
    if options["variant"] == "multi-digit":
        numbers = [int(item.replace(" ", "")) for item in body.split(", ")]
        assert all(0 <= n < 10_000 for n in numbers)
        shown = [" ".join(str(n)) for n in sorted(numbers)]
        separator = ", "
    else:
        shown = body.split()
        assert set(shown) <= SINGLE_TOKENS and len(SINGLE_TOKENS) == 50
        shown.sort()  # the canonical order is the tokens' ASCII order
        separator = " "
    listed = [f"[ {separator.join(shown[: i + 1])} ]" for i in range(len(shown))]
    # what remains unsorted after step i, as a multiset (the order inside is the algorithm's business)
    remaining = [sorted(shown[i + 1 :]) for i in range(len(shown))]

    def as_multiset(text: str) -> list[str]:
        inside = re.fullmatch(r"\[ ?(.*?) ?\]", text)[1]
        return sorted(inside.split(separator)) if inside else []

    return {
        "answer": answer(separator.join(shown)),
        "length": len(shown),
        "outputs": shown,
        "updates": listed,
        "remaining": remaining,
        "read_remaining": as_multiset,
    }


def solve_summation(source: str, options: dict) -> dict:
    numbers = [int(n) for n in re.fullmatch(r"Compute: \( (.*) \) % 10 \?", source)[1].split(" + ")]
    assert all(1 <= n <= 9 for n in numbers)
    running = [str(s % 10) for s in itertools.accumulate(numbers)]
    remaining = [" + ".join(map(str, numbers[i + 1 :])) for i in range(len(numbers))]
    return {
        "answer": answer(str(sum(numbers) % 10)),
        "length": len(numbers),
        "outputs": running,
        "updates": running,
        "remaining": remaining,
    }


def solve_parity(source: str, options: dict) -> dict:
    bits = re.fullmatch(r"Is the number of 1's even in \[ ([01 ]+) \] \?", source)[1].split()
    parities = [str(bits[: i + 1].count("1") % 2) for i in range(len(bits))]
    even = bits.count("1") % 2 == 0
    remaining = [" ".join(["[", *bits[i + 1 :], "]"]) for i in range(len(bits))]
    return {
        "answer": answer("Yes" if even else "No"),
        "length": len(bits),
        "outputs": parities,
        "updates": parities,
        "remaining": remaining,
    }


def solve_lego(source: str, options: dict) -> dict:
    m = re.fullmatch(r"If (.*)\. Then what is (\w)\?", source)
    clauses = dict(re.fullmatch(r"(\w) = ([+-]\w)", c).groups() for c in m[1].split("; "))
    assert len(clauses) == len(m[1].split("; "))  # every variable is defined once

    def value(var: str, depth: int = 0) -> int:
        assert depth <= len(clauses)
        rhs = clauses[var]
        if rhs[1:] == "1":
            return int(rhs)
        return (1 if rhs[0] == "+" else -1) * value(rhs[1:], depth + 1)

    # the chain, from the literal: each next variable is the one defined from the previous
    by_parent = {rhs[1:]: var for var, rhs in clauses.items() if rhs[1:] != "1"}
    chain = [next(var for var, rhs in clauses.items() if rhs[1:] == "1")]
    while chain[-1] in by_parent:
        chain.append(by_parent[chain[-1]])
    assert len(chain) == len(clauses)
    query = chain.index(m[2])
    assert query >= min((len(chain) + 1) // 2, len(chain) - 1)  # queried from the middle on
    shown = ["+1" if value(var) > 0 else "-1" for var in chain[: query + 1]]
    if not options.get("shuffle"):
        assert [c.split(" = ")[0] for c in m[1].split("; ")] == chain
    unresolved = [set(chain[i + 1 :]) for i in range(query + 1)]
    remaining = ["; ".join(c for c in m[1].split("; ") if c.split(" = ")[0] in left) for left in unresolved]
    return {
        "answer": answer(shown[-1]),
        "length": len(chain),
        "outputs": shown,
        "updates": shown,
        "remaining": remaining,
    }


SOLVERS = {
    "copy": solve_copy,
    "reverse": solve_reverse,
    "addition": solve_addition,
    "polynomial": solve_polynomial,
    "sorting": solve_sorting,
    "summation": solve_summation,
    "parity": solve_parity,
    "lego": solve_lego,
}
SOLVED = [(name, options) for name, options in GENERATED if name in SOLVERS]
"""The cases the answer checks read: a task added beside the ten brings its own oracle test (docs/tasks.md)."""
WITH_SCRATCHPAD = [(name, options) for name, options in SOLVED if name in SCRATCHPAD_TASKS]


def check(name: str, options: dict, example: Example) -> dict:
    solved = SOLVERS[name](example.source, options)
    final = example.target.rpartition("</scratch> ")[2]
    assert final == solved["answer"], example
    assert example.length == solved["length"], example
    return solved


# --- registry and options ---------------------------------------------------------------------


def test_the_registry_holds_the_papers_ten_tasks():
    """Tasks added beside them are allowed; none of the ten may go missing or move."""
    assert [name for name in TASKS if name in NAMES] == NAMES
    assert set(SCRATCHPAD_TASKS) & set(NAMES) == {"addition", "polynomial", "sorting", "summation", "parity", "lego"}


def test_unknown_task_lists_the_names():
    with pytest.raises(ProbeError) as error:
        get("multiplication")
    assert "multiplication" in str(error.value) and all(name in str(error.value) for name in NAMES)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "name, options, words",
    [
        ("copy", {"colour": 1}, ["colour", "train_length", "variant"]),
        ("copy", {"variant": "double"}, ["count", "replace", "random", "count-2x", "random-2x"]),
        ("addition", {"train_length": 0}, ["positive integer"]),
        ("addition", {"train_length": True}, ["positive integer"]),
        ("addition", {"scratchpad": "I+X"}, ["full", "I+C+O"]),
        ("sorting", {"variant": "bogo"}, ["single-token", "multi-digit"]),
        ("lego", {"train_length": 27}, ["26"]),
        ("lego", {"shuffle": "yes"}, ["true or false"]),
        ("scan", {"valid_fraction": 1.0}, ["[0, 1)"]),
        ("pcfg", {"scratchpad": "full"}, ["train_length", "valid_fraction", "train_size", "size_per_length"]),
    ],
)
def test_bad_options_raise_one_line(name, options, words):
    with pytest.raises(ProbeError) as error:
        get(name, **options)
    message = str(error.value)
    assert "\n" not in message and all(word in message for word in words), message


@pytest.mark.parametrize("name, options", CASES)
def test_options_rebuild_the_same_task(name, options):
    import json

    task = get(name, **options)
    assert json.loads(json.dumps(task.options)) == task.options
    again = get(name, **json.loads(json.dumps(task.options)))
    assert again.options == task.options
    assert again.examples("test", n=20, seed=3) == task.examples("test", n=20, seed=3)


def test_train_length_defaults():
    assert get("addition").train_length == 20
    assert get("addition", scratchpad="full").train_length == 8
    assert get("addition", scratchpad="none").train_length == 20
    assert get("addition", scratchpad="full", train_length=5).train_length == 5
    assert get("copy").train_length == 20 and get("scan").train_length == 22 and get("pcfg").train_length == 8


def test_scratchpad_format_names():
    assert len(FORMATS) == len(set(FORMATS)) == 32
    assert "full" in FORMATS and "empty" in FORMATS and "I+C+O" in FORMATS
    cases = [("i+c+o", "I+C+O"), ("O+I+C", "I+C+O"), ("I+C+O+V+R", "full"), ("FULL", "full"), ("Empty", "empty")]
    for typed, canonical in cases:
        assert get("parity", scratchpad=typed).options["scratchpad"] == canonical
    assert get("parity", scratchpad="none").options["scratchpad"] is None


# --- answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, options", SOLVED)
def test_every_answer_is_right(name, options):
    task = get(name, **options)
    for example in task.examples("train", n=1500, seed=1) + task.examples("test", n=1500, seed=1):
        check(name, options, example)


@pytest.mark.parametrize("name, options", GENERATED)
def test_texts_are_tidy(name, options):
    """Single spaces, nothing around a source, an answer to every example: what the tokenizer splits on."""
    task = get(name, **options)
    for example in task.examples("train", n=1500, seed=1) + task.examples("test", n=1500, seed=1):
        assert "  " not in example.source + example.target and example.source == example.source.strip()
        assert example.target.strip() and example.length >= 1


@pytest.mark.parametrize("name, options", WITH_SCRATCHPAD)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_scratchpad_format(name, options, fmt):
    """The final answer, the number of steps, which components each step has, what O, V and R write."""
    task = get(name, **options, scratchpad=fmt, template="figure")
    assert task.train_length == 8
    markers = {
        "I": r"^For ",
        "C": r"\bWe (have|take)\b",
        "O": r"\bWhich is equal to\b",
        "V": r"\bWe update\b",
        "R": r"\bSo, the remaining input is\b",
    }
    on = set("ICOVR") if fmt == "full" else set() if fmt == "empty" else set(fmt.split("+"))
    for example in task.examples("test", n=60, seed=2):
        solved = check(name, options, example)
        assert final_answer(example.target) == solved["answer"]
        assert example.target.startswith("<scratch> ") and " </scratch> The answer is " in example.target
        body = example.target[len("<scratch> ") : example.target.index(" </scratch>")]
        assert body.endswith(";")
        steps = [step.strip() for step in (" " + body).split(" ;")[:-1]]
        assert len(steps) == len(solved["outputs"]), example
        for step in steps:
            assert {key for key, pattern in markers.items() if re.search(pattern, step)} == on, step
        if "O" in on:
            assert [re.search(r"Which is equal to (.+?) \.", s)[1] for s in steps] == solved["outputs"], example
        if "V" in on:
            updates = [re.search(r"We update (.*?)\.(?: So, the remaining input is|$)", s)[1] for s in steps]
            assert [re.split(r" = | to ", u)[-1] for u in updates] == solved["updates"], example
        if "R" in on:
            read = solved.get("read_remaining", lambda text: text)
            remaining = [read(re.search(r"So, the remaining input is ?(.*)$", s)[1]) for s in steps]
            assert remaining == solved["remaining"], example


def test_addition_reproduces_the_figure():
    """Figure fig:unified_scratchpad_format: the first step of 5 3 7 2 6 + 1 9 1 7, full format."""
    example = get("addition", scratchpad="full", template="figure").example_for(53726, 1917)
    first = (
        "For digits 6 and 7, We have ( 6 + 7 + carry ) % 10 = 13 % 10 = 13 % 10 Which is equal to 3 . "
        "We update carry to 13 // 10 = 1. So, the remaining input is 5 3 7 2 + 1 9 1"
    )
    assert example.target.startswith(f"<scratch> {first} ; For digits 2 and 1,")
    assert example.target.endswith("; </scratch> The answer is 5 5 6 4 3.")


def test_the_papers_examples():
    """Table tab:dataset-examples and Appendix D.1, formatted by the generators."""
    cases = [
        (get("addition").example_for(53726, 1917), "Compute: 5 3 7 2 6 + 1 9 1 7 ?", "The answer is 5 5 6 4 3."),
        (
            get("polynomial").example_for(3, [(3, 0), (1, 1), (1, 2)]),
            "Evaluate x = 3 in ( 3 x ** 0 + 1 x ** 1 + 1 x ** 2 ) % 10 ?",
            "The answer is 5.",
        ),
        (
            get("sorting").example_for(list("31415")),
            "Sort the following numbers: 3 1 4 1 5 ?",
            "The answer is 1 1 3 4 5.",
        ),
        (
            get("sorting", variant="multi-digit").example_for([31, 41, 59, 126, 533]),
            "Sort the following numbers: 3 1, 4 1, 5 9, 1 2 6, 5 3 3 ?",
            "The answer is 3 1, 4 1, 5 9, 1 2 6, 5 3 3.",
        ),
        (get("summation").example_for([1, 2, 3, 4, 7]), "Compute: ( 1 + 2 + 3 + 4 + 7 ) % 10 ?", "The answer is 7."),
        (
            get("parity").example_for([1, 0, 0, 1, 1]),
            "Is the number of 1's even in [ 1 0 0 1 1 ] ?",
            "The answer is No.",
        ),
        (
            get("lego").example_for(list("abcd"), [-1, 1, 1, 1], 2, [0, 1, 2, 3]),
            "If a = -1; b = -a; c = +b; d = +c. Then what is c?",
            "The answer is +1.",
        ),
        (get("copy").example_for(["w1", "w2", "w3"]), "Copy the following words: w1 w2 w3 .", "w1 w2 w3"),
        (get("reverse").example_for(["w1", "w2", "w3"]), "Reverse the following words: w1 w2 w3 .", "w3 w2 w1"),
    ]
    for example, source, target in cases:
        assert (example.source, example.target) == (source, target)
    scan = {ex.source: ex.target for ex in get("scan").examples("train") + get("scan").examples("valid")}
    assert scan["jump twice and run left"] == "JUMP JUMP TURN_LEFT RUN"
    pcfg = solve_pcfg("shift prepend K10 R1 K12 , E12 F16")
    assert pcfg == ("F16 K10 R1 K12 E12", 2)


# --- splits and determinism -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options", [*GENERATED, ("addition", {"scratchpad": "full"}), ("copy", {"train_length": 5})]
)
def test_length_splits(name, options):
    task = get(name, **options)
    big = 2 * task.train_length
    train = Counter(ex.length for ex in task.examples("train", n=2000))
    valid = Counter(ex.length for ex in task.examples("valid", n=500))
    test = Counter(ex.length for ex in task.examples("test", n=2000))
    assert set(train) == set(range(1, task.train_length + 1))  # U(1, L), every length drawn
    assert set(valid) <= set(train)
    assert set(test) == set(range(1, big + 1))  # U(1, 2L): seen and unseen lengths
    assert all(task.is_seen(n) for n in train) and not task.is_seen(task.train_length + 1)
    assert max(test.values()) < 3 * min(test.values())  # roughly uniform


@pytest.mark.parametrize("name, options", GENERATED)
def test_determinism(name, options):
    task = get(name, **options)
    assert task.examples("train", n=50, seed=7) == get(name, **options).examples("train", n=50, seed=7)
    assert task.examples("train", n=50, seed=7) != task.examples("train", n=50, seed=8)
    assert task.examples("valid", n=50) != task.examples("train", n=50)
    assert task.examples("test", n=20) == task.examples("test", n=50)[:20]
    for split in ("train", "valid"):
        assert len(task.examples(split)) == task.split_size(split)


def test_bad_requests():
    task = get("parity")
    for split, n in [("dev", None), ("train", -1), ("train", 2.5)]:
        with pytest.raises(ProbeError):
            task.examples(split, n=n)
    assert task.examples("train", n=0) == []
    with pytest.raises(ProbeError):
        get("scan").examples("test", n=10**6)


@pytest.mark.parametrize("name, options", GENERATED)
def test_vocabulary_comes_from_the_alphabet(name, options):
    """Listed the same each time, each word once, and holding every word of the examples, unseen lengths' too."""
    task = get(name, **options)
    vocabulary = task.vocabulary()
    assert vocabulary == get(name, **options).vocabulary() and len(vocabulary) == len(set(vocabulary))
    if name in SCRATCHPAD_TASKS:
        assert set(vocabulary) < set(get(name, **options, scratchpad="full", template="figure").vocabulary())
    examples = task.examples("test", n=500, seed=5)
    words = {word for ex in examples for text in (ex.source, ex.target) for word in split_words(text)}
    assert words <= set(vocabulary), sorted(words - set(vocabulary))[:10]


# --- SCAN -------------------------------------------------------------------------------------


def interpret_scan(command: str) -> list[str]:
    """Lake & Baroni's interpretation function, read off the command string."""
    if " and " in command:
        first, second = command.split(" and ")
        return interpret_scan(first) + interpret_scan(second)
    if " after " in command:
        first, second = command.split(" after ")
        return interpret_scan(second) + interpret_scan(first)
    words = command.split()
    if words[-1] in ("twice", "thrice"):
        return interpret_scan(" ".join(words[:-1])) * (2 if words[-1] == "twice" else 3)
    action = [] if words[0] == "turn" else [words[0].upper()]
    if len(words) == 1:
        return action
    turn = ["TURN_" + words[-1].upper()]
    if words[1] == "opposite":
        return turn + turn + action
    if words[1] == "around":
        return (turn + action) * 4
    return turn + action


def test_scan_command_set_and_length_split():
    task = get("scan", valid_fraction=0)
    train, valid, test = (task.examples(split) for split in ("train", "valid", "test"))
    assert (len(train), len(valid), len(test)) == (16_990, 0, 3_920)
    commands = [ex.source for ex in train + test]
    assert len(commands) == len(set(commands)) == 20_910
    verbs = ["walk", "look", "run", "jump"]
    phrases = verbs + [
        f"{v} {m}{d}" for v in verbs + ["turn"] for m in ("", "opposite ", "around ") for d in ("left", "right")
    ]
    simple = [f"{p}{r}" for p in phrases for r in ("", " twice", " thrice")]
    expected = set(simple) | {f"{a} {c} {b}" for a in simple for b in simple for c in ("and", "after")}
    assert set(commands) == expected
    for ex in train + test:
        actions = interpret_scan(ex.source)
        assert ex.target == " ".join(actions) and ex.length == len(actions)
    assert max(ex.length for ex in train) == 22 and min(ex.length for ex in test) == 24
    assert max(ex.length for ex in test) == 48


def test_scan_valid_is_held_out_of_train():
    task = get("scan")
    train, valid = task.examples("train"), task.examples("valid")
    assert len(train) + len(valid) == 16_990 and 0.08 < len(valid) / 16_990 < 0.12
    assert not {ex.source for ex in train} & {ex.source for ex in valid}
    assert all(task.is_seen(ex.length) for ex in valid)
    assert task.examples("valid") == get("scan").examples("valid")
    assert task.examples("test", n=30, seed=1) == get("scan").examples("test", n=30, seed=1)


# --- PCFG SET ---------------------------------------------------------------------------------

PCFG_UNARY = {"copy", "reverse", "shift", "echo", "swap_first_last", "repeat"}
PCFG_BINARY = {"append", "prepend", "remove_first", "remove_second"}


def solve_pcfg(source: str) -> tuple[str, int]:
    """Parses the prefix notation and applies Hupkes et al.'s string-edit functions."""
    tokens = source.split()
    position = 0

    def parse() -> list[str]:
        nonlocal position
        head = tokens[position]
        if head in PCFG_UNARY:
            position += 1
            x = parse()
            if head == "reverse":
                return x[::-1]
            if head == "shift":
                return x[1:] + [x[0]]
            if head == "echo":
                return x + [x[-1]]
            if head == "swap_first_last":
                return [x[-1]] + x[1:-1] + [x[0]]
            return x + x if head == "repeat" else x
        if head in PCFG_BINARY:
            position += 1
            first = parse()
            assert tokens[position] == ","
            position += 1
            second = parse()
            return {"append": first + second, "prepend": second + first, "remove_first": second}.get(head, first)
        letters = []
        while position < len(tokens) and re.fullmatch(r"[A-Z](1[0-9]|20|[1-9])", tokens[position]):
            letters.append(tokens[position])
            position += 1
        assert 2 <= len(letters) <= 5
        return letters

    value = parse()
    assert position == len(tokens)
    return " ".join(value), sum(t in PCFG_UNARY | PCFG_BINARY for t in tokens)


def test_pcfg_answers_and_productivity_split():
    task = get("pcfg")
    splits = {split: task.examples(split) for split in ("train", "valid", "test")}
    for examples in splits.values():
        for ex in examples:
            assert solve_pcfg(ex.source) == (ex.target, ex.length)
            assert len(ex.target.split()) <= 64
    lengths = {split: Counter(ex.length for ex in examples) for split, examples in splits.items()}
    assert set(lengths["train"]) == set(lengths["valid"]) == set(range(1, 9))
    assert set(lengths["test"]) == set(range(9, 17)) and set(lengths["test"].values()) == {1000}
    seen = lengths["train"] + lengths["valid"]  # 81,010 = 8 x 10,126 + 2: the shortest two take the rest
    assert [seen[n] for n in range(1, 9)] == [10_127, 10_127] + [10_126] * 6
    sources = [ex.source for examples in splits.values() for ex in examples]
    assert len(sources) == len(set(sources)) == 89_010
    assert 0.08 < len(splits["valid"]) / 81_010 < 0.12
    whole = get("pcfg", valid_fraction=0).examples("train")
    assert sorted(ex.source for ex in whole) == sorted(ex.source for ex in splits["train"] + splits["valid"])
