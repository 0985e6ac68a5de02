"""Words, as tasks and the tokenizer both split text: whitespace-separated, with punctuation glued to
the end of a word ("5." in "The answer is 5 5 6 4 3.") a token of its own marked ``##`` ("5", "##."),
so "3 ." and "3." stay distinct and ``join_words(split_words(text)) == text`` for every
single-spaced text. A module of its own so that tasks list their vocabulary without importing the
tokenizer, which reads tasks.
"""

from __future__ import annotations

from collections.abc import Iterable

GLUED = "##"
PUNCTUATION = ".,:;?"


def split_words(text: str) -> list[str]:
    """Whitespace words, with trailing punctuation split off as ``##``-marked tokens (a word of punctuation
    alone keeps its first mark as its word: "..." is ".", "##.", "##.")."""
    tokens: list[str] = []
    for word in text.split():
        if word[-1] not in PUNCTUATION:
            tokens.append(word)
            continue
        core = word.rstrip(PUNCTUATION) or word[0]
        tokens.append(core)
        tokens.extend(GLUED + mark for mark in word[len(core) :])
    return tokens


def join_words(tokens: Iterable[str]) -> str:
    """Inverse of :func:`split_words`."""
    text = ""
    for token in tokens:
        if token.startswith(GLUED) and len(token) > len(GLUED):
            text += token[len(GLUED) :]
        else:
            text += (" " if text else "") + token
    return text


def vocabulary_of(*texts: str) -> list[str]:
    """The sorted set of tokens in ``texts``: how tasks list their vocabulary from their alphabet."""
    return sorted({token for text in texts for token in split_words(text)})
