"""``distill-eval`` and ``distill-predict``: score and use teachers, students and exports alike.

A model directory is a teacher (``teacher.json``, or a Hugging Face token-classification
checkpoint), a student (``config.json`` with a seqdistill ``arch``) or an exported ONNX directory
(``export.json``). Each is loaded as a :class:`seqdistill.inference.Tagger`, so that teacher and
student, torch and ONNX, are compared on one test set, on one machine, in one command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from ..cache_schema.labels import tags_to_spans
from ..checkpoint import CHECKPOINT
from ..corpora import CorpusError, read_corpus
from ..inference import TaggedDocument, Tagger, latency
from ..metrics import span_scores, span_set_scores

# decision: name a student whose trimmed vocabulary (seqdistill.vocabulary) reads 1% of the test words,
# or 0.5% of the gold or predicted spans, through its UNK row. The spans are the share that matters: a
# span with such a word is a span the student is likely to get wrong, so 0.5% of the spans can cost
# about 0.5 F1, five times what issue 53 calls no loss (0.1) and about an MGKD student's seed std;
# issue 53's corpus had 0.5% unseen words, three quarters of them inside gold spans, and lost 0.5 F1
UNSEEN_WARNING = 0.01
UNSEEN_SPAN_WARNING = 0.005
DEFAULT_THREADS = 1  # decision: small models run fastest on one thread (docs/BENCHMARKS.md); 0 = all cores
# decision: predictions kept on disk (--predictions) are decoded and written 256 sentences at a
# time (length-sorted batches of 64 inside each): a Gemma SenTScore teacher on a CPU (about 2 s a
# sentence on one thread) loses minutes, not hours, when killed; tags do not depend on the batch
# (issue 34), so a resumed run gives the tags of a run in one go
PREDICTION_CHUNK = 256


def score_tagger(tagger: Tagger, corpus, pred: list | None = None) -> dict:
    """seqeval CoNLL micro P/R/F1, per type, macro F1 and exact match of a tagger on a labelled
    corpus; every gold span of a nested corpus (a flat model finds only non-overlapping ones).
    ``pred``: the tagger's predictions on the corpus when they are made already
    (:func:`predict_resumable`)."""
    if pred is None:
        words = [s.words for s in corpus.sentences]
        pred = tagger.predict_spans(words) if corpus.nested else tagger.predict(words)
    if corpus.nested:
        return span_set_scores([s.entities for s in corpus.sentences], pred)
    gold = [s.tags for s in corpus.to_scheme(tagger.scheme).sentences]
    return span_scores(gold, pred, tagger.scheme)


def predictions_file(directory: str | Path, model: str) -> Path:
    """Where ``distill-eval --predictions DIRECTORY`` keeps one model's predictions: the model
    path as given, every run of characters other than letters, digits, ``.``, ``_`` and ``-``
    made one ``_`` (``.data/g300/teacher`` -> ``.data_g300_teacher.jsonl``)."""
    return Path(directory) / (re.sub(r"[^A-Za-z0-9._-]+", "_", str(model)).strip("_") + ".jsonl")


def predict_resumable(
    tagger: Tagger,
    words: list[list[str]],
    path: Path,
    *,
    nested: bool,
    model: str = "",
    data: str = "",
    chunk: int = PREDICTION_CHUNK,
) -> list:
    """The tagger's predictions for ``words`` (tags, or ``(start, end, type)`` spans when
    ``nested``), kept in ``path`` as they are made: a header line naming the model, the data (for
    the reader: the same text under another path continues) and a sha256 of its words, then one
    line per sentence, appended ``chunk`` sentences at a time and flushed to disk. Run again, it
    reads the lines there and predicts only the rest, so a slow teacher killed after hours keeps
    what it decoded. A file written for the first N sentences of ``words`` (a run over a test
    set's first 1,200 sentences, say) is taken over too: its header is rewritten for the whole
    text (atomically) and the rest is predicted. A header for another model, scheme or text is
    refused (the file is named, to delete), never mixed in."""
    key = "spans" if nested else "tags"
    header = {
        "model": str(model),
        "data": str(data),
        "sentences": len(words),
        "words_sha256": _words_sha256(words),
        "output": key,
        "scheme": tagger.scheme,
    }
    done = _read_predictions(path, header, key, words)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if done else "w", encoding="utf-8") as f:
        if not done:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for start in range(len(done), len(words), chunk):
            batch = words[start : start + chunk]
            pred = tagger.predict_spans(batch) if nested else tagger.predict(batch)
            f.write("".join(json.dumps({key: p}, ensure_ascii=False) + "\n" for p in pred))
            f.flush()
            os.fsync(f.fileno())
            done += pred
    return [[tuple(s) for s in p] for p in done] if nested else done


def _words_sha256(words: list[list[str]]) -> str:
    return hashlib.sha256(json.dumps(words, ensure_ascii=False).encode()).hexdigest()


def _read_predictions(path: Path, header: dict, key: str, words: list[list[str]]) -> list:
    """The predictions in ``path`` (the file cut back to its last whole line), or [] when it does
    not exist or holds no whole line; an error when it was written for another model, output or
    text than ``words`` or its first sentences. A file for the first sentences gets ``header``,
    written to a temporary file beside it and moved over it, so that a kill leaves the old file or
    the new one, whole."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if len(lines) == 1:  # killed while writing the header
        return []
    try:
        found = json.loads(lines[0])
    except ValueError:
        found = None
    same = {k: v for k, v in header.items() if k not in ("data", "sentences", "words_sha256")}
    n = found.get("sentences") if isinstance(found, dict) else None
    prefix = isinstance(n, int) and 0 <= n <= len(words) and found.get("words_sha256") == _words_sha256(words[:n])
    if not prefix or {k: found.get(k) for k in same} != same:
        raise ValueError(
            f"{path}: line 1 is not the header of these predictions (written for {found!r}; this run is "
            f"{header}): delete the file to score afresh, or give another --predictions directory"
        )
    rows, offset = [], len(lines[0]) + 1
    for number, line in enumerate(lines[1:-1], start=2):  # lines[-1]: empty, or cut short by a kill mid-write
        try:
            rows.append(json.loads(line)[key])
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}, line {number}: not a prediction line; delete the file to score afresh") from None
        offset += len(line) + 1
    if len(rows) > n:
        raise ValueError(f"{path}: {len(rows)} predictions for {n} sentences; delete the file")
    if n == len(words):
        with open(path, "r+b") as f:
            f.truncate(offset)
        return rows
    head = json.dumps(header, ensure_ascii=False).encode() + b"\n"
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as f:
        f.write(head + b"".join(line + b"\n" for line in lines[1 : 1 + len(rows)]))
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    return rows


def evaluate_taggers(
    model_dirs: list[str],
    data: str,
    *,
    fmt: str = "auto",
    with_latency: bool = True,
    device: str = "cpu",
    threads: int | None = DEFAULT_THREADS,
    tag_names: tuple[str, ...] | None = None,
    predictions: str | None = None,
) -> list[dict]:
    """Scores (seqeval CoNLL micro P/R/F1, per type, macro F1, exact match), size and latency of
    torch students, teachers and exported directories alike, each on ``threads`` threads (0 or
    None: the runtime's default, all cores). ``predictions``: a directory each model's predictions
    are kept in (:func:`predictions_file`) and continued from when run again."""
    corpus = read_corpus(data, "eval", "test", format=fmt, tag_names=tag_names)
    if not (corpus.labelled or corpus.nested):
        raise CorpusError(data, None, "evaluation needs gold tags or entities")
    words = [s.words for s in corpus.sentences]
    results = []
    for d in model_dirs:
        tagger = Tagger.load(d, device=device, threads=threads or None)
        kept = predictions_file(predictions, d) if predictions else None
        if kept:
            pred = predict_resumable(tagger, words, kept, nested=corpus.nested, model=d, data=data)
        else:
            pred = tagger.predict_spans(words) if corpus.nested else tagger.predict(words)
        row = {
            "model": str(d),
            "kind": tagger.kind,
            "runtime": tagger.runtime,
            "params": tagger.params,
            "params_without_embeddings": tagger.params_without_embeddings,
            "bytes": directory_bytes(d),
            "embedding_rows": tagger.backend.embedding_rows,
            "teacher_rows": (tagger.backend.vocabulary or {}).get("teacher", tagger.backend.embedding_rows),
            "nested": corpus.nested,
            "threads": threads or "all",
            **score_tagger(tagger, corpus, pred),
        }
        if kept:
            row["predictions"] = str(kept)
        unseen = unseen_report(tagger, corpus, words, pred)
        if unseen is not None:
            row["unseen"] = unseen
            row["unseen_words"] = unseen["words"]  # the field distill-eval's JSON had before issue 53
        if with_latency:
            row["ms_per_sentence_batch1"] = latency(tagger, words, 1, 50)
            row["ms_per_sentence_batch32"] = latency(tagger, words, 32, 10)
        results.append(row)
    return results


def directory_bytes(d) -> int:
    """The bytes of every file under a model directory: what shipping it costs, its embedding rows
    and tokenizer included; not a student's ``checkpoint/`` (the trainer's resume state, optimizer
    included, which no user of the model loads) nor the card (``README.md``, written from these
    figures)."""
    root = Path(d)
    return sum(
        p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in (CHECKPOINT, "README.md")
    )


def unseen_report(tagger: Tagger, corpus, words: list[list[str]], pred: list) -> dict | None:
    """``Tagger.unseen`` on a labelled corpus from predictions already made (``pred``: tags, or
    spans of a nested corpus); None for models that keep every row."""
    if corpus.nested:
        gold, predicted = [s.entities for s in corpus.sentences], pred
    else:
        gold = [tags_to_spans(s.tags, tagger.scheme) for s in corpus.to_scheme(tagger.scheme).sentences]
        predicted = [tags_to_spans(t, tagger.scheme) for t in pred]
    return tagger.unseen(words, gold, predicted_spans=predicted)


def unseen_warning(row: dict) -> str | None:
    """The warning ``format_results`` prints for a student whose UNK row could matter here
    (``UNSEEN_WARNING``, ``UNSEEN_SPAN_WARNING``), None otherwise."""
    u = row.get("unseen")
    if not u:
        return None
    spans = [u.get(k) or 0.0 for k in ("gold_spans", "predicted_spans")]
    if u["words"] < UNSEEN_WARNING and max(spans) < UNSEEN_SPAN_WARNING:
        return None
    return (
        f"{row['model']}: {100 * u['words']:.1f}% of these words, {100 * spans[0]:.1f}% of the gold spans and "
        f"{100 * spans[1]:.1f}% of its predicted spans have a subword outside its trimmed vocabulary and read its "
        "UNK row; a cache built with --full-vocabulary, or with --vocabulary-text naming text like this, keeps a row "
        "for each of them (seqdistill/vocabulary.py; docs/RESULTS.md: 14.1% of the words cost 13 F1)"
    )


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def _rows(row: dict) -> str:
    """A student's embedding rows, and the teacher's where it keeps fewer: "15,256 of 30,522"."""
    n, t = row.get("embedding_rows"), row.get("teacher_rows")
    if n is None:
        return "-"
    return f"{n:,}" if not t or t == n else f"{n:,} of {t:,}"


def _ratio(base: float, other: float, smaller: str, larger: str) -> str:
    """``base / other`` said as a factor of at least 1: "2.0x fewer parameters", not "0.5x"."""
    return f"{base / other:.1f}x {smaller}" if base >= other else f"{other / base:.1f}x {larger}"


def format_results(rows: list[dict]) -> str:
    lines = [
        "| model | kind | runtime | params | w/o emb. | emb. rows | MB | P | R | F1 | macro F1 | exact | ms/sent b1 | ms/sent b32 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lat = [f"{r[k]:.2f}" if k in r else "-" for k in ("ms_per_sentence_batch1", "ms_per_sentence_batch32")]
        lines.append(
            f"| {r['model']} | {r['kind']} | {r.get('runtime', 'torch')} | {r['params']:,} | {r['params_without_embeddings']:,} | "
            f"{_rows(r)} | {_mb(r.get('bytes'))} | {100 * r['precision']:.2f} | "
            f"{100 * r['recall']:.2f} | {100 * r['f1']:.2f} | {100 * r['macro_f1']:.2f} | "
            f"{100 * r['exact_match']:.1f} | {lat[0]} | {lat[1]} |"
        )
    if len(rows) > 1 and "ms_per_sentence_batch32" in rows[0]:
        base = rows[0]
        for r in rows[1:]:
            lines.append(
                f"\n{r['model']} vs {base['model']}: "
                f"{_ratio(base['params'], r['params'], 'fewer parameters', 'more parameters')}, "
                f"{_ratio(base['ms_per_sentence_batch1'], r['ms_per_sentence_batch1'], 'faster', 'slower')}"
                f" at batch 1, "
                f"{_ratio(base['ms_per_sentence_batch32'], r['ms_per_sentence_batch32'], 'faster', 'slower')}"
                f" at batch 32, F1 {100 * (r['f1'] - base['f1']):+.2f}"
            )
    for r in rows:
        warning = unseen_warning(r)
        if warning:
            lines.append(f"\n{warning}")
    for r in rows:
        types = ", ".join(f"{t} {100 * v['f1']:.1f}" for t, v in sorted(r["per_type"].items()))
        lines.append(f"\n{r['model']} per type F1: {types}")
    return "\n".join(lines)


def write_tagged(tagged, f, output_format: str = "conll") -> None:
    """Tagged sentences to an open text file: CoNLL (word and tag, a blank line after each
    sentence) or JSONL (``TaggedSentence.to_json()``: text, words, character offsets, tags, spans).
    Tagged documents: JSONL one document a line (``TaggedDocument.to_json()``), or CoNLL with a
    ``-DOCSTART-`` line before each document's sentences."""
    if tagged and isinstance(tagged[0], TaggedDocument):
        for doc in tagged:
            if output_format == "jsonl":
                f.write(json.dumps(doc.to_json(), ensure_ascii=False) + "\n")
            else:
                f.write("-DOCSTART- O\n\n")
                write_tagged(doc.sentences, f, output_format)
        return
    for s in tagged:
        if output_format == "jsonl":
            f.write(json.dumps(s.to_json(), ensure_ascii=False) + "\n")
        else:
            f.write("".join(f"{a} {b}\n" for a, b in zip(s.words, s.tags)) + "\n")
