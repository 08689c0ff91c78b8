"""Corpus readers: CoNLL column files, JSONL and raw text.

Every reader reads the whole file before anything is written anywhere, fingerprints it (sha256 of
its bytes, recorded in the cache manifest), and raises :class:`CorpusError` naming the file and
line of the first problem: wrong column count, ill-formed tag, a transition the tag scheme forbids,
bytes that are not UTF-8, an empty file.

Formats:

* ``conll`` — one token per line, whitespace-separated columns, a blank line between sentences;
  choose the word and tag columns (default: first and last). ``-DOCSTART-`` lines start a new
  document (``doc_id`` ``"1"``, ``"2"``, ...) and are not sentences.
* ``jsonl`` — one object per line: ``{"words": [...], "tags": [...]}``, ``tags`` optional,
  ``doc_id`` optional.
* ``text`` — one sentence per line, split on whitespace; no tags.

``auto`` (the default) picks ``jsonl`` for ``.jsonl``/``.json`` and ``conll`` for ``.conll``/
``.bio``/``.iob``. Otherwise a labelled read is ``conll`` (tags need columns), and an unlabelled
read sniffs the first 200 non-blank lines: a ``-DOCSTART-`` line, or lines that all have the same
number of columns (2 to 10) with blank lines between sentences, mean ``conll``; else ``text``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import fsspec

from ..cache_schema import CorpusInfo, LabelSchema, example_id
from ..cache_schema.errors import ManifestError
from ..cache_schema.labels import TagError, canonical_scheme, check_sequence, convert_tags, detect_scheme
from ..cache_schema.manifest import check_id

FORMATS = ("auto", "conll", "jsonl", "text")
DOCSTART = "-DOCSTART-"


class CorpusError(ValueError):
    """A problem in a corpus file, at a line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


@dataclass
class Sentence:
    words: list[str]
    tags: list[str] | None = None
    doc_id: str | None = None
    line: int = 0  # 1-based line of the sentence's first word in its file
    tag_lines: list[int] | None = None  # line of each tag (CoNLL: one per word), for error messages
    entities: list[tuple[int, int, str]] | None = None  # JSONL "entities": (start, end exclusive, type), may nest
    text: str | None = None  # a text corpus's raw line (distill-predict splits it by inference.words' rule)

    def line_of(self, position: int) -> int:
        return self.tag_lines[position] if self.tag_lines else self.line


@dataclass
class Corpus:
    """The sentences of one corpus split, with the fingerprint of its source file."""

    name: str
    split: str
    path: str
    sha256: str
    sentences: list[Sentence] = field(default_factory=list)
    scheme: str | None = None  # tag scheme of a labelled corpus

    @property
    def labelled(self) -> bool:
        return bool(self.sentences) and all(s.tags is not None for s in self.sentences)

    @property
    def nested(self) -> bool:
        """Labelled with entity spans (JSONL ``entities``), which may overlap across types."""
        return bool(self.sentences) and all(s.entities is not None for s in self.sentences)

    def entity_types(self) -> list[str]:
        return sorted({t for s in self.sentences for _, _, t in (s.entities or ())})

    def layers(self, types: list[str]) -> list[list[list[int]]]:
        """Each sentence's entities as one BILOU layer per type (``seqdistill.bilou``)."""
        from ..bilou import layers_from_spans

        out = []
        for s in self.sentences:
            try:
                out.append(layers_from_spans(s.entities or [], len(s.words), types))
            except ValueError as e:
                raise CorpusError(self.path, s.line, str(e)) from None
        return out

    @property
    def num_words(self) -> int:
        return sum(len(s.words) for s in self.sentences)

    def info(self) -> CorpusInfo:
        return CorpusInfo(
            self.name,
            self.split,
            self.labelled,
            self.path,
            self.sha256,
            len(self.sentences),
            self.num_words,
            self.nested,
        )

    def example_rows(self) -> list[dict]:
        """One record per sentence with the examples layer's fields and ``example_id``."""
        return [
            {
                "example_id": example_id(self.name, self.split, i),
                "corpus": self.name,
                "split": self.split,
                "index": i,
                "doc_id": s.doc_id,
                "n_words": len(s.words),
                "words": s.words,
                "tags": s.tags,
                "entity_spans": None if s.entities is None else [[a, b] for a, b, _ in s.entities],
                "entity_types": None if s.entities is None else [t for _, _, t in s.entities],
            }
            for i, s in enumerate(self.sentences)
        ]

    def to_scheme(self, scheme: str) -> "Corpus":
        """The same corpus with its tags converted to ``scheme``."""
        if not self.labelled or self.scheme == scheme:
            return self
        out = []
        for s in self.sentences:
            out.append(
                Sentence(s.words, convert_tags(s.tags, self.scheme, scheme), s.doc_id, s.line, s.tag_lines, s.entities)
            )
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme)

    def with_flat_tags(self, scheme: str) -> "Corpus":
        """A nested corpus that also has flat ``tags`` in ``scheme``: the outermost entities
        (``bilou.flatten_spans``), so that every consumer of flat tags (CRF teachers' gold NLL,
        flat students, seqeval) reads it as labelled, while ``entities`` keeps every span."""
        from ..bilou import flatten_spans
        from ..cache_schema.labels import spans_to_tags

        out = [
            Sentence(
                s.words,
                spans_to_tags(flatten_spans(s.entities or []), len(s.words), scheme),
                s.doc_id,
                s.line,
                None,
                s.entities,
            )
            for s in self.sentences
        ]
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme)

    def check_labels(self, schema: LabelSchema) -> None:
        """Raise if a tag of this corpus is outside ``schema`` (file and line named)."""
        known, types = set(schema.tags), set(schema.entity_types)
        for s in self.sentences:
            for _, _, t in s.entities or ():
                if t not in types:
                    raise CorpusError(
                        self.path, s.line, f"entity type {t!r} is not in the label schema's types {sorted(types)}"
                    )
            for i, t in enumerate(s.tags or ()):
                if t not in known:
                    raise CorpusError(
                        self.path, s.line_of(i), f"tag {t!r} is not in the label schema {list(schema.tags)}"
                    )


def read_corpus(
    path,
    name: str,
    split: str = "train",
    *,
    format: str = "auto",
    labelled: bool = True,
    scheme: str | None = None,
    word_column: int = 0,
    tag_column: int = -1,
) -> Corpus:
    """Read a corpus file in any supported format. ``labelled=False`` drops tags if present."""
    path = str(path)
    for value, what in ((name, "corpus name"), (split, "split name")):
        try:
            check_id(value, what)
        except ManifestError as e:
            raise CorpusError(path, None, str(e)) from None
    if format not in FORMATS:
        raise CorpusError(path, None, f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    raw = _read_bytes(path)
    lines = _decode_lines(raw, path)
    fmt = _sniff(path, lines, labelled) if format == "auto" else format
    if fmt == "conll":
        sentences = _parse_conll(lines, path, word_column, tag_column if labelled else None)
    elif fmt == "jsonl":
        sentences = _parse_jsonl(lines, path, labelled)
    else:
        sentences = _parse_text(lines)
    if not sentences:
        raise CorpusError(path, None, "the file holds no sentences (is it empty?)")
    corpus = Corpus(name, split, path, hashlib.sha256(raw).hexdigest(), sentences)
    spanned = [s for s in sentences if s.entities is not None]
    if spanned and len(spanned) != len(sentences):
        missing = next(s for s in sentences if s.entities is None)
        raise CorpusError(
            path,
            missing.line,
            "this sentence has no 'entities' while others have; a nested "
            "corpus gives them for every sentence (an empty list for none)",
        )
    tagged = [s for s in sentences if s.tags is not None]
    if tagged and len(tagged) != len(sentences):
        missing = next(s for s in sentences if s.tags is None)
        raise CorpusError(
            path,
            missing.line,
            "this sentence has no tags while others have; a corpus is labelled throughout or not at all",
        )
    if tagged:
        corpus.scheme = _check_scheme(tagged, path, scheme)
    return corpus


def derive_label_schema(corpora: list[Corpus], scheme: str | None = None) -> tuple[LabelSchema, list[Corpus]]:
    """The label schema of the labelled corpora, and the corpora converted to its scheme.

    Decision: the target scheme is ``scheme`` when given, else that of the first labelled corpus
    (IOB2 for a nested one); other labelled corpora are converted to it through their entity
    spans. Nested corpora (JSONL ``entities``) keep every span and get the outermost ones as flat
    tags (``Corpus.with_flat_tags``); the schema's types include every entity type.
    """
    labelled = [c for c in corpora if c.labelled or c.nested]
    if not labelled:
        raise CorpusError(
            corpora[0].path if corpora else "?", None, "no labelled corpus: a label schema needs at least one"
        )
    try:
        target = canonical_scheme(scheme) if scheme else (labelled[0].scheme or "IOB2")
    except TagError as e:
        raise CorpusError(labelled[0].path, None, str(e)) from None
    for c in corpora:
        if c.nested:
            c.layers(c.entity_types())  # two entities of one type must not overlap (file and line named)
    # nested corpora also get flat tags (the outermost entities) and add every entity's type
    converted = [c.with_flat_tags(target) if c.nested else c.to_scheme(target) for c in corpora]
    flat = LabelSchema.from_sequences([s.tags for c in converted if c.labelled for s in c.sentences], target)
    types = set(flat.entity_types) | {t for c in converted if c.nested for t in c.entity_types()}
    return LabelSchema(target, tuple(types)), converted


# -- internals ----------------------------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    if path == "-":  # standard input (distill-predict --input -)
        return sys.stdin.buffer.read()
    try:
        with fsspec.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CorpusError(path, None, "no such file") from None
    except IsADirectoryError:
        raise CorpusError(path, None, "is a directory, not a corpus file") from None


def _decode_lines(raw: bytes, path: str) -> list[str]:
    lines = raw.split(b"\n")
    out = []
    for i, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorpusError(
                path,
                i,
                f"bytes that are not UTF-8 at column {e.start + 1}; "
                "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
            ) from None
        out.append(text.rstrip("\r"))
    return out if raw else []


def _sniff(path: str, lines: list[str], labelled: bool) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if labelled or suffix in (".conll", ".bio", ".iob", ".conllu"):
        return "conll"
    body = [line.split() for line in lines if line.strip()][:200]
    if any(cols and cols[0] == DOCSTART for cols in body):
        return "conll"
    has_blank = any(not line.strip() for line in lines[:-1])
    widths = {len(c) for c in body}
    return "conll" if has_blank and len(widths) == 1 and 2 <= widths.pop() <= 10 else "text"


def _parse_conll(lines: list[str], path: str, word_column: int, tag_column: int | None) -> list[Sentence]:
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    tag_lines: list[int] = []
    width = None
    doc, has_docs = 0, False

    def flush() -> None:
        if words:
            sentences.append(
                Sentence(
                    list(words),
                    list(tags) if tag_column is not None else None,
                    str(doc) if has_docs else None,
                    tag_lines[0],
                    list(tag_lines),
                )
            )
        words.clear(), tags.clear(), tag_lines.clear()

    for n, line in enumerate(lines, 1):
        cols = line.split()
        if not cols:
            flush()
            continue
        if cols[0] == DOCSTART:
            flush()
            doc, has_docs = doc + 1, True
            continue
        if width is None:
            width = len(cols)
            for c, what in ((word_column, "word"), (tag_column, "tag")):
                if c is not None and not -width <= c < width:
                    raise CorpusError(path, n, f"the {what} column {c} does not exist: lines have {width} columns")
            if tag_column is not None and width < 2:
                raise CorpusError(path, n, "one column only: there is no tag column (read it as unlabelled?)")
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
    flush()
    return sentences


def _parse_jsonl(lines: list[str], path: str, labelled: bool) -> list[Sentence]:
    sentences = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(path, n, f"invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise CorpusError(path, n, 'expected an object like {"words": [...], "tags": [...]}')
        words = obj.get("words")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words):
            raise CorpusError(path, n, "'words' must be a non-empty list of non-empty strings")
        if any(any(ch.isspace() for ch in w) for w in words):
            raise CorpusError(path, n, "a word contains whitespace; split it into words")
        tags = obj.get("tags") if labelled else None
        entities = _entities(obj.get("entities"), len(words), path, n) if labelled and "entities" in obj else None
        if tags is not None and entities is not None:
            raise CorpusError(path, n, "give 'tags' or 'entities', not both")
        if tags is not None:
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise CorpusError(path, n, "'tags' must be a list of strings")
            if len(tags) != len(words):
                raise CorpusError(path, n, f"{len(tags)} tags for {len(words)} words")
        doc_id = obj.get("doc_id")
        sentences.append(Sentence(words, tags, None if doc_id is None else str(doc_id), n, entities=entities))
    return sentences


def _entities(value, n_words: int, path: str, line: int) -> list[tuple[int, int, str]]:
    """JSONL ``entities``: ``[[start, end, type], ...]``, end exclusive; entities may overlap."""
    if not isinstance(value, list):
        raise CorpusError(path, line, "'entities' must be a list of [start, end, type]")
    out = []
    for e in value:
        if not (
            isinstance(e, list)
            and len(e) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in e[:2])
            and isinstance(e[2], str)
            and e[2]
        ):
            raise CorpusError(path, line, f"entity {e!r} is not [start, end, type] (two integers and a name)")
        start, end, etype = e
        if not 0 <= start < end <= n_words:
            raise CorpusError(
                path,
                line,
                f"entity {e!r} does not fit the sentence's {n_words} words "
                "(start inclusive, end exclusive, counted from 0)",
            )
        out.append((start, end, etype))
    return out


def _parse_text(lines: list[str]) -> list[Sentence]:
    return [Sentence(line.split(), None, None, n, text=line) for n, line in enumerate(lines, 1) if line.strip()]


def _check_scheme(sentences: list[Sentence], path: str, scheme: str | None) -> str:
    try:
        scheme = canonical_scheme(scheme) if scheme else detect_scheme([s.tags for s in sentences])
    except TagError as e:
        raise CorpusError(path, None, str(e)) from None
    for s in sentences:
        problem = check_sequence(s.tags, scheme)
        if problem is not None:
            pos, reason = problem
            hint = "" if scheme != "IOB2" else " (if the file is IOB1, pass scheme='IOB1')"
            raise CorpusError(path, s.line_of(pos), f"{reason}{hint}")
    return scheme
