"""What row-based corpora share (Parquet, ``hf:``, JSONL ``tokens`` lines): tag ids and their
names, and rows turned into sentences, ``-DOCSTART-`` rows starting documents."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .sentences import DOCSTART, TAGS_COLUMN, WORDS_COLUMN, CorpusError, Sentence


class TagNames:
    """The names of integer tag ids: a ``ClassLabel`` feature's, else the given ``tag_names``."""

    def __init__(self, given: tuple[str, ...] | None):
        self.given, self.class_label = given, None
        self.given_used = False  # some ids were named by the given names (they enter the fingerprint)

    def set_class_label(self, names: list[str] | None, path: str) -> None:
        if names is None:
            return
        names = tuple(str(n) for n in names)
        if self.given is not None and self.given != names:
            raise CorpusError(
                path,
                None,
                f"the ClassLabel feature of column {TAGS_COLUMN} names the ids {list(names)}, but --tag-names "
                f"gives {list(self.given)}: drop --tag-names, or make the two agree",
            )
        self.class_label = names

    def strings(self, values: list, fail) -> list[str]:
        """``values`` (tag strings or ids) as tag strings; ``fail(message)`` raises."""
        if all(isinstance(v, str) for v in values):
            return values
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            bad = next(v for v in values if not isinstance(v, (str, int)) or isinstance(v, bool))
            fail(f"expected a list of tag ids (integers) or of tag strings, found {bad!r}")
        names = self.class_label or self.given
        if names is None:
            fail(
                "tag ids without names: the features carry no ClassLabel naming them; "
                "pass --tag-names A,B,... (tag_names=), the name of id 0 first"
            )
        for v in values:
            if not 0 <= v < len(names):
                fail(f"tag id {v} has no name ({len(names)} names)")
        if self.class_label is None:
            self.given_used = True
        return [names[v] for v in values]


class Rows:
    """Rows of ``tokens`` (and ``ner_tags``) made into sentences, with -DOCSTART- rows starting
    documents and empty rows skipped; errors name the row (or, in JSONL, the line) and column."""

    def __init__(self, path: str, labelled: bool, names: TagNames):
        self.path, self.labelled, self.names = path, labelled, names
        self.doc, self.has_docs, self.skipped = 0, False, 0

    def sentence(self, words, tags, row: int | None, line: int = 0) -> Sentence | None:
        def fail(message: str, column: str = TAGS_COLUMN):
            raise CorpusError(self.path, line or None, message, row=row, column=column)

        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            fail("expected a list of non-empty strings" if words is not None else "no tokens (null)", WORDS_COLUMN)
        if any(any(ch.isspace() for ch in w) for w in words):
            fail("a token contains whitespace; split it into tokens", WORDS_COLUMN)
        if words == [DOCSTART]:
            self.doc, self.has_docs = self.doc + 1, True
            return None
        if not words:
            self.skipped += 1
            return None
        labelled = self.labelled and not (tags is None and line)  # a JSONL line without ner_tags: no tags
        if labelled:
            if not isinstance(tags, list):
                fail("no tags (null)" if tags is None else f"expected a list of tags, found {tags!r}")
            if len(tags) != len(words):
                fail(f"{len(tags)} tags for {len(words)} tokens")
            tags = self.names.strings(tags, fail)
        return Sentence(
            list(words),
            list(tags) if labelled else None,
            str(self.doc) if self.has_docs else None,
            line,
            row=row,
            column=TAGS_COLUMN,
        )

    def notes(self) -> list[str]:
        if not self.skipped:
            return []
        return [f"{self.skipped:,} row{'s' * (self.skipped > 1)} without tokens skipped"]


def class_label_names(features) -> list[str] | None:
    """``features["ner_tags"].feature.names`` from the JSON form of ``datasets`` features (as
    ``Features.to_dict()`` and the ``huggingface`` metadata of a Parquet file hold them)."""
    if not isinstance(features, dict):
        return None
    f = features.get(TAGS_COLUMN)
    inner = f.get("feature") if isinstance(f, dict) else (f[0] if isinstance(f, list) and f else None)
    if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and isinstance(inner.get("names"), list):
        return inner["names"]
    return None


def table_sentences(
    batches: Iterable, columns: list[str], path: str, labelled: bool, names: TagNames, notes: list[str]
) -> Iterator[Sentence]:
    """The sentences of pyarrow tables or record batches of ``tokens`` (and ``ner_tags``) columns,
    a row per sentence (``columns``: the names the file has), one batch at a time."""
    for column, needed in ((WORDS_COLUMN, True), (TAGS_COLUMN, labelled)):
        if needed and column not in columns:
            hint = " (read it as unlabelled, or name the tag column ner_tags)" if column == TAGS_COLUMN else ""
            raise CorpusError(path, None, f"no column {column!r}: the columns are {', '.join(columns) or 'none'}{hint}")
    rows, first = Rows(path, labelled, names), 0
    for batch in batches:
        words = batch.column(WORDS_COLUMN).to_pylist()
        tags = batch.column(TAGS_COLUMN).to_pylist() if labelled else [None] * len(words)
        for i, (w, t) in enumerate(zip(words, tags), first):
            if (s := rows.sentence(w, t, i)) is not None:
                yield s
        first += len(words)
    notes.extend(rows.notes())
