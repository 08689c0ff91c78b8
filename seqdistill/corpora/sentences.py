"""The data model of a corpus: sentences, a corpus split with its source's fingerprint, and the
error that names a file and line (or row and column)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..cache_schema import CorpusInfo, LabelSchema, example_id
from ..cache_schema.labels import convert_tags

FORMATS = ("auto", "conll", "jsonl", "text", "parquet", "hf", "label-studio", "spans")
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
    text: str | None = None  # a text corpus's raw line (distill-predict splits it by the model's words rule, words.py)
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

    def example_row(self, corpus: str, split: str, index: int) -> dict:
        """The examples layer's record of this sentence, the ``index``-th of its corpus split."""
        return {
            "example_id": example_id(corpus, split, index),
            "corpus": corpus,
            "split": split,
            "index": index,
            "doc_id": self.doc_id,
            "words": self.words,
            **self.gold_fields(),
        }

    def in_scheme(self, source: str, target: str) -> "Sentence":
        """This sentence with its tags converted from scheme ``source`` to ``target``."""
        return dataclasses.replace(self, tags=convert_tags(self.tags, source, target))

    def with_flat_tags(self, scheme: str) -> "Sentence":
        """This nested sentence with flat ``tags`` in ``scheme``: its outermost entities."""
        from ..bilou import flatten_spans
        from ..cache_schema.labels import spans_to_tags

        tags = spans_to_tags(flatten_spans(self.entities or []), len(self.words), scheme)
        return dataclasses.replace(self, tags=tags, tag_lines=None)

    def layers(self, types: list[str], path: str) -> list[list[int]]:
        """Its entities as one BILOU layer per type (``seqdistill.bilou``); errors name ``path``."""
        from ..bilou import layers_from_spans

        try:
            return layers_from_spans(self.entities or [], len(self.words), types)
        except ValueError as e:
            raise self.error(path, str(e)) from None

    def check_labels(self, schema: LabelSchema, known: set[str], types: set[str], path: str) -> None:
        """Raise if a tag or entity type is outside ``schema`` (``known``: its tags, ``types``: its
        entity types)."""
        for _, _, t in self.entities or ():
            if t not in types:
                raise self.error(path, f"entity type {t!r} is not in the label schema's types {sorted(types)}")
        for i, t in enumerate(self.tags or ()):
            if t not in known:
                raise self.error(path, f"tag {t!r} is not in the label schema {list(schema.tags)}", i)

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
        return [s.layers(types, self.path) for s in self.sentences]

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
        return [s.example_row(self.name, self.split, i) for i, s in enumerate(self.sentences)]

    def to_scheme(self, scheme: str) -> "Corpus":
        """The same corpus with its tags converted to ``scheme``."""
        if not self.labelled or self.scheme == scheme:
            return self
        out = [s.in_scheme(self.scheme, scheme) for s in self.sentences]
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme, list(self.notes))

    def with_flat_tags(self, scheme: str) -> "Corpus":
        """A nested corpus that also has flat ``tags`` in ``scheme``: the outermost entities
        (``bilou.flatten_spans``), so that every consumer of flat tags (CRF teachers' gold NLL,
        flat students, seqeval) reads it as labelled, while ``entities`` keeps every span."""
        out = [s.with_flat_tags(scheme) for s in self.sentences]
        return Corpus(self.name, self.split, self.path, self.sha256, out, scheme, list(self.notes))

    def check_labels(self, schema: LabelSchema) -> None:
        """Raise if a tag of this corpus is outside ``schema`` (file and line named)."""
        known, types = set(schema.tags), set(schema.entity_types)
        for s in self.sentences:
            s.check_labels(schema, known, types, self.path)
