"""CoNLL column files: one token per line, a blank line between sentences, ``-DOCSTART-`` starting a
document (the format overview is in ``seqdistill.corpora``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .sentences import DOCSTART, CorpusError, Sentence


def parse_conll(lines: Iterable[str], path: str, word_column: int, tag_column: int | None) -> Iterator[Sentence]:
    """The sentences of a CoNLL file, as its lines come. Column counts (decision, named here): with the word first and
    the tag last (the defaults, or the word first of an unlabelled read), lines may have different
    numbers of columns, because those two columns mean the same thing on every line: MeCab's output,
    as in the Japanese NER corpus of DATA.md, has 12 fields for a known word and 10 for an unknown
    one between them. With any other column named, every line must have as many columns as the first
    (a line with one column fewer would otherwise give another column's value as a word or tag)."""
    ends = word_column == 0 and tag_column in (-1, None)
    words: list[str] = []
    tags: list[str] = []
    tag_lines: list[int] = []
    width = None
    doc, has_docs = 0, False

    def flush() -> Iterator[Sentence]:
        if words:
            yield Sentence(
                list(words),
                list(tags) if tag_column is not None else None,
                str(doc) if has_docs else None,
                tag_lines[0],
                list(tag_lines),
            )
        words.clear(), tags.clear(), tag_lines.clear()

    for n, line in enumerate(lines, 1):
        cols = line.split()
        if not cols:
            yield from flush()
            continue
        if cols[0] == DOCSTART:
            yield from flush()
            doc, has_docs = doc + 1, True
            continue
        if width is None:
            width = len(cols)
            for c, what in ((word_column, "word"), (tag_column, "tag")):
                if c is not None and not -width <= c < width:
                    raise CorpusError(path, n, f"the {what} column {c} does not exist: lines have {width} columns")
            if tag_column is not None and width < 2:
                raise CorpusError(path, n, "one column only: there is no tag column (read it as unlabelled?)")
        elif ends and (tag_column is None or len(cols) >= 2):
            pass
        elif len(cols) != width:
            raise CorpusError(
                path,
                n,
                f"{len(cols)} columns where earlier lines have {width} "
                "(if this is raw text, a sentence per line, read it as unlabelled)",
            )
        words.append(cols[word_column])
        tag_lines.append(n)
        if tag_column is not None:
            tags.append(cols[tag_column])
    yield from flush()
