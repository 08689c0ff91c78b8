"""Documents against sentences (issue 37): ``distill-eval --documents SPLITTER`` tags a labelled
corpus's documents (CoNLL ``-DOCSTART-`` blocks; without them the whole corpus is one document) as
raw text, split into sentences by the named splitter (``corpora/documents.py``), and the same
sentences one by one as the corpus gives them, and compares the two.

A document's text is its sentences' words joined by one space, so every gold word has character
offsets in it, laid out in lines as a news document is: a sentence that ends without sentence-final
punctuation (a headline, a dateline, a score line or a table row: CoNLL-2003 has many) is followed
by a line break, the others by a space (``_layout``; the Reuters originals set those on lines of
their own, and body paragraphs too, which the corpus does not keep, so this layout has fewer breaks
than the source). For the ``lines`` splitter every sentence ends its line (the layout that splitter
is for), so that it measures the document path itself (splitting, batching, offsets) with the
corpus's own sentences. The words stay as the corpus tokenised them ("win ."): detokenising them is
not attempted. A predicted span (character offsets into the document) covers the gold words it
overlaps; both paths are scored as span sets over the document's gold words, so a splitter that cuts
elsewhere than the corpus shows as different spans, not as an error.

Three paths are timed, interleaved, REPEATS times each after one untimed pass over the first
document (so a splitter's one-off load and the model's first call count in no rate), and the median
rate is reported: the documents; their sentences as text, one string each (what a user with
sentences, not documents, passes: the words rule runs, the splitter does not); and the corpus's
pre-split words (no words rule either: the ceiling of the model itself).
"""

from __future__ import annotations

import statistics
import time

from ..cache_schema.labels import tags_to_spans
from ..corpora.words import join_words
from ..inference import Tagger
from ..metrics import span_set_scores


def _documents(sentences) -> list[list]:
    docs: dict = {}
    for s in sentences:
        docs.setdefault(s.doc_id, []).append(s)
    return list(docs.values())


FINAL = (".", "!", "?")  # sentence-final punctuation, before any closing quotes or brackets
CLOSING = ('"', "'", "''", ")", "]", "\u201d", "\u2019")


def _ends_sentence(words: list[str]) -> bool:
    """Whether the words end with sentence-final punctuation (closing quotes and brackets skipped)."""
    rest = list(words)
    while rest and rest[-1] in CLOSING:
        rest.pop()
    return bool(rest) and rest[-1].endswith(FINAL)


def _layout(doc, splitter: str) -> tuple[str, list[tuple[int, int]], list[int]]:
    """The document's text (module docstring: one sentence a line for ``lines``; otherwise a line
    break after a sentence without final punctuation, a space after the others), each gold word's
    offsets, and each sentence's first word index."""
    firsts, offsets, pieces, pos = [], [], [], 0
    for s in doc:
        firsts.append(len(offsets))
        text, own = join_words(s.words)
        offsets += [(a + pos, b + pos) for a, b in own]
        separator = " " if splitter != "lines" and _ends_sentence(s.words) else "\n"
        pieces += [text, separator]
        pos += len(text) + len(separator)
    return "".join(pieces[:-1]), offsets, firsts


def _to_words(char_start: int, char_end: int, offsets) -> tuple[int, int] | None:
    covered = [i for i, (a, b) in enumerate(offsets) if a < char_end and char_start < b]
    return (covered[0], covered[-1] + 1) if covered else None


REPEATS = 3


def compare_documents(tagger: Tagger, corpus, splitter: str = "pysbd", batch_size: int = 32) -> dict:
    docs = _documents(corpus.sentences)
    layouts = [_layout(d, splitter) for d in docs]
    scheme = tagger.scheme
    texts = [text for text, _, _ in layouts]
    sentence_texts = [join_words(s.words)[0] for s in corpus.sentences]
    tagger.documents(texts[0], batch_size, False, splitter=splitter)  # warm-up: splitter load, first calls
    seconds: dict[str, list[float]] = {"documents": [], "sentence_texts": [], "sentences": []}
    for _ in range(REPEATS):
        t = time.perf_counter()
        as_docs = tagger.documents(texts, batch_size, False, splitter=splitter)
        seconds["documents"].append(time.perf_counter() - t)
        t = time.perf_counter()
        tagger(sentence_texts, batch_size, False)
        seconds["sentence_texts"].append(time.perf_counter() - t)
        t = time.perf_counter()
        as_sents = tagger([s.words for s in corpus.sentences], batch_size, False)
        seconds["sentences"].append(time.perf_counter() - t)
    gold, by_doc, by_sent = [], [], []
    k = 0
    for doc, (_, offsets, firsts), tagged in zip(docs, layouts, as_docs):
        g, pd, ps = set(), set(), set()
        for s, first in zip(doc, firsts):
            g |= {(first + a, first + b, ty) for a, b, ty in tags_to_spans(s.tags, scheme)}
            ps |= {(first + sp.start, first + sp.end, sp.type) for sp in as_sents[k].spans}
            k += 1
        for sp in tagged.spans:
            words = _to_words(sp.char_start, sp.char_end, offsets)
            if words:
                pd.add((*words, sp.type))
        gold.append(g), by_doc.append(pd), by_sent.append(ps)
    words = sum(len(s.words) for s in corpus.sentences)
    return {
        "model": tagger.name,
        "runtime": tagger.runtime,
        "documents": len(docs),
        "sentences": len(corpus.sentences),
        "sentences_found": sum(len(d.sentences) for d in as_docs),
        "words": words,
        "f1_documents": span_set_scores(gold, by_doc)["f1"],
        "f1_sentences": span_set_scores(gold, by_sent)["f1"],
        "same_spans": sum(a == b for a, b in zip(by_doc, by_sent)) / len(docs),
        "spans_documents": sum(map(len, by_doc)),
        "spans_sentences": sum(map(len, by_sent)),
        **{f"words_per_s_{path}": words / statistics.median(s) for path, s in seconds.items()},
    }


def format_documents(rows: list[dict]) -> str:
    lines = [
        "| model | runtime | docs | sentences (found) | F1 as documents | F1 as sentences | same spans "
        "| words/s docs | words/s sentences as text | words/s pre-split sentences |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['runtime']} | {r['documents']} | {r['sentences']} ({r['sentences_found']}) | "
            f"{100 * r['f1_documents']:.2f} | {100 * r['f1_sentences']:.2f} | {100 * r['same_spans']:.0f}% | "
            f"{r['words_per_s_documents']:,.0f} | {r['words_per_s_sentence_texts']:,.0f} | "
            f"{r['words_per_s_sentences']:,.0f} |"
        )
    return "\n".join(lines)
