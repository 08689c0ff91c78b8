"""Raw text: one sentence per line, split on whitespace; no tags."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .sentences import Sentence


def parse_text(lines: Iterable[str]) -> Iterator[Sentence]:
    return (Sentence(line.split(), None, None, n, text=line) for n, line in enumerate(lines, 1) if line.strip())
