"""JSONL: ``{"words", "tags", "doc_id", "entities"}`` objects, or a Hugging Face NER dataset's
``{"tokens", "ner_tags"}`` rows (read as a Parquet row is)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from .rows import Rows, TagNames
from .sentences import TAGS_COLUMN, WORDS_COLUMN, CorpusError, Sentence


def json_lines(lines: Iterable[str], path: str):
    """``(line number, parsed value)`` of every non-blank line; invalid JSON names its line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(path, n, f"invalid JSON ({e.msg} at column {e.colno})") from None


def parse_jsonl(
    lines: Iterable[str], path: str, labelled: bool, names: "TagNames", notes: list[str]
) -> Iterator[Sentence]:
    """The sentences of a JSONL file, as its lines come (``notes`` gets what was skipped at the end)."""
    rows = Rows(path, labelled, names)
    for n, obj in json_lines(lines, path):
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
                yield s
            continue
        words = obj.get("words")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words):
            raise CorpusError(path, n, "'words' must be a non-empty list of non-empty strings")
        if any(any(ch.isspace() for ch in w) for w in words):
            raise CorpusError(path, n, "a word contains whitespace; split it into words")
        tags = obj.get("tags") if labelled else None
        entities = entities_of(obj.get("entities"), len(words), path, n) if labelled and "entities" in obj else None
        if tags is not None and entities is not None:
            raise CorpusError(path, n, "give 'tags' or 'entities', not both")
        if tags is not None:
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise CorpusError(path, n, "'tags' must be a list of strings")
            if len(tags) != len(words):
                raise CorpusError(path, n, f"{len(tags)} tags for {len(words)} words")
        doc_id = obj.get("doc_id")
        yield Sentence(words, tags, None if doc_id is None else str(doc_id), n, entities=entities)
    notes.extend(rows.notes())


def entities_of(value, n_words: int, path: str, line: int) -> list[tuple[int, int, str]]:
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
