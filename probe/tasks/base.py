"""The task interface (Section 3): examples with a length bucket λ, split at a threshold L.

Generated tasks (Section 3, Appendix D.1) draw λ ~ U(1, L) for train and valid and
λ ~ U(1, 2L) for test, then the instance from the task's generative process. Finite datasets
(SCAN, PCFG) keep their length split: train is the side with λ <= L, test the other side, and
valid an IID holdout carved deterministically out of the train side.
"""

from __future__ import annotations

import hashlib
import inspect
import numbers
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from probe.errors import ProbeError
from probe.tasks import scratchpad
from probe.tasks.scratchpad import Step
from probe.tasks.words import vocabulary_of

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Example:
    """One instance: the input text, the output text, and its length bucket λ."""

    source: str
    target: str
    length: int


@dataclass(frozen=True)
class Option:
    """A task option: its default, what a user may pass, a parser that normalises or raises."""

    default: Any
    accepts: str
    parse: Callable[[Any], Any]
    help: str
    shown: str | None = None
    """How listings show the default, where it is not the value itself."""


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(value)
    return value


def fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(value)
    return float(value)


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(value)
    return value


def one_of(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(value)
        return value

    return parse


POSITIVE_INTEGER = "a positive integer"


def train_length_option(default: int | None, help: str, shown: str | None = None) -> Option:
    return Option(default, POSITIVE_INTEGER, positive_int, help, shown)


def valid_fraction_option() -> Option:
    help = "share of the train side held out as valid (0: train is the whole train side)"
    return Option(0.1, "a number in [0, 1)", fraction, help)


class Task(ABC):
    """A task: ``examples(split, n, seed)``, ``vocabulary()``, ``is_seen(length)``.

    ``options`` holds every option resolved to its value, so ``get(task.name, **task.options)``
    rebuilds the same task.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    length_unit: ClassVar[str]
    OPTIONS: ClassVar[dict[str, Option]]
    authors_separator: ClassVar[bool] = False
    """Whether the authors' decoder-only input puts a separator between source and target (their
    ``configs/data/*.jsonnet``: ``"[SEP] "`` for SCAN, PCFG, copy, reverse and summation, ``''`` else)."""
    REQUIRED_OPTIONS: ClassVar[tuple[str, ...]] = ("train_length",)
    """The options this class's own code reads, which every concrete subclass's ``OPTIONS`` must hold."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Checks a concrete task class where it is defined, so one that lacks what every task needs fails on
        import, naming what to add, not with a KeyError at its first use in a command. ``train_length`` has no
        inherited default: the threshold L is what separates seen from unseen lengths, and its unit and value
        are the task's own (20 input words for copy, 22 output actions for SCAN, 8 functions for PCFG)."""
        super().__init_subclass__(**kwargs)
        if inspect.isabstract(cls):
            return
        missing = [attr for attr in ("name", "summary", "length_unit", "OPTIONS") if not hasattr(cls, attr)]
        if missing:
            raise TypeError(f"task class {cls.__name__} sets no {', '.join(missing)} (see docs/tasks.md)")
        missing = [key for key in cls.REQUIRED_OPTIONS if key not in cls.OPTIONS]
        if missing:
            reader = next(c for c in cls.__mro__ if "REQUIRED_OPTIONS" in vars(c)).__name__
            raise TypeError(
                f"task {cls.name!r}: OPTIONS has no {', '.join(map(repr, missing))}, which every {reader} reads "
                "(train_length_option(L, help), valid_fraction_option() and ScratchpadTask.OPTIONS make them; "
                "see docs/tasks.md)"
            )

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            accepted = ", ".join(self.OPTIONS) or "none"
            raise ProbeError(f"task {self.name!r} has no option {unknown[0]!r}; its options: {accepted}")
        resolved = {}
        for key, option in self.OPTIONS.items():
            if key not in options:
                resolved[key] = option.default
                continue
            try:
                resolved[key] = option.parse(options[key])
            except (ValueError, TypeError):
                raise ProbeError(
                    f"task {self.name!r}: {key}={options[key]!r} is not accepted; {key} takes {option.accepts}"
                ) from None
        self.options: dict[str, Any] = resolved
        self.train_length: int = resolved["train_length"]

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"

    @abstractmethod
    def examples(self, split: str = "train", n: int | None = None, seed: int = 0) -> list[Example]:
        """Examples of ``split`` ("train", "valid" or "test"); the same arguments give the same list."""

    def held_out(self, n: int, seed: int = 0) -> list[Example]:
        """``n`` IID validation examples, or every one where the split holds fewer (a small dataset's:
        PCFG's at ``-o train_length=1`` holds 1,000 inputs on its training side, 107 of them held out)."""
        return self.examples("valid", n=min(n, self.split_size("valid")), seed=seed)

    @abstractmethod
    def split_size(self, split: str) -> int:
        """How many examples ``examples(split)`` gives with ``n=None``, without making them."""

    @abstractmethod
    def vocabulary(self) -> list[str]:
        """Every token that can appear in a source or target, listed from the task's alphabet."""

    def is_seen(self, length: int) -> bool:
        """Whether length bucket ``length`` is among the training lengths (λ <= L)."""
        return length <= self.train_length

    def answer_reader(self) -> Callable[[str], Hashable | None] | None:
        """What scoring compares of a prediction and its gold target, or None: the whole target, token
        for token up to ``<eos>`` (exact match)."""
        return None

    def before_answer(self, target: str) -> str:
        """The part of a target written before its answer: none here, the whole target is the answer."""
        return ""


def check_request(split: str, n: int | None) -> None:
    if split not in SPLITS:
        raise ProbeError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0):
        raise ProbeError(f"the number of examples must be a non-negative integer, not {n!r}")


def split_option(help: str) -> Option:
    """``split``: ``length`` (Section 3's sampling, the default) or ``paper`` (the authors' data)."""
    return Option("length", "length, paper", one_of("length", "paper"), help)


class GeneratedTask(Task):
    """A task sampled on the spot: λ ~ U(1, L) for train and valid, λ ~ U(1, 2L) for test.

    Each split draws from its own seed stream, so valid is fresh IID samples, not train's.
    ``n=None`` gives ``DEFAULT_SIZES[split]`` examples (D.1 uses 100K/15%/10K; ours are smaller
    because a small model trains on them on a CPU).
    """

    DEFAULT_SIZES: ClassVar[dict[str, int]] = {"train": 10_000, "valid": 1_000, "test": 2_000}

    def split_size(self, split: str) -> int:
        return self.DEFAULT_SIZES[split]

    def examples(self, split: str = "train", n: int | None = None, seed: int = 0) -> list[Example]:
        check_request(split, n)
        rng = random.Random(f"{self.name}/{split}/{seed}")
        shortest, longest = self.length_range(split)
        count = self.DEFAULT_SIZES[split] if n is None else int(n)
        return [self.sample(rng, rng.randint(shortest, longest)) for _ in range(count)]

    def length_range(self, split: str) -> tuple[int, int]:
        """The bounds of λ ~ U(lo, hi) for ``split``: Section 3's, or with ``split=paper`` the
        authors' copy and reverse data (2..L for train and valid, L+1..2L for test)."""
        if self.options.get("split") == "paper":
            return (self.train_length + 1, 2 * self.train_length) if split == "test" else (2, self.train_length)
        return (1, 2 * self.train_length if split == "test" else self.train_length)

    @abstractmethod
    def sample(self, rng: random.Random, length: int) -> Example:
        """One example of length bucket ``length`` drawn with ``rng``."""


class ScratchpadTask(GeneratedTask):
    """A generated task that can write its answer after a scratchpad (Section 6).

    L defaults to 20, and to 8 with a scratchpad, as in the paper (after Nye et al., 2021). The
    ``template`` says whose words the examples use: ``authors`` (the default with a scratchpad) writes
    the prompt, the scratchpad and the answer as the authors' released processors (``s2s_*``) do,
    ``figure`` (the default without) as the paper's Table tab:dataset-examples and Figure
    fig:unified_scratchpad_format do. With a scratchpad a prediction is scored on its answer alone, read
    as the authors read it (:meth:`answer_of`).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(None, "threshold L on the length bucket", "20, or 8 with a scratchpad"),
        "scratchpad": Option(
            None, scratchpad.ACCEPTS, scratchpad.parse_format, "scratchpad format (Section 6)", "none"
        ),
        "template": Option(
            None,
            ", ".join(scratchpad.TEMPLATES),
            one_of(*scratchpad.TEMPLATES),
            "whose words: the authors' released code, or the paper's table and figure",
            "authors with a scratchpad, else figure",
        ),
    }

    REQUIRED_OPTIONS: ClassVar[tuple[str, ...]] = ("train_length", "scratchpad", "template")
    AUTHORS_UPDATES: ClassVar[bool] = True
    """Whether the authors' processor writes variable updates (V); theirs for sorting and LEGO refuse V."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.train_length is None:
            self.train_length = 8 if self.scratchpad else 20
            self.options["train_length"] = self.train_length
        if self.options["template"] is None:
            self.options["template"] = "authors" if self.scratchpad else "figure"
        fmt = self.scratchpad
        if self.authors_text and not self.AUTHORS_UPDATES and fmt not in (None, "full") and "V" in fmt.split("+"):
            without = scratchpad.format_name(scratchpad.components(fmt) - {"V"})
            raise ProbeError(
                f"{self.name} in the authors' words has no variable updates (their processor refuses V): "
                f"scratchpad={fmt} would write {without}; its full format is I+C+O+R"
            )

    @property
    def scratchpad(self) -> str | None:
        return self.options["scratchpad"]

    @property
    def template(self) -> str:
        return self.options["template"]

    @property
    def authors_text(self) -> bool:
        """Whether examples are written in the authors' words (``template=authors``)."""
        return self.template == "authors"

    def target(self, steps: Callable[[], Sequence[Step]], answer: str) -> str:
        """``answer``, after the scratchpad of ``steps()`` when a format is set (steps built lazily)."""
        return scratchpad.render(steps() if self.scratchpad else (), answer, self.scratchpad, self.template)

    def vocabulary(self) -> list[str]:
        texts = self.alphabet()
        if self.scratchpad:
            texts += [scratchpad.template_words(self.template), *self.scratchpad_alphabet()]
        return vocabulary_of(*texts)

    def answer_reader(self) -> Callable[[str], Hashable | None] | None:
        """How a prediction is read where the authors read its answer rather than match it token for token: with
        a scratchpad, and in their words without one (their ``s2s_*`` processors read the answer alike, text after
        it and a missing end included); None elsewhere (exact match of the whole target)."""
        return self.answer_of if self.scratchpad or self.authors_text else None

    def before_answer(self, target: str) -> str:
        """With a scratchpad, the scratchpad through its first end marker (the whole ``target`` where it has
        none): what the authors' ``get_tokenization_info`` labels the ``input`` and ``scratchpad`` regions of the
        target, the rest being its ``output``."""
        if not self.scratchpad:
            return ""
        marker = scratchpad.end_marker(self.template)
        end = target.find(marker)
        return target if end < 0 else target[: end + len(marker)]

    def answer_of(self, text: str) -> Hashable | None:
        """The answer a prediction (or gold target) gives: :meth:`read_answer` of the text after its first
        scratchpad end marker (the whole text without one). None where no answer can be read."""
        return self.read_answer(scratchpad.final_answer(text, self.template))

    @abstractmethod
    def read_answer(self, final: str) -> Hashable | None:
        """The answer in a final output (``The answer is 5 5 6 4 3.``), as the authors' processor reads it."""

    @abstractmethod
    def alphabet(self) -> list[str]:
        """Texts holding every word of the task's sources and answers (symbols, numbers, templates)."""

    @abstractmethod
    def scratchpad_alphabet(self) -> list[str]:
        """Texts holding every word its scratchpad steps can write."""


def in_holdout(source: str, fraction: float) -> bool:
    """A stable pseudo-random choice of about ``fraction`` of all sources (independent of the run)."""
    digest = hashlib.blake2b(source.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


class FiniteTask(Task):
    """A fixed dataset with a length split: train = λ <= L, test = λ > L; valid is held out of train.

    ``n=None`` returns the whole split in the dataset's order; ``n`` draws that many without
    replacement. With ``valid_fraction=0`` train is exactly the length split's training side.
    """

    REQUIRED_OPTIONS: ClassVar[tuple[str, ...]] = ("train_length", "valid_fraction")

    @abstractmethod
    def dataset(self) -> Sequence[Example]:
        """Every example of the dataset, in a fixed order."""

    @cached_property
    def _splits(self) -> dict[str, list[Example]]:
        splits: dict[str, list[Example]] = {split: [] for split in SPLITS}
        for example in self.dataset():
            if not self.is_seen(example.length):
                splits["test"].append(example)
            elif in_holdout(example.source, self.options["valid_fraction"]):
                splits["valid"].append(example)
            else:
                splits["train"].append(example)
        return splits

    def split_size(self, split: str) -> int:
        return len(self._splits[split])

    def examples(self, split: str = "train", n: int | None = None, seed: int = 0) -> list[Example]:
        check_request(split, n)
        pool = self._splits[split]
        if n is None:
            return list(pool)
        if n > len(pool):
            raise ProbeError(f"{self.name} {split} has {len(pool)} examples; cannot draw {n}")
        return random.Random(f"{self.name}/{split}/{seed}").sample(pool, n)
