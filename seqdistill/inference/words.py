"""Raw text to words with character offsets: the one rule every front end uses.

``split_words`` is the rule (decision, named here): a word is a run of letters, digits or
underscores, joined across a single inner hyphen, apostrophe or period ("1996-08-22", "don't",
"3.5"); every other character that is not a space is a word of its own ("(", ",", "$", "."). It is
the CoNLL-2003 convention of words and punctuation apart, and the rule the demo used to split its
Wikipedia sentences. Known differences from CoNLL's own tokens: a final abbreviation period is
split off ("U.S." -> "U.S", "."), and a clitic is split at its apostrophe ("'s" -> "'", "s").

Pre-split input (a list of words) keeps its words as given; its text is the words joined by one
space, and offsets point into that text (``join_words``).
"""

from __future__ import annotations

import re

WORD = re.compile(r"\w+(?:[-'.’]\w+)*|[^\w\s]")


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The words of ``text`` and each word's ``(start, end)`` character offsets into it."""
    words, offsets = [], []
    for m in WORD.finditer(text):
        words.append(m.group())
        offsets.append(m.span())
    return words, offsets


def join_words(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The text of pre-split words (joined by one space) and each word's offsets into it."""
    offsets, pos = [], 0
    for w in words:
        offsets.append((pos, pos + len(w)))
        pos += len(w) + 1
    return " ".join(words), offsets
