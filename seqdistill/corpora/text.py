"""Raw text: one sentence per line, split on whitespace; no tags."""

from __future__ import annotations

from .sentences import Sentence


def parse_text(lines: list[str]) -> list[Sentence]:
    return [Sentence(line.split(), None, None, n, text=line) for n, line in enumerate(lines, 1) if line.strip()]
