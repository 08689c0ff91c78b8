"""``read_corpus``: any supported format, read whole and fingerprinted before anything is written
(the formats and the ``auto`` rule are in ``seqdistill.corpora``)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
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
from .sentences import DOCSTART, FORMATS, HF_PREFIX, Corpus, CorpusError
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
    path = str(path)
    for value, what in ((name, "corpus name"), (split, "split name")):
        try:
            check_id(value, what)
        except ManifestError as e:
            raise CorpusError(path, None, str(e)) from None
    if format not in FORMATS:
        raise CorpusError(path, None, f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    given = check_tag_names(tag_names, path)
    names = TagNames(given)
    notes: list[str] = []
    for prefix, fmt in ((LS_PREFIX, "label-studio"), (SPANS_PREFIX, "spans")):
        if format in ("auto", fmt) and path.startswith(prefix):  # ls:FILE, spans:FILE (annotations.py)
            path, format = path[len(prefix) :], fmt
    if format == "hf" or (format == "auto" and path.startswith(HF_PREFIX)):
        path, sentences, digest = read_hf(path, labelled, names, notes)
    elif format in ("label-studio", "spans"):
        raw = read_bytes(path)
        digest = hashlib.sha256(raw)
        if format == "label-studio":
            sentences = parse_label_studio(raw, path, labelled, notes)
        else:
            sentences = parse_span_jsonl(decode_lines(raw, path), path, labelled, notes)
    else:
        raw = read_bytes(path)
        digest = hashlib.sha256(raw)
        if format == "parquet" or (format == "auto" and Path(path).suffix.lower() in (".parquet", ".pq")):
            sentences = read_parquet(raw, path, labelled, names, notes)
        else:
            lines = decode_lines(raw, path)
            fmt = sniff(path, lines, labelled) if format == "auto" else format
            if fmt == "conll":
                sentences = parse_conll(lines, path, word_column, tag_column if labelled else None)
            elif fmt == "jsonl":
                sentences = parse_jsonl(lines, path, labelled, names, notes)
            else:
                sentences = parse_text(lines)
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
        corpus.scheme = check_scheme(tagged, path, scheme)
    return corpus


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


def decode_lines(raw: bytes, path: str) -> list[str]:
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


def sniff(path: str, lines: list[str], labelled: bool) -> str:
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
