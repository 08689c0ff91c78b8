"""A corpus read in passes, never held whole: what ``distill-cache build`` reads, so that its memory
does not grow with the corpora (issue 54; docs/BENCHMARKS.md, "How cost grows with the work").

``scan_corpus`` reads the file once for what the manifest states of it (sha256, sentences, words,
labelled or nested) and for its tag scheme; ``StreamedCorpus.check`` reads it once more to check
every sentence (its tags in that scheme, one type's entities not overlapping, every label in the
teacher's schema): every error comes before anything is written, as with ``read_corpus``. :meth:`StreamedCorpus.sentences`
reads it again for each later pass (the examples and the teacher's shards, the vocabulary of the
exports). The sentences, the errors and the fingerprint are those of ``read_corpus`` followed by
the build's conversions (``Corpus.with_flat_tags`` for a nested corpus, ``Corpus.to_scheme``).

Decision: reading a file again is cheaper than holding it. A pass over a CoNLL file parses about
a million words a second here (docs/BENCHMARKS.md), against the teacher's 40,000; a build makes
three passes (scan, check, shards) and a fourth when it writes the exports. A source that changes
between passes is caught: each pass checks the sha256 of what it read against the scan's.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..cache_schema import CorpusInfo, LabelSchema
from ..cache_schema.labels import SchemeGuess
from .read import MIXED_ENTITIES, MIXED_TAGS, CorpusSource
from .schemes import check_tags, corpus_scheme
from .sentences import CorpusError, Sentence


@dataclass
class StreamedCorpus:
    """A corpus split known by its scan (:func:`scan_corpus`), its sentences read on demand."""

    source: CorpusSource
    path: str  # as errors and the manifest name it
    sha256: str
    lengths: np.ndarray  # words of each sentence (int32): 4 bytes a sentence, the only per-sentence state kept
    nested: bool
    scheme: str | None  # the scheme of the file's own tags (None: no tags, or nested)
    target: str | None  # the scheme its tags are given in (the teacher's); None: as they are
    entity_types: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def split(self) -> str:
        return self.source.split

    @property
    def examples(self) -> int:
        return len(self.lengths)

    @property
    def words(self) -> int:
        return int(self.lengths.sum())

    @property
    def labelled(self) -> bool:
        return self.source.labelled and (self.scheme is not None or self.nested)

    def info(self) -> CorpusInfo:
        return CorpusInfo(
            self.name, self.split, self.labelled, self.path, self.sha256, self.examples, self.words, self.nested
        )

    def sentences(self, schema: LabelSchema | None = None) -> Iterator[Sentence]:
        """Its sentences read again, converted as the build gives them (a nested corpus with flat
        tags, tags in ``target``); with ``schema`` each is checked on the way (:func:`scan_corpus`)."""
        read = self.source.read()
        known, types = (set(schema.tags), set(schema.entity_types)) if schema else (None, None)
        for s in read.sentences:
            if schema is not None:
                if self.scheme is not None:
                    check_tags(s, self.path, self.scheme)
                if self.nested:
                    s.layers(self.entity_types, self.path)  # one type's entities must not overlap
            if self.nested:
                s = s.with_flat_tags(self.target or "IOB2")
            elif self.scheme is not None and self.target and self.target != self.scheme:
                s = s.in_scheme(self.scheme, self.target)
            if schema is not None:
                s.check_labels(schema, known, types, self.path)
            yield s
        if read.sha256() != self.sha256:
            raise CorpusError(self.path, None, "the file changed while the build read it; run the build again")

    def check(self, schema: LabelSchema) -> None:
        """Read it again and check every sentence: its tags in its scheme, one type's entities not
        overlapping, every tag and entity type in ``schema`` (the teacher's). The errors are those
        of ``read_corpus`` and ``Corpus.check_labels``; a file with several problems has the first
        sentence with one named."""
        for _ in self.sentences(schema):
            pass

    def example_rows(self) -> Iterator[dict]:
        """The examples layer's records, in order (``Corpus.example_rows``, one at a time)."""
        for i, s in enumerate(self.sentences()):
            yield s.example_row(self.name, self.split, i)


def scan_corpus(source: CorpusSource, target: str | None) -> StreamedCorpus:
    """Read ``source`` once, holding one sentence at a time, for its fingerprint, counts and
    scheme (:meth:`StreamedCorpus.check` then checks every sentence). ``target``: the scheme the
    build gives tags in. Raises what ``read_corpus`` raises for a file that cannot be read, is
    empty, or mixes sentences with and without tags or entities."""
    read = source.read()
    lengths = array("i")
    first_without: dict[str, Sentence] = {}
    with_: set[str] = set()
    guess, types = SchemeGuess(), set()
    for s in read.sentences:
        lengths.append(len(s.words))
        for key, value in (("entities", s.entities), ("tags", s.tags)):
            if value is None:
                first_without.setdefault(key, s)
            else:
                with_.add(key)
        if s.tags is not None:
            guess.add(s.tags)
        types.update(t for _, _, t in s.entities or ())
    if not lengths:
        raise CorpusError(read.path, None, "the file holds no sentences (is it empty?)")
    for key, message in (("entities", MIXED_ENTITIES), ("tags", MIXED_TAGS)):
        if key in with_ and key in first_without:
            raise first_without[key].error(read.path, message)
    nested = "entities" in with_
    scheme = corpus_scheme(None, guess, read.path) if "tags" in with_ else None
    if source.labelled and scheme is None and not nested:
        raise CorpusError(source.path, None, "given as labelled but has no tags; pass it with --unlabelled")
    return StreamedCorpus(
        source,
        read.path,
        read.sha256(),
        np.frombuffer(lengths, dtype=np.int32),
        nested,
        scheme,
        target,
        sorted(types),
        read.notes,
    )
