"""Documents into sentences (issue 37): the sentence splitter every front end uses before the words
rule (``words.py``), so that a model reads a document as the sentences it was trained on.

Decision, named here: ``pysbd`` (Python Sentence Boundary Disambiguation: the "Golden Rules" of
sentence boundaries, abbreviations such as "Dr." and "U.S." and numbers such as "3.5" kept inside
their sentence, 22 languages including Japanese and Chinese), with character spans into the
document; rule-based and offline, small, and independent of spaCy, which only the spaCy component
needs (it splits by spaCy's own sentences, ``split="sents"``). ``spacy``, where spaCy is
installed, is spaCy's rule-based ``sentencizer`` over a blank pipeline of the language (``xx``, the
multi-language one, where spaCy has no blank pipeline for it): a boundary after every sentence-
final punctuation token (``. ! ? 。`` ...), no abbreviation rules, about 7 times faster than pysbd
(0.06 s against 0.43 s on 3,491 words of CoNLL-2003 dev), and it cuts pre-tokenized text such as
CoNLL's ("Germany 's view . Next ...") where pysbd cuts seldom (91 sentences there against 7).
It sees a boundary only where spaCy's tokenizer splits off the punctuation, which the ``xx``
tokenizer does not do inside unspaced Japanese text: for Japanese and Chinese, pysbd.
``lines`` takes each non-blank line as a sentence (text already one sentence a line); ``none``
takes the whole document as one.

A line break always ends a sentence, for ``pysbd`` and ``spacy`` alike: pysbd's rules say so, and
spaCy's sentencizer, which would read through a line break, is run line by line. A headline, a
dateline, a list item or a table row ends without punctuation and stands on its own line; read
through the break, it joins the next sentence into a "sentence" no model was trained on (on
CoNLL-2003's test documents laid out that way, spaCy's F1 as documents rose from 76.6 to 82.3:
docs/RESULTS.md). Text hard-wrapped inside its sentences (an e-mail wrapped at 72 columns) is
therefore cut at each wrap: unwrap it first, or pass ``none`` and pre-split sentences.

A sentence longer than a model's window is the model's to window: teachers and transformer
students cut overlapping windows of their maximum length (``tokenization.py``, the owner rule: each word
from the window where it has the most context); BiLSTM students read any length.
"""

from __future__ import annotations

from functools import lru_cache

SPLITTERS = ("pysbd", "spacy", "lines", "none")


def split_sentences(text: str, splitter: str = "pysbd", language: str = "en") -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of ``text``, without their surrounding
    whitespace, in order; empty sentences are dropped."""
    if splitter == "none":
        spans = [(0, len(text))]
    elif splitter == "lines":
        spans = _lines(text)
    elif splitter == "pysbd":
        spans = [(s.start, s.end) for s in _segmenter(language).segment(text)]
    elif splitter == "spacy":
        nlp = _sentencizer(language)
        lines = _lines(text)
        nlp.max_length = max(nlp.max_length, max((b - a for a, b in lines), default=0) + 1)  # no 1M-character cap
        spans = [
            (start + s.start_char, start + s.end_char)
            for (start, _), doc in zip(lines, nlp.pipe(text[a:b] for a, b in lines))
            for s in doc.sents
        ]
    else:
        raise ValueError(f"sentence splitter {splitter!r} is not one of {', '.join(SPLITTERS)}")
    out = []
    for start, end in spans:
        chunk = text[start:end]
        lead = len(chunk) - len(chunk.lstrip())
        trail = len(chunk.rstrip())
        if trail > lead:
            out.append((start + lead, start + trail))
    return out


def _lines(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for line in text.splitlines(keepends=True):
        spans.append((pos, pos + len(line)))
        pos += len(line)
    return spans


def document_sentences(texts: list[str], splitter: str = "pysbd", language: str = "en") -> list[tuple[int, int, int]]:
    """``(document, start, end)`` of every sentence of every document, in order: what ``Tagger.documents``
    and ``distill-serve``'s ``documents`` tag, one batch over all of them."""
    return [(d, start, end) for d, text in enumerate(texts) for start, end in split_sentences(text, splitter, language)]


def read_documents(path) -> list[str]:
    """The documents of a raw text file: blocks separated by one blank line or more (a document's
    own single newlines stay in it); ``-`` reads standard input."""
    import re

    from .read import decode_lines, read_bytes

    text = "\n".join(decode_lines(read_bytes(str(path)), str(path)))
    docs = [d.strip("\n") for d in re.split(r"\n\s*\n", text)]
    return [d for d in docs if d.strip()]


@lru_cache(maxsize=8)
def _segmenter(language: str):
    try:
        import pysbd
    except ImportError:
        raise ImportError("splitting documents into sentences needs pysbd: pip install pysbd") from None
    try:
        return pysbd.Segmenter(language=language, clean=False, char_span=True)
    except ValueError as e:
        raise ValueError(f"pysbd has no sentence rules for language {language!r} ({e})") from None


@lru_cache(maxsize=8)
def _sentencizer(language: str):
    try:
        import spacy
    except ImportError:
        raise ImportError("the spacy splitter needs spaCy: pip install 'seqdistill[spacy]'") from None
    try:
        nlp = spacy.blank(language)
    except (ImportError, KeyError, ValueError):  # no blank pipeline, or one that needs another package
        nlp = spacy.blank("xx")
    nlp.add_pipe("sentencizer")
    return nlp
