"""``read_corpus``: any supported format, read whole and fingerprinted before anything is written
(the formats and the ``auto`` rule are in ``seqdistill.corpora``); ``CorpusSource``: the same
readers as a stream of sentences, for a build that reads corpora in passes (``stream.py``)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import fsspec

from ..cache_schema.errors import ManifestError
from ..cache_schema.manifest import check_id
from .annotations import LS_PREFIX, SPANS_PREFIX, parse_label_studio, parse_span_jsonl
from .conll import parse_conll
from .hf import read_hf
from .jsonl import parse_jsonl
from .parquet import read_parquet
from .rows import TagNames
from .schemes import check_scheme
from .sentences import DOCSTART, FORMATS, HF_PREFIX, Corpus, CorpusError, Sentence
from .text import parse_text


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
    source = CorpusSource.of(path, name, split, format, labelled, word_column, tag_column, tag_names)
    read = source.read()
    sentences = list(read.sentences)
    if not sentences:
        raise CorpusError(read.path, None, "the file holds no sentences (is it empty?)")
    corpus = Corpus(name, split, read.path, read.sha256(), sentences, notes=read.notes)
    spanned = [s for s in sentences if s.entities is not None]
    if spanned and len(spanned) != len(sentences):
        missing = next(s for s in sentences if s.entities is None)
        raise missing.error(read.path, MIXED_ENTITIES)
    tagged = [s for s in sentences if s.tags is not None]
    if tagged and len(tagged) != len(sentences):
        missing = next(s for s in sentences if s.tags is None)
        raise missing.error(read.path, MIXED_TAGS)
    if tagged:
        corpus.scheme = check_scheme(tagged, read.path, scheme)
    return corpus


MIXED_ENTITIES = (
    "this sentence has no 'entities' while others have; a nested "
    "corpus gives them for every sentence (an empty list for none)"
)
MIXED_TAGS = "this sentence has no tags while others have; a corpus is labelled throughout or not at all"


@dataclass(frozen=True)
class CorpusSource:
    """A corpus file and how to read it, checked; :meth:`read` parses it (again) from the start.
    ``read_corpus`` reads it once into a :class:`Corpus`; ``corpora/stream.py`` reads it in passes
    without holding it."""

    path: str
    name: str
    split: str
    format: str
    labelled: bool
    word_column: int
    tag_column: int
    tag_names: tuple[str, ...] | None

    @classmethod
    def of(cls, path, name, split, format, labelled, word_column, tag_column, tag_names) -> "CorpusSource":
        path = str(path)
        for value, what in ((name, "corpus name"), (split, "split name")):
            try:
                check_id(value, what)
            except ManifestError as e:
                raise CorpusError(path, None, str(e)) from None
        if format not in FORMATS:
            raise CorpusError(path, None, f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        given = check_tag_names(tag_names, path)
        for prefix, fmt in ((LS_PREFIX, "label-studio"), (SPANS_PREFIX, "spans")):
            if format in ("auto", fmt) and path.startswith(prefix):  # ls:FILE, spans:FILE (annotations.py)
                path, format = path[len(prefix) :], fmt
        if format == "auto" and path.startswith(HF_PREFIX):
            format = "hf"
        return cls(path, name, split, format, labelled, word_column, tag_column, given)

    def read(self) -> "SourceRead":
        """One pass over the file: its sentences as they are parsed (a file is read 1 MiB, a
        Parquet file or ``hf:`` split 4,096 rows, at a time; a Label Studio export, one JSON
        document, whole), its sha256 and the reader's notes once they are all read."""
        names, notes, digest, path = TagNames(self.tag_names), [], hashlib.sha256(), self.path
        labelled, fmt = self.labelled, self.format
        if fmt == "hf":
            path, sentences = read_hf(path, labelled, names, notes, digest)
        elif fmt == "label-studio":
            raw = read_bytes(path)
            digest.update(raw)
            sentences = iter(parse_label_studio(raw, path, labelled, notes))
        elif fmt == "parquet" or (fmt == "auto" and Path(path).suffix.lower() in (".parquet", ".pq")):
            local = "://" not in path and path != "-"
            raw = None if local else read_bytes(path)
            blocks = file_blocks(path) if local else [raw]
            sentences = _hashed(read_parquet(raw, path, labelled, names, notes), blocks, digest)
        else:
            stdin = read_bytes(path) if path == "-" else None  # standard input is read once, whole

            def blocks():
                return [stdin] if stdin is not None else file_blocks(path)

            lines = split_lines(blocks(), path, digest)
            if fmt == "auto":
                fmt = sniff(path, split_lines(blocks(), path), labelled)
            if fmt == "spans":
                sentences = parse_span_jsonl(lines, path, labelled, notes)
            elif fmt == "conll":
                sentences = parse_conll(lines, path, self.word_column, self.tag_column if labelled else None)
            elif fmt == "jsonl":
                sentences = parse_jsonl(lines, path, labelled, names, notes)
            else:
                sentences = parse_text(lines)
        return SourceRead(path, sentences, notes, digest, names)


@dataclass
class SourceRead:
    """One pass over a corpus file (:meth:`CorpusSource.read`): ``path`` as errors and the manifest
    name it, ``sentences`` as parsed; ``notes`` and :meth:`sha256` are whole once they are all read."""

    path: str
    sentences: Iterator[Sentence]
    notes: list[str]
    digest: object
    names: TagNames

    def sha256(self) -> str:
        if self.names.given_used:  # ids named by tag_names: another naming is another corpus
            self.digest.update(b"\0tag-names:" + json.dumps(list(self.names.given)).encode())
        return self.digest.hexdigest()


def _hashed(sentences: Iterator[Sentence], blocks, digest) -> Iterator[Sentence]:
    """``sentences``, then the sha256 of the file's bytes (read again, in blocks), for a reader
    that parses the file by itself (Parquet)."""
    yield from sentences
    for block in blocks:
        digest.update(block)


def parse_tag_names(text: str | None) -> tuple[str, ...] | None:
    """``--tag-names A,B,...``: the names of tag ids 0, 1, ... (None when not given)."""
    if text is None:
        return None
    names = tuple(t.strip() for t in text.split(","))
    if not all(names):
        raise ValueError(f"{text!r}: expected comma-separated tag names, id 0 first (e.g. O,B-PER,I-PER)")
    return names


def read_bytes(path: str) -> bytes:
    if path == "-":  # standard input (distill-predict --input -)
        return sys.stdin.buffer.read()
    return b"".join(file_blocks(path))


def file_blocks(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of a file (local or fsspec), ``size`` at a time."""
    try:
        with fsspec.open(path, "rb") as f:
            yield from iter(lambda: f.read(size), b"")
    except FileNotFoundError:
        raise CorpusError(path, None, "no such file") from None
    except IsADirectoryError:
        raise CorpusError(
            path,
            None,
            f"is a directory, not a corpus file (a datasets save_to_disk directory is read as {HF_PREFIX}{path})",
        ) from None


def decode_lines(raw: bytes, path: str) -> list[str]:
    return list(split_lines([raw], path))


def split_lines(blocks, path: str, digest=None) -> Iterator[str]:
    """The lines of a file given as byte blocks: split at ``\\n``, a trailing ``\\r`` dropped, each
    decoded as UTF-8 (an error names the line and column); a file that ends with a newline ends
    with an empty line, an empty file has none. ``digest`` gets every byte."""
    rest, n, seen = b"", 0, False
    for block in blocks:
        if digest is not None:
            digest.update(block)
        seen = seen or bool(block)
        *lines, rest = (rest + block).split(b"\n")
        for line in lines:
            n += 1
            yield _decode(line, path, n)
    if seen:
        yield _decode(rest, path, n + 1)


def _decode(line: bytes, path: str, n: int) -> str:
    try:
        return line.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as e:
        raise CorpusError(
            path,
            n,
            f"bytes that are not UTF-8 at column {e.start + 1}; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def sniff(path: str, lines: Iterable[str], labelled: bool) -> str:
    """The format of an ``auto`` read that the suffix does not decide (read as the lines come, as
    far as it must: the first 200 non-blank lines, and whether a blank line comes before the last)."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if labelled or suffix in (".conll", ".bio", ".iob", ".conllu"):
        return "conll"
    body: list[list[str]] = []
    has_blank = after_blank = False
    for line in lines:
        has_blank = has_blank or after_blank  # a blank line that is not the last line
        after_blank = not line.strip()
        if not after_blank and len(body) < 200:
            body.append(line.split())
        if has_blank and len(body) >= 200:
            break
    if any(cols and cols[0] == DOCSTART for cols in body):
        return "conll"
    widths = {len(c) for c in body}
    return "conll" if has_blank and len(widths) == 1 and 2 <= widths.pop() <= 10 else "text"


def check_tag_names(tag_names, path: str) -> tuple[str, ...] | None:
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
