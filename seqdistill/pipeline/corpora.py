"""Corpus readers: CoNLL column files, JSONL, raw text, Parquet and Hugging Face datasets.

Every reader reads the whole file before anything is written anywhere, fingerprints it (sha256 of
its bytes, recorded in the cache manifest), and raises :class:`CorpusError` naming the file and
line of the first problem: wrong column count, ill-formed tag, a transition the tag scheme forbids,
bytes that are not UTF-8, an empty file. Row-based corpora (Parquet, ``hf:``) name the row and
column instead of a line: ``data/ner.parquet: row 17, column ner_tags: tag id 12 has no name (9
names)``; rows are counted from 0, as ``dataset[17]`` counts them.

Formats:

* ``conll`` — one token per line, whitespace-separated columns, a blank line between sentences;
  choose the word and tag columns (default: first and last). ``-DOCSTART-`` lines start a new
  document (``doc_id`` ``"1"``, ``"2"``, ...) and are not sentences.
* ``jsonl`` — one object per line: ``{"words": [...], "tags": [...]}``, ``tags`` optional,
  ``doc_id`` optional.
  A line may instead give the columns of a Hugging Face NER dataset, ``{"tokens": [...],
  "ner_tags": [...]}`` (what ``Dataset.to_json`` writes), read as a Parquet row is.
* ``text`` — one sentence per line, split on whitespace; no tags.
* ``parquet`` — a row per sentence with a ``tokens`` column (a list of strings) and, when
  labelled, a ``ner_tags`` column: tag strings, or integer ids named by the ``ClassLabel`` feature
  that ``datasets`` records in the file's metadata (``Dataset.to_parquet``) or by ``tag_names``
  (``--tag-names A,B,...``; id 0 first). Read with pyarrow.
* ``hf`` — ``hf:DIR[@SPLIT]``: a ``datasets`` ``save_to_disk`` directory, read as ``parquet`` rows
  are (tag names from ``features["ner_tags"].feature.names``). ``@SPLIT`` picks a split of a
  ``DatasetDict``; a DatasetDict of one split needs none, one of several splits is refused with
  their names. On a plain ``Dataset`` the ``@SPLIT`` selects nothing (under ``distill-cache
  build``, ``NAME=hf:DIR@SPLIT`` names the cache split, as it does for a file). ``datasets`` is
  imported only here (``pip install 'seqdistill[datasets]'``).

Rows (``parquet``, ``hf``, JSONL ``tokens`` lines) follow the CoNLL file that the dataset was made
from: a row whose only token is ``-DOCSTART-`` starts a new document (``doc_id`` ``"1"``,
``"2"``, ...) and is not a sentence, and a row without tokens is skipped (a CoNLL file cannot
hold an empty sentence); the skipped count is in ``Corpus.notes``. Other columns are ignored.
``tag_names`` only names integer ids: tag strings are read as they are. Given with a ``ClassLabel``
feature, they must agree with it. The fingerprint of a row corpus is the sha256 of its bytes
(for ``hf``: of the split's Arrow files and its features), with ``tag_names`` added when they
named ids, so that another naming is another corpus to the cache.

``auto`` (the default) picks ``hf`` for ``hf:`` paths, ``parquet`` for ``.parquet``/``.pq``,
``jsonl`` for ``.jsonl``/``.json`` and ``conll`` for ``.conll``/``.bio``/``.iob``. Otherwise a
labelled read is ``conll`` (tags need columns), and an unlabelled read sniffs the first 200
non-blank lines: a ``-DOCSTART-`` line, or lines that all have the same number of columns (2 to 10)
with blank lines between sentences, mean ``conll``; else ``text``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import fsspec

from ..cache_schema import CorpusInfo, LabelSchema, example_id
from ..cache_schema.errors import ManifestError
from ..cache_schema.labels import TagError, canonical_scheme, check_sequence, convert_tags, detect_scheme
from ..cache_schema.manifest import check_id

FORMATS = ("auto", "conll", "jsonl", "text", "parquet", "hf")
DOCSTART = "-DOCSTART-"
HF_PREFIX = "hf:"
WORDS_COLUMN, TAGS_COLUMN = "tokens", "ner_tags"  # the columns of a Hugging Face NER dataset


class CorpusError(ValueError):
    """A problem in a corpus file, at a line (or, in a row-based corpus, a row and column)."""

    def __init__(
        self,
        path: str,
        line: int | None,
        message: str,
        *,
        row: int | None = None,
        column: str | None = None,
        word: int | None = None,
    ):
        self.path, self.line, self.message = path, line, message
        self.row, self.column, self.word = row, column, word
        where = f"{path}:{line}" if line else str(path)
        parts = [f"row {row}"] * (row is not None) + [f"column {column}"] * bool(column)
        parts += [f"word {word}"] * (word is not None)
        if parts:
            where += ": " + ", ".join(parts)
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
    row: int | None = None  # row of a row-based corpus (Parquet, hf:), counted from 0; errors name it
    column: str | None = None  # the column of the tags in that row, for error messages

    def gold_fields(self) -> dict:
        """The examples layer's gold fields of this sentence (``n_words``, ``tags``,
        ``entity_spans``, ``entity_types``): what ``TeacherKind.gold_targets`` reads."""
        return {
            "n_words": len(self.words),
            "tags": self.tags,
            "entity_spans": None if self.entities is None else [[a, b] for a, b, _ in self.entities],
            "entity_types": None if self.entities is None else [t for _, _, t in self.entities],
        }

    def line_of(self, position: int) -> int:
        return self.tag_lines[position] if self.tag_lines else self.line

    def error(self, path: str, message: str, position: int | None = None) -> CorpusError:
        """A :class:`CorpusError` at this sentence: the line of the tag at ``position`` (or of the
        sentence), or in a row-based corpus its row, tag column and word."""
        if self.row is not None:
            return CorpusError(path, None, message, row=self.row, column=self.column, word=position)
        return CorpusError(path, self.line if position is None else self.line_of(position), message)


@dataclass
class Corpus:
    """The sentences of one corpus split, with the fingerprint of its source file."""

    name: str
    split: str
    path: str
    sha256: str
    sentences: list[Sentence] = field(default_factory=list)
    scheme: str | None = None  # tag scheme of a labelled corpus
    notes: list[str] = field(default_factory=list)  # what the reader did that a user should know (check-corpus)

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
                raise s.error(self.path, str(e)) from None
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
                "words": s.words,
                **s.gold_fields(),
            }
            for i, s in enumerate(self.sentences)
        ]

    def to_scheme(self, scheme: str) -> "Corpus":
        """The same corpus with its tags converted to ``scheme``."""
        if not self.labelled or self.scheme == scheme:
            return self
        out = [dataclasses.replace(s, tags=convert_tags(s.tags, self.scheme, scheme)) for s in self.sentences]
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme, list(self.notes))

    def with_flat_tags(self, scheme: str) -> "Corpus":
        """A nested corpus that also has flat ``tags`` in ``scheme``: the outermost entities
        (``bilou.flatten_spans``), so that every consumer of flat tags (CRF teachers' gold NLL,
        flat students, seqeval) reads it as labelled, while ``entities`` keeps every span."""
        from ..bilou import flatten_spans
        from ..cache_schema.labels import spans_to_tags

        out = [
            dataclasses.replace(
                s, tags=spans_to_tags(flatten_spans(s.entities or []), len(s.words), scheme), tag_lines=None
            )
            for s in self.sentences
        ]
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme, list(self.notes))

    def check_labels(self, schema: LabelSchema) -> None:
        """Raise if a tag of this corpus is outside ``schema`` (file and line named)."""
        known, types = set(schema.tags), set(schema.entity_types)
        for s in self.sentences:
            for _, _, t in s.entities or ():
                if t not in types:
                    raise s.error(self.path, f"entity type {t!r} is not in the label schema's types {sorted(types)}")
            for i, t in enumerate(s.tags or ()):
                if t not in known:
                    raise s.error(self.path, f"tag {t!r} is not in the label schema {list(schema.tags)}", i)


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
    tag_names: Sequence[str] | None = None,
) -> Corpus:
    """Read a corpus in any supported format. ``labelled=False`` drops tags if present.

    ``tag_names`` (``--tag-names``) names integer tag ids (id 0 first) where the corpus's own
    features do not (Parquet, ``hf:`` and JSONL ``ner_tags``); tag strings ignore them.
    """
    path = str(path)
    for value, what in ((name, "corpus name"), (split, "split name")):
        try:
            check_id(value, what)
        except ManifestError as e:
            raise CorpusError(path, None, str(e)) from None
    if format not in FORMATS:
        raise CorpusError(path, None, f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    given = _check_tag_names(tag_names, path)
    names = _TagNames(given)
    notes: list[str] = []
    if format == "hf" or (format == "auto" and path.startswith(HF_PREFIX)):
        path, sentences, digest = _read_hf(path, labelled, names, notes)
    else:
        raw = _read_bytes(path)
        digest = hashlib.sha256(raw)
        if format == "parquet" or (format == "auto" and Path(path).suffix.lower() in (".parquet", ".pq")):
            sentences = _read_parquet(raw, path, labelled, names, notes)
        else:
            lines = _decode_lines(raw, path)
            fmt = _sniff(path, lines, labelled) if format == "auto" else format
            if fmt == "conll":
                sentences = _parse_conll(lines, path, word_column, tag_column if labelled else None)
            elif fmt == "jsonl":
                sentences = _parse_jsonl(lines, path, labelled, names, notes)
            else:
                sentences = _parse_text(lines)
    if not sentences:
        raise CorpusError(path, None, "the file holds no sentences (is it empty?)")
    if names.given_used:  # ids named by tag_names: another naming is another corpus
        digest.update(b"\0tag-names:" + json.dumps(list(given)).encode())
    corpus = Corpus(name, split, path, digest.hexdigest(), sentences, notes=notes)
    spanned = [s for s in sentences if s.entities is not None]
    if spanned and len(spanned) != len(sentences):
        missing = next(s for s in sentences if s.entities is None)
        raise missing.error(
            path,
            "this sentence has no 'entities' while others have; a nested "
            "corpus gives them for every sentence (an empty list for none)",
        )
    tagged = [s for s in sentences if s.tags is not None]
    if tagged and len(tagged) != len(sentences):
        missing = next(s for s in sentences if s.tags is None)
        raise missing.error(
            path, "this sentence has no tags while others have; a corpus is labelled throughout or not at all"
        )
    if tagged:
        corpus.scheme = _check_scheme(tagged, path, scheme)
    return corpus


def parse_tag_names(text: str | None) -> tuple[str, ...] | None:
    """``--tag-names A,B,...``: the names of tag ids 0, 1, ... (None when not given)."""
    if text is None:
        return None
    names = tuple(t.strip() for t in text.split(","))
    if not all(names):
        raise ValueError(f"{text!r}: expected comma-separated tag names, id 0 first (e.g. O,B-PER,I-PER)")
    return names


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
        raise CorpusError(
            path,
            None,
            f"is a directory, not a corpus file (a datasets save_to_disk directory is read as {HF_PREFIX}{path})",
        ) from None


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


def _parse_jsonl(lines: list[str], path: str, labelled: bool, names: "_TagNames", notes: list[str]) -> list[Sentence]:
    sentences = []
    rows = _Rows(path, labelled, names)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(path, n, f"invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise CorpusError(path, n, 'expected an object like {"words": [...], "tags": [...]}')
        if WORDS_COLUMN in obj or TAGS_COLUMN in obj:  # a Hugging Face dataset's row (Dataset.to_json)
            for key in ("words", "tags", "entities"):
                if key in obj:
                    raise CorpusError(
                        path, n, f"give 'words'/'tags' or '{WORDS_COLUMN}'/'{TAGS_COLUMN}', not {key!r} with them"
                    )
            s = rows.sentence(obj.get(WORDS_COLUMN), obj.get(TAGS_COLUMN), None, n)
            if s is not None:
                doc_id = obj.get("doc_id")
                if doc_id is not None:
                    s.doc_id = str(doc_id)
                sentences.append(s)
            continue
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
    notes.extend(rows.notes())
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
            raise s.error(path, f"{reason}{hint}", pos)
    return scheme


# -- row-based corpora: Parquet, Hugging Face datasets, JSONL tokens/ner_tags ----------------------


def _check_tag_names(tag_names, path: str) -> tuple[str, ...] | None:
    if tag_names is None:
        return None
    if isinstance(tag_names, str):
        raise CorpusError(path, None, "tag_names must be a list of names (id 0 first), not one string")
    names = tuple(tag_names)
    if not names or not all(isinstance(t, str) and t and t.strip() == t for t in names):
        raise CorpusError(path, None, f"tag names {list(names)!r} must be non-empty strings without spaces")
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise CorpusError(path, None, f"tag names {list(names)} name {', '.join(map(repr, twice))} twice")
    return names


class _TagNames:
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


class _Rows:
    """Rows of ``tokens`` (and ``ner_tags``) made into sentences, with -DOCSTART- rows starting
    documents and empty rows skipped; errors name the row (or, in JSONL, the line) and column."""

    def __init__(self, path: str, labelled: bool, names: _TagNames):
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


def _class_label_names(features) -> list[str] | None:
    """``features["ner_tags"].feature.names`` from the JSON form of ``datasets`` features (as
    ``Features.to_dict()`` and the ``huggingface`` metadata of a Parquet file hold them)."""
    if not isinstance(features, dict):
        return None
    f = features.get(TAGS_COLUMN)
    inner = f.get("feature") if isinstance(f, dict) else (f[0] if isinstance(f, list) and f else None)
    if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and isinstance(inner.get("names"), list):
        return inner["names"]
    return None


def _table_sentences(table, path: str, labelled: bool, names: _TagNames, notes: list[str]) -> list[Sentence]:
    """A pyarrow table of ``tokens`` (and ``ner_tags``) columns, a row per sentence."""
    columns = table.column_names
    for column, needed in ((WORDS_COLUMN, True), (TAGS_COLUMN, labelled)):
        if needed and column not in columns:
            hint = " (read it as unlabelled, or name the tag column ner_tags)" if column == TAGS_COLUMN else ""
            raise CorpusError(path, None, f"no column {column!r}: the columns are {', '.join(columns) or 'none'}{hint}")
    words = table.column(WORDS_COLUMN).to_pylist()
    tags = table.column(TAGS_COLUMN).to_pylist() if labelled else [None] * len(words)
    rows = _Rows(path, labelled, names)
    out = [s for i, (w, t) in enumerate(zip(words, tags)) if (s := rows.sentence(w, t, i)) is not None]
    notes.extend(rows.notes())
    return out


def _read_parquet(raw: bytes, path: str, labelled: bool, names: _TagNames, notes: list[str]) -> list[Sentence]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    local = "://" not in path and path != "-"
    try:
        # Decision: a local file is parsed by Arrow from its path. Parsing the bytes already read
        # (any Python-backed buffer) leaves Arrow holding Python memory at interpreter exit, which
        # with torch loaded aborts the process now and then ("terminate called without an active
        # exception", pyarrow 26, torch 2.13); the sha256 is still that of the bytes read.
        table = pq.read_table(path) if local else pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(path, None, f"not a Parquet file ({e})") from None
    meta = (table.schema.metadata or {}).get(b"huggingface")
    features = None
    if meta:  # written by datasets (Dataset.to_parquet): its features, ClassLabel names included
        try:
            features = json.loads(meta).get("info", {}).get("features")
        except (ValueError, AttributeError):
            pass  # unreadable metadata: the ids need --tag-names, as in any other Parquet file
    names.set_class_label(_class_label_names(features), path)
    return _table_sentences(table, path, labelled, names, notes)


def _hf_location(spec: str) -> tuple[str, str | None]:
    """``hf:DIR[@SPLIT]`` -> (DIR, SPLIT or None). A DIR that exists with its ``@`` is a directory."""
    rest = spec[len(HF_PREFIX) :] if spec.startswith(HF_PREFIX) else spec
    head, at, tail = rest.rpartition("@")
    if at and head and tail and "/" not in tail and not os.path.isdir(rest):
        return head, tail
    return rest, None


def _read_hf(spec: str, labelled: bool, names: _TagNames, notes: list[str]):
    """A ``save_to_disk`` directory: (the path errors and the manifest name, sentences, sha256)."""
    directory, split = _hf_location(spec)
    shown = f"{HF_PREFIX}{directory}"
    try:
        import datasets
    except ImportError:
        raise CorpusError(
            shown, None, "reading a Hugging Face dataset needs the datasets package: pip install 'seqdistill[datasets]'"
        ) from None
    try:
        ds = datasets.load_from_disk(directory)
    except FileNotFoundError:
        what = (
            "no such directory"
            if not os.path.exists(directory)
            else "not a datasets save_to_disk directory (it has no dataset_dict.json, nor state.json with dataset_info.json)"
        )
        raise CorpusError(shown, None, what) from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split is None:
            raise CorpusError(
                shown,
                None,
                f"a DatasetDict with splits {', '.join(splits)}: pick one with {shown}@SPLIT (e.g. {shown}@{splits[0]})",
            )
        if split not in ds:
            raise CorpusError(shown, None, f"no split {split!r}: the DatasetDict has {', '.join(splits)}")
        ds, shown = ds[split], f"{shown}@{split}"
    elif split is not None:
        shown = f"{shown}@{split}"  # a plain Dataset: @SPLIT names the corpus split, it selects nothing
    features = ds.features.to_dict()
    names.set_class_label(_class_label_names(features), shown)
    sentences = _table_sentences(ds.with_format("arrow")[:], shown, labelled, names, notes)
    digest = hashlib.sha256()
    for f in ds.cache_files:  # the split's Arrow files, as stored
        with open(f["filename"], "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    digest.update(json.dumps(features, sort_keys=True).encode())
    return shown, sentences, digest
