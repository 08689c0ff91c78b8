"""Write a benchmark's table into its section of docs/BENCHMARKS.md (between two HTML comments)."""

from __future__ import annotations

from pathlib import Path


def write_section(path, begin: str, end: str, heading: str, text: str) -> None:
    """Replace what lies between ``begin`` and ``end`` in the file at ``path`` with ``text`` (which
    holds both markers), or append ``text`` under ``heading`` (added when missing) if the markers
    are not there yet."""
    doc = Path(path)
    old = doc.read_text()
    if begin in old and end in old:
        new = old[: old.index(begin)] + text + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip() + ("\n\n" if heading in old else f"\n\n{heading}\n\n") + text + "\n"
    doc.write_text(new)
