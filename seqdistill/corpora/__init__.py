"""Corpus readers: CoNLL column files, JSONL, raw text, Parquet and Hugging Face datasets.

Every reader reads the whole file before anything is written anywhere (``read_corpus`` into
memory; the build, through ``CorpusSource`` and ``streamed.py``, in passes that hold one block of
the file, or 4,096 rows of a Parquet file, at a time), fingerprints it (sha256 of its bytes,
recorded in the cache manifest), and raises :class:`CorpusError` naming the file and
line of the first problem: wrong column count, ill-formed tag, a transition the tag scheme forbids,
bytes that are not UTF-8, an empty file. Row-based corpora (Parquet, ``hf:``) name the row and
column instead of a line: ``data/ner.parquet: row 17, column ner_tags: tag id 12 has no name (9
names)``; rows are counted from 0, as ``dataset[17]`` counts them.

Formats:

* ``conll`` — one token per line, whitespace-separated columns, a blank line between sentences;
  choose the word and tag columns (default: first and last). ``-DOCSTART-`` lines start a new
  document (``doc_id`` ``"1"``, ``"2"``, ...) and are not sentences.
* ``jsonl`` — one object per line: ``{"words": [...], "tags": [...]}``, ``tags`` optional,
  ``doc_id`` optional.
  A line may instead give the columns of a Hugging Face NER dataset, ``{"tokens": [...],
  "ner_tags": [...]}`` (what ``Dataset.to_json`` writes), read as a Parquet row is.
* ``text`` — one sentence per line, split on whitespace; no tags.
* ``parquet`` — a row per sentence with a ``tokens`` column (a list of strings) and, when
  labelled, a ``ner_tags`` column: tag strings, or integer ids named by the ``ClassLabel`` feature
  that ``datasets`` records in the file's metadata (``Dataset.to_parquet``) or by ``tag_names``
  (``--tag-names A,B,...``; id 0 first). Read with pyarrow.
* ``hf`` — ``hf:DIR[@SPLIT]``: a ``datasets`` ``save_to_disk`` directory, read as ``parquet`` rows
  are (tag names from ``features["ner_tags"].feature.names``). ``@SPLIT`` picks a split of a
  ``DatasetDict``; a DatasetDict of one split needs none, one of several splits is refused with
  their names. On a plain ``Dataset`` the ``@SPLIT`` selects nothing (under ``distill-cache
  build``, ``NAME=hf:DIR@SPLIT`` names the cache split, as it does for a file). ``datasets`` is
  imported only here (``pip install 'seqdistill[datasets]'``).

Rows (``parquet``, ``hf``, JSONL ``tokens`` lines) follow the CoNLL file that the dataset was made
from: a row whose only token is ``-DOCSTART-`` starts a new document (``doc_id`` ``"1"``,
``"2"``, ...) and is not a sentence, and a row without tokens is skipped (a CoNLL file cannot
hold an empty sentence); the skipped count is in ``Corpus.notes``. Other columns are ignored.
``tag_names`` only names integer ids: tag strings are read as they are. Given with a ``ClassLabel``
feature, they must agree with it. The fingerprint of a row corpus is the sha256 of its bytes
(for ``hf``: of the split's Arrow files and its features), with ``tag_names`` added when they
named ids, so that another naming is another corpus to the cache.

``auto`` (the default) picks ``hf`` for ``hf:`` paths, ``parquet`` for ``.parquet``/``.pq``,
``jsonl`` for ``.jsonl``/``.json`` and ``conll`` for ``.conll``/``.bio``/``.iob``. Otherwise a
labelled read is ``conll`` (tags need columns), and an unlabelled read sniffs the first 200
non-blank lines: a ``-DOCSTART-`` line, or lines that all have the same number of columns (2 to 10)
with blank lines between sentences, mean ``conll``; else ``text``.
"""

from .read import parse_tag_names, read_corpus
from .schemes import derive_label_schema
from .sentences import DOCSTART, FORMATS, HF_PREFIX, Corpus, CorpusError, Sentence
from .splits import few_shot_split
from .words import RULES as WORDS_RULES
from .words import implied_rule, join_words, split_words

__all__ = [
    "DOCSTART",
    "FORMATS",
    "HF_PREFIX",
    "Corpus",
    "CorpusError",
    "Sentence",
    "derive_label_schema",
    "few_shot_split",
    "implied_rule",
    "join_words",
    "parse_tag_names",
    "read_corpus",
    "split_words",
    "WORDS_RULES",
]
