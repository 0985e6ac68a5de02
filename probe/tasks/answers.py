"""Reading a task's answer out of a final output, as the authors' instance processors do
(McGill-NLP/length-generalization, ``src/data/data_instance_processor/*``,
``extract_answer_from_final_output`` and ``is_answer_correct``).

A reader returns what scoring compares, or None where the authors' reader finds no answer (their
``-100000``, ``""`` or ``[]``, which never equal a gold answer). A prediction is right when its
reading equals the gold target's.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r".*The answer is\s+(-?\s?[\d.][\d\s.]*)\.")
WORD = re.compile(r".*The answer is\s*(.+)\s*\.")
SORTED_LIST = re.compile(r".*The sorted list is\s*\[\s*(.*)\s*\]\s*\.?")
LISTED = re.compile(r".*The answer is\s*(.*)\.")


def spaced(number: int) -> str:
    """A number written digit by digit, a minus sign its own word: 5372 -> "5 3 7 2", -24 -> "- 2 4"
    (the authors' ``number_to_string``)."""
    return " ".join(str(number))


def as_int(text: str) -> int | None:
    """The integer ``text`` spells with its spaces dropped ("0 1 3" -> 13, as ``int`` reads it), or None
    (a float such as "1.5" fails the authors' ``assert isinstance(final_answer, int)``: wrong)."""
    try:
        return int("".join(text.split()))
    except ValueError:
        return None


def read_number(final: str) -> int | None:
    """Addition, summation, polynomial: the digits after the last "The answer is" up to a period, as an int."""
    match = NUMBER.search(final)
    return as_int(match[1]) if match else None


def read_word(final: str) -> str | None:
    """Parity, LEGO: the text after "The answer is" up to the last period, compared case-insensitively."""
    match = WORD.search(final)
    return match[1].strip().lower() if match else None


def read_sorted_list(final: str, numbers: bool) -> tuple[str | int, ...] | None:
    """The authors' sorting answer, ``The sorted list is [ a, b ].``: its comma-separated items, stripped
    (multi-digit: each read as an int)."""
    match = SORTED_LIST.search(final)
    return items(match[1].split(","), numbers) if match else None


def read_listed(final: str, numbers: bool) -> tuple[str | int, ...] | None:
    """probe's sorting answer, ``The answer is a b.`` or ``The answer is 3 1, 4 1.``, read as the authors
    read theirs: its items (words; comma-separated numbers read as ints)."""
    match = LISTED.search(final)
    if not match:
        return None
    return items(match[1].split(","), True) if numbers else tuple(match[1].split())


def items(texts: list[str], numbers: bool) -> tuple[str | int, ...] | None:
    if not numbers:
        return tuple(text.strip() for text in texts)
    read = [as_int(text) for text in texts]
    return None if None in read else tuple(read)
