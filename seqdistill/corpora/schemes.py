"""Tag schemes of corpora: the scheme a labelled corpus is in, and the one label schema of several
corpora."""

from __future__ import annotations

from ..cache_schema import LabelSchema
from ..cache_schema.labels import SchemeGuess, TagError, canonical_scheme, check_sequence
from .sentences import Corpus, CorpusError, Sentence


def derive_label_schema(corpora: list[Corpus], scheme: str | None = None) -> tuple[LabelSchema, list[Corpus]]:
    """The label schema of the labelled corpora, and the corpora converted to its scheme.

    Decision: the target scheme is ``scheme`` when given, else that of the first labelled corpus
    (IOB2 for a nested one); other labelled corpora are converted to it through their entity
    spans. Nested corpora (JSONL ``entities``) keep every span and get the outermost ones as flat
    tags (``Corpus.with_flat_tags``); the schema's types include every entity type.
    """
    labelled = [c for c in corpora if c.labelled or c.nested]
    if not labelled:
        raise CorpusError(
            corpora[0].path if corpora else "?", None, "no labelled corpus: a label schema needs at least one"
        )
    try:
        target = canonical_scheme(scheme) if scheme else (labelled[0].scheme or "IOB2")
    except TagError as e:
        raise CorpusError(labelled[0].path, None, str(e)) from None
    for c in corpora:
        if c.nested:
            c.layers(c.entity_types())  # two entities of one type must not overlap (file and line named)
    # nested corpora also get flat tags (the outermost entities) and add every entity's type
    converted = [c.with_flat_tags(target) if c.nested else c.to_scheme(target) for c in corpora]
    flat = LabelSchema.from_sequences([s.tags for c in converted if c.labelled for s in c.sentences], target)
    types = set(flat.entity_types) | {t for c in converted if c.nested for t in c.entity_types()}
    return LabelSchema(target, tuple(types)), converted


def check_scheme(sentences: list[Sentence], path: str, scheme: str | None) -> str:
    """The scheme of a labelled corpus (``scheme`` when given, else guessed), every sentence checked
    against it."""
    guess = SchemeGuess()
    if not scheme:
        for s in sentences:
            guess.add(s.tags)
    scheme = corpus_scheme(scheme, guess, path)
    for s in sentences:
        check_tags(s, path, scheme)
    return scheme


def corpus_scheme(scheme: str | None, guess: SchemeGuess, path: str) -> str:
    """``scheme`` when given (by any of its names), else what ``guess`` saw."""
    try:
        return canonical_scheme(scheme) if scheme else guess.scheme()
    except TagError as e:
        raise CorpusError(path, None, str(e)) from None


def check_tags(s: Sentence, path: str, scheme: str) -> None:
    """Raise if the sentence's tags break ``scheme`` (the file and line named)."""
    problem = check_sequence(s.tags, scheme)
    if problem is not None:
        pos, reason = problem
        hint = "" if scheme != "IOB2" else " (if the file is IOB1, pass scheme='IOB1')"
        raise s.error(path, f"{reason}{hint}", pos)
