"""The vocabulary a student keeps (issues 36 and 53): which rows of the teacher's input embedding
matrix a cache exports, and how a student built from them reads any text.

**Which rows** (``choose_rows``, ``distill-cache build``):

* **Every row, when the matrix is small** (at most ``FULL_MATRIX_ROWS`` = 65,536 rows: the
  WordPiece and BPE vocabularies of monolingual encoders, MiniLM's and BERT's 30,522, MPNet's
  30,527, RoBERTa's 50,265). The default since issue 53, chosen by measurement (docs/RESULTS.md,
  "Vocabulary trimming that never costs accuracy"): a student over the rows of its cache's corpora
  alone reads the words its users tag and the cache never saw (numbers, codes, new names, the very
  words inside entity spans) through one UNK row, and on CoNLL-2003 with a cache over train and dev
  that cost 1-13 F1; every row of MiniLM costs the int8 export 11.7 MB, and the student then reads
  every subword its teacher could. Nothing to choose, nothing to lose.
* **Trimmed, when the matrix is large** (multilingual vocabularies: Gemma 3 and EmbeddingGemma's
  262,144 rows, two thirds of the model; XLM-R's 250,002; Llama 3's 128,256), where keeping every
  row costs what trimming was made to save (EmbeddingGemma's: 768 MB in the cache, 201M parameters
  in the student). The kept set is the union of

  - the subwords the cache's corpora use (``kept_subwords``: every subword id the teacher's
    tokenizer gives any word of any sentence the build reads, with the same encoding students
    use, ``tokenization.word_pieces``, plus the tokenizer's special tokens), and those of
    ``--vocabulary-text`` files;
  - about ``FREQUENT_SUBWORDS`` (28,672) frequent subwords **written in the scripts the corpora
    use** (``frequent_subwords``): the words users tag and the cache did not see are mostly words
    of the same language (names, dates, numbers), and a Japanese cache has no use for Devanagari
    rows. The count is shared among the scripts by their share of the corpora's letters, a script
    with fewer subwords than its share keeping all of them and passing the rest on (so a Japanese
    corpus keeps every kana subword, and kanji and Latin share the rest). Within a script, single
    characters come first (a script's alphabet, which a rare word is cut into), then the
    tokenizer's own frequency rank: a Unigram model's piece scores, otherwise the id order, which
    *is* the frequency order of a SentencePiece BPE vocabulary (Gemma's merged pieces: ids by piece
    score), the merge order of a byte-level BPE, and WordPiece's vocabulary order. A subword's
    script is that of its letters (``char_script``); digits, punctuation and symbols belong to
    every script. The trimmed rows are stored in the cache's ``--dtype`` (fp16 by default, as its
    other large fields).
    28,672 was chosen by measurement (docs/RESULTS.md, issue 53, ``benchmarks/vocabulary_coverage.py``):
    on the Japanese corpus with EmbeddingGemma's vocabulary the share of test words read through
    the UNK row falls from 8.75% (the corpus's subwords alone) to 4.00% at 8,192, 2.80% at 16,384,
    0.62% at 24,576 and 0.37% at 28,672, where it stops (32,768 keeps 4,086 rows more for the same
    0.37%); 28,797 rows are 42 MB in fp16, and the cache stays within 1/10 of the untrimmed one.

  ``--full-vocabulary`` keeps every row of any matrix; ``--trim-vocabulary`` trims a small one too
  (``--frequent-subwords 0``: the corpora's subwords alone, the default before issue 53).

The exports (``embeddings.safetensors``) hold ``weight`` ``[n, D]`` and, when trimmed, ``ids``
``[n]`` with metadata ``rows`` (the teacher's matrix size) and ``vocabulary`` (JSON: the policy, the
corpora's subword count, the frequent ones added, the scripts). Each teacher layer has its own set
(its own tokenizer), so adding a teacher to a cache adds its set with its layer; the corpora of a
cache are fixed when it is built. ``distill-cache verify`` tokenizes the cache's words again and
checks that every subword is kept.

**How a student reads any text**: a student that starts from a trimmed matrix keeps those rows and
one more, the **UNK row** (the rule for unseen subwords, ``UNSEEN_RULE``): any subword id outside the
kept set, at inference on new text, maps to row ``n``, initialised as the mean of the kept rows (and
trained with the others when the embeddings train). A word made only of unseen subwords still has
its char feature where the student has one (MGKD ``--chars``). Chosen over a hashed bucket (which
would give unrelated subwords one shared trained row each, by accident of the hash) and over the
char feature alone (not every student has one). The student keeps the teacher's tokenizer whole,
and its model holds the map from teacher ids to rows (``RowIndex``, a buffer of the teacher's matrix
size), so the torch model and its ONNX export read the same ids and give the same tags. A student
over every row has no map: ids are rows. ``distill-eval`` and ``Tagger.unseen`` say how many words,
and how many entity spans, a trimmed student reads through the UNK row.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from .tokenization import word_pieces

EMBEDDINGS_EXPORT = "embeddings.safetensors"  # in a teacher layer's exports
UNSEEN_RULE = "unk-row"  # unseen subwords share one row, the mean of the kept rows (module docstring)
FULL_MATRIX_ROWS = 65_536  # decision: every row of a matrix this small is kept by default (module docstring)
FREQUENT_SUBWORDS = 28_672  # decision: a trimmed vocabulary keeps this many frequent subwords of the corpora's scripts
_MARKERS = ("\u2581", "\u0120", "##")  # SentencePiece's and byte-level BPE's word starts, WordPiece's continuation


@dataclass(frozen=True)
class KeptRows:
    """What ``choose_rows`` keeps: ``ids`` (sorted teacher subword ids) or None for every row."""

    ids: np.ndarray | None
    reason: str  # why, in words, for the build's log
    corpus: int = 0  # subwords of the corpora (and --vocabulary-text files)
    frequent: int = 0  # frequent subwords of their scripts added to those
    scripts: tuple[str, ...] = ()

    @property
    def policy(self) -> str:
        return "full" if self.ids is None else "trimmed"

    def metadata(self) -> dict:
        """The exports' ``vocabulary`` metadata: how the rows were chosen."""
        return {"policy": self.policy, "corpus": self.corpus, "frequent": self.frequent, "scripts": list(self.scripts)}


def char_script(c: str) -> str | None:
    """The script of a letter (a character of Unicode category L or M), None for every other
    character (digits, punctuation, symbols, spaces: they belong to every script). Python's
    ``unicodedata`` has no Script property; the first word of the character's Unicode name names
    it for the letters of every script a tagger meets ("LATIN SMALL LETTER A", "CJK UNIFIED
    IDEOGRAPH-6771", "HIRAGANA LETTER A", "HANGUL SYLLABLE HAN"), with the width forms and the
    ideographic marks folded in ("FULLWIDTH LATIN ..." is LATIN, "IDEOGRAPHIC ITERATION MARK" is
    CJK, "KATAKANA-HIRAGANA PROLONGED SOUND MARK" is KATAKANA). Marks (accents) take the script of
    the word they sit in, so a combining mark is None as well."""
    category = unicodedata.category(c)
    if not category.startswith("L"):
        return None
    words = unicodedata.name(c, "").replace("-", " ").split()
    if words[:1] in (["FULLWIDTH"], ["HALFWIDTH"]):
        words = words[1:]
    if not words:
        return None
    return "CJK" if words[0] == "IDEOGRAPHIC" else words[0]


def letter_counts(texts) -> Counter:
    """How many letters of each script ``texts`` (an iterable of strings) hold."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(char_script(c) for c in text)
    counts.pop(None, None)
    return counts


def script_budgets(letters: Counter, available: dict[str, int], n: int) -> dict[str, int]:
    """``n`` rows shared among scripts in proportion to their ``letters``; a script with fewer
    subwords ``available`` than its share keeps them all and passes the rest on to the others
    (water-filling), so a Japanese corpus keeps every kana subword and gives the rest to kanji."""
    budgets: dict[str, int] = {}
    left = {s: c for s, c in letters.items() if c > 0}
    while left and n > 0:
        total = sum(left.values())
        full = [s for s in left if available.get(s, 0) <= n * left[s] / total]
        if not full:
            budgets.update({s: int(n * c / total) for s, c in left.items()})
            break
        for s in full:
            budgets[s] = available.get(s, 0)
            n -= budgets[s]
            del left[s]
    return budgets


def frequent_subwords(tokenizer, rows: int, n: int, letters: Counter) -> np.ndarray:
    """Ids of about ``n`` frequent subwords of ``tokenizer`` in the scripts of ``letters`` (the
    corpora's letter counts per script), below the matrix's ``rows`` (module docstring). A subword
    belongs to the script of its first letter and is a candidate when all its letters are in the
    corpora's scripts; added tokens (Gemma's ``<unusedN>``, markup tokens) are left out. Each script
    gets its share of ``n`` (``script_budgets``), taken in the tokenizer's frequency order, single
    characters first: they are a script's alphabet (SentencePiece puts them after every merged piece
    in id order, Gemma at ids 236,000 and up), and a rare word of the script is cut into them."""
    if n <= 0 or not letters:
        return np.zeros(0, dtype=np.int64)
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    by_rank = _rank_order(tokenizer, rows)
    candidates: dict[str, list[tuple[int, int]]] = {s: [] for s in letters}
    for rank, (i, token) in enumerate(zip(by_rank, tokenizer.convert_ids_to_tokens([int(i) for i in by_rank]))):
        if int(i) in added or token is None:
            continue
        for marker in _MARKERS:
            token = token.replace(marker, "")
        scripts = [char_script(c) for c in token]
        scripts = [x for x in scripts if x]
        if scripts and all(x in letters for x in scripts):
            candidates[scripts[0]].append((0 if len(token) == 1 else 1 + rank, int(i)))
    budgets = script_budgets(letters, {s: len(c) for s, c in candidates.items()}, n)
    out = [i for s, c in candidates.items() for _, i in sorted(c)[: budgets.get(s, 0)]]
    return np.array(sorted(out), dtype=np.int64)


def _rank_order(tokenizer, rows: int) -> np.ndarray:
    """The teacher's ids below ``rows``, most frequent first: a Unigram model's piece scores, else
    the id order (module docstring)."""
    import json

    ids = np.arange(min(rows, len(tokenizer)), dtype=np.int64)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return ids
    model = json.loads(backend.to_str()).get("model", {})
    if model.get("type") != "Unigram":
        return ids
    scores = np.array([score for _, score in model["vocab"][: len(ids)]], dtype=np.float64)
    return ids[np.argsort(-scores, kind="stable")]


def choose_rows(
    tokenizer,
    sentences,
    rows: int,
    mode: str = "auto",
    frequent: int = FREQUENT_SUBWORDS,
) -> KeptRows:
    """The rows a cache exports (module docstring). ``sentences``: an iterable of word lists (the
    corpora's and the --vocabulary-text files'); ``rows``: the teacher's matrix size; ``mode``:
    ``auto`` (every row of a matrix of at most ``FULL_MATRIX_ROWS``, else trimmed), ``full`` or
    ``trimmed``; ``frequent``: how many frequent subwords of the corpora's scripts a trimmed set adds."""
    if mode not in ("auto", "full", "trimmed"):
        raise ValueError(f"vocabulary mode {mode!r}: auto, full or trimmed")
    if mode == "full":
        return KeptRows(None, f"every one of the teacher's {rows:,} rows (--full-vocabulary)")
    if mode == "auto" and rows <= FULL_MATRIX_ROWS:
        return KeptRows(None, f"every one of the teacher's {rows:,} rows (at most {FULL_MATRIX_ROWS:,})")
    sentences = [list(words) for words in sentences]
    corpus = kept_subwords(tokenizer, sentences, rows)
    letters = letter_counts(w for words in sentences for w in words)
    scripts = tuple(sorted(letters))
    extra = np.setdiff1d(frequent_subwords(tokenizer, rows, frequent, letters), corpus)
    ids = np.union1d(corpus, extra).astype(np.int64)
    reason = (
        f"{len(ids):,} of the teacher's {rows:,} rows: the {len(corpus):,} subwords the corpora use and "
        f"{len(extra):,} more of the {frequent:,} most frequent of their scripts ({', '.join(scripts) or 'none'})"
    )
    return KeptRows(ids, reason, len(corpus), len(extra), scripts)


def kept_subwords(tokenizer, sentences, rows: int, batch_size: int = 1024) -> np.ndarray:
    """Sorted ids of every subword the tokenizer gives the words of ``sentences`` (an iterable of
    word lists), as students encode them (``word_pieces``), and of its special tokens, below the
    embedding matrix's ``rows`` (a tokenizer may know tokens the matrix has no row for, which the
    teacher cannot read either: EmbeddingGemma's ``<image_soft_token>`` is id 262,144 of a
    262,144-row matrix)."""
    seen = {int(i) for i in tokenizer.all_special_ids}
    if tokenizer.unk_token_id is not None:
        seen.add(int(tokenizer.unk_token_id))
    batch: list[list[str]] = []

    def flush():
        for sentence in word_pieces(tokenizer, batch):
            for pieces in sentence:
                seen.update(pieces)
        batch.clear()

    for words in sentences:
        if words:
            batch.append(list(words))
        if len(batch) >= batch_size:
            flush()
    flush()
    return np.array(sorted(i for i in seen if i < rows), dtype=np.int64)


def unseen_words(tokenizer, sentences: list[list[str]], row_of_id: np.ndarray, kept: int) -> list[list[bool]]:
    """For every word of ``sentences``: whether it has a subword outside a trimmed vocabulary's
    ``kept`` rows, which a student reads through the UNK row (``row_of_id``: teacher id -> row, row
    ``kept`` for the UNK row)."""
    return [[bool((row_of_id[np.asarray(w)] == kept).any()) for w in s] for s in word_pieces(tokenizer, sentences)]


def unseen_share(flags: list[list[bool]]) -> float:
    """The share of words flagged unseen (``unseen_words``). A student's accuracy falls with it: the
    words only tell it that they are new (issue 37: 14.1% of CoNLL-2003's test words for a cache over
    its train and dev sets, 13 F1 lost)."""
    n = sum(len(s) for s in flags)
    return sum(map(sum, flags)) / n if n else 0.0


def unseen_span_share(flags: list[list[bool]], spans: list[list[tuple[int, int, str]]]) -> float | None:
    """The share of ``spans`` (``(start, end exclusive, type)`` per sentence) with a word flagged
    unseen: the entities a trimmed student reads partly through its UNK row, the words it exists to
    find (issue 53: numbers and codes, new names). None when there are no spans."""
    n = sum(len(s) for s in spans)
    if not n:
        return None
    return sum(any(f[a:b]) for f, sp in zip(flags, spans) for a, b, _ in sp) / n


def read_kept(path) -> tuple[Tensor | None, int]:
    """The kept subword ids of an embeddings export and the teacher matrix's row count; ``(None,
    0)`` when the export holds every row."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        if "ids" not in f.keys():
            return None, 0
        return f.get_tensor("ids"), int((f.metadata() or {})["rows"])


def save_tokenizer(tokenizer, directory) -> None:
    """``save_pretrained``, with a fast tokenizer's ``tokenizer.json`` written without indentation:
    the same tokenizer in fewer bytes (EmbeddingGemma's: 13.7 MB instead of 31.8 MB), which matters
    once a student's own weights are a few MB. Used for the cache's exports, student directories and
    ONNX exports; teacher directories keep the file as transformers writes it."""
    from pathlib import Path

    tokenizer.save_pretrained(directory)
    path = Path(directory) / "tokenizer.json"
    if getattr(tokenizer, "is_fast", False) and path.is_file():
        tokenizer.backend_tokenizer.save(str(path), pretty=False)


def with_unk_row(weight: Tensor) -> Tensor:
    """``[n + 1, D]``: the kept rows, then the UNK row (their mean)."""
    w = weight.float()
    return torch.cat([w, w.mean(0, keepdim=True)])


class RowIndex(nn.Module):
    """Teacher subword id -> row of a trimmed embedding matrix: kept id ``ids[i]`` -> row ``i``, any
    other id -> row ``n`` (the UNK row). ``rows == 0``: no trimming, ids are rows (the module holds
    nothing, so untrimmed students keep their state dicts)."""

    def __init__(self, rows: int = 0):
        super().__init__()
        self.trimmed = rows > 0
        if self.trimmed:
            self.register_buffer("row_of_id", torch.zeros(rows, dtype=torch.long))

    def fill(self, ids: Tensor) -> None:
        """Map the kept ``ids`` (sorted, unique) to rows ``0..n-1`` and every other id to ``n``."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and int(ids.max()) >= self.row_of_id.numel():
            raise ValueError(f"kept subword id {int(ids.max())} is outside the teacher's {self.row_of_id.numel()} rows")
        with torch.no_grad():
            self.row_of_id.fill_(ids.numel())
            self.row_of_id[ids.to(self.row_of_id.device)] = torch.arange(ids.numel(), device=self.row_of_id.device)

    def forward(self, ids: Tensor) -> Tensor:
        return self.row_of_id[ids] if self.trimmed else ids
