"""Stage one orchestration: corpus readers, tag schemes, batching, the `distill-cache` commands."""

from .corpora import Corpus, CorpusError, Sentence, derive_label_schema, read_corpus

__all__ = ["Corpus", "CorpusError", "Sentence", "derive_label_schema", "read_corpus"]
