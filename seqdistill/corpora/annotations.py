"""Corpora from annotation tools (issue 37): Label Studio's JSON export (``ls:FILE``) and span JSONL
in the Prodigy/spaCy style (``spans:FILE``), read into words and IOB2 tags. The writers of the same
formats (the rows ``distill-cache select`` picks, with a teacher's spans as pre-annotations) are in
``pipeline/annotation_export.py``.

Decisions, named here:

* **Words.** A task's words are ``data["words"]`` when it carries them (the tasks seqdistill writes
  do, with ``data["text"]`` the words joined by one space), or a span JSONL line's ``tokens``;
  otherwise ``data["text"]`` / ``text`` is split by the default words rule (``words.py``).
* **Spans to words.** An annotated character span covers every word it overlaps (an annotator who
  selects "Pari" of "Paris" labels the word). Spans that overlap after this are nested: the
  sentence keeps them as ``entities`` (the nested data model), otherwise they become IOB2 tags.
* **Which annotation.** Label Studio: the last annotation of a task that was not cancelled
  (``was_cancelled``); tasks with none are skipped and counted in the corpus notes. Predictions
  (pre-annotations) are never read as gold. Span JSONL: lines whose ``answer`` is ``reject`` or
  ``ignore`` are skipped; no ``answer`` means accepted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from ..cache_schema.labels import spans_to_tags
from .jsonl import json_lines
from .sentences import CorpusError, Sentence
from .words import join_words, split_words

LS_PREFIX, SPANS_PREFIX = "ls:", "spans:"


def parse_label_studio(raw: bytes, path: str, labelled: bool, notes: list[str]) -> list[Sentence]:
    try:
        tasks = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorpusError(path, None, f"not a Label Studio JSON export ({e})") from None
    if not isinstance(tasks, list):
        raise CorpusError(path, None, "a Label Studio JSON export is a list of tasks")
    sentences, skipped = [], 0
    for n, task in enumerate(tasks):
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise CorpusError(path, None, f"task {n}: no data.text", row=n)
        words, offsets = _words(data.get("words"), data["text"], path, n)
        if not labelled:
            sentences.append(Sentence(words, None, None, n + 1, row=n))
            continue
        done = [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]
        if not done:
            skipped += 1
            continue
        spans = []
        for r in done[-1].get("result") or []:
            value = r.get("value") or {}
            if r.get("type") != "labels" or "start" not in value:
                continue
            for label in value.get("labels") or []:
                spans.append((int(value["start"]), int(value["end"]), str(label)))
        sentences.append(_sentence(words, offsets, spans, path, n))
    if skipped:
        notes.append(f"{skipped} task(s) without a submitted annotation skipped")
    return sentences


def parse_span_jsonl(lines: Iterable[str], path: str, labelled: bool, notes: list[str]) -> Iterator[Sentence]:
    skipped = 0
    for n, obj in json_lines(lines, path):
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise CorpusError(path, n, 'expected an object with "text" (and "tokens", "spans")')
        if obj.get("answer") in ("reject", "ignore"):
            skipped += 1
            continue
        tokens = obj.get("tokens")
        if tokens:
            words = [t["text"] for t in tokens]
            offsets = [(int(t["start"]), int(t["end"])) for t in tokens]
        else:
            words, offsets = split_words(obj["text"])
        if not words:
            raise CorpusError(path, n, "the text holds no words")
        if not labelled:
            yield Sentence(words, None, None, n)
            continue
        spans = [(int(s["start"]), int(s["end"]), str(s["label"])) for s in obj.get("spans") or []]
        yield _sentence(words, offsets, spans, path, n, line=True)
    if skipped:
        notes.append(f"{skipped} rejected or ignored line(s) skipped")


def _words(given, text: str, path: str, n: int) -> tuple[list[str], list[tuple[int, int]]]:
    if given is None:
        words, offsets = split_words(text)
    else:
        if not isinstance(given, list) or not all(isinstance(w, str) and w for w in given):
            raise CorpusError(path, None, "data.words must be a list of non-empty strings", row=n)
        if " ".join(given) != text:
            raise CorpusError(path, None, "data.words joined by one space must be data.text", row=n)
        words, (_, offsets) = list(given), join_words(given)
    if not words:
        raise CorpusError(path, None, "the task's text holds no words", row=n)
    return words, offsets


def _sentence(words, offsets, spans, path: str, n: int, line: bool = False) -> Sentence:
    """Character spans to word spans (every word a span overlaps), then IOB2 tags, or nested entities."""
    entities = []
    for start, end, label in spans:
        covered = [i for i, (a, b) in enumerate(offsets) if a < end and start < b]
        if not covered:
            where = (path, n) if line else (path, None)
            raise CorpusError(*where, f"span {start}-{end} ({label}) covers no word", **({} if line else {"row": n}))
        entities.append((covered[0], covered[-1] + 1, label))
    entities = sorted(set(entities))
    nested = any(a[1] > b[0] for a, b in zip(entities, entities[1:]))
    where = {"line": n} if line else {"row": n}
    if nested:
        return Sentence(words, None, None, where.get("line", n + 1), entities=entities, row=where.get("row"))
    tags = spans_to_tags(entities, len(words), "IOB2")
    return Sentence(words, tags, None, where.get("line", n + 1), row=where.get("row"))
