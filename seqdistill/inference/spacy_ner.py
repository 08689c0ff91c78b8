"""A spaCy pipeline component that runs a seqdistill model (a torch student, a teacher, or an
exported ONNX directory: anything ``Tagger.load`` takes) and sets ``doc.ents``.

    import spacy
    nlp = spacy.blank("en")
    nlp.add_pipe("seqdistill_ner", config={"model": "student-onnx/"})
    doc = nlp("Peter Blackburn visits Paris.")
    [(e.label_, e.start_char, e.end_char) for e in doc.ents]  # the spans distill-predict gives
    for doc in nlp.pipe(texts, batch_size=256): ...  # 256 docs to the model in one Tagger call

The factory ``seqdistill_ner`` is registered by importing this module, and for an installed
seqdistill through the ``spacy_factories`` entry point (``seqdistill[spacy]``); nothing else in
seqdistill imports spaCy.

Decisions, named here:

* **Words: the student's own, offsets mapped onto spaCy's tokens.** The component gives the model
  the doc's text, split by the model's words rule (``seqdistill.corpora.words``) (the rule the
  student was trained and evaluated with, and that ``distill-predict`` uses), and maps each span's
  character offsets onto spaCy's tokens with ``doc.char_span(start, end, label,
  alignment_mode=...)``. Not spaCy's tokens as the model's words: the model would then read words
  it never saw in training ("do" + "n't", one word "U.S.-based") and tag differently from
  ``distill-predict``. So the model's tags are always ``distill-predict``'s; where both rules put a
  boundary at the span's ends (most text), the entity's label and character offsets are exactly
  ``distill-predict``'s.
* **Where the two split a word differently.** A student span whose ends fall on spaCy token
  boundaries is kept as it is, even when the two split the inside differently (the student's one
  word "don't" or "Smith's" is spaCy's "do" "n't" / "Smith" "'s": same characters). A span that
  ends inside a spaCy token (spaCy keeps "U.S.-based" whole; the student's words are "U.S", ".",
  "-", "based", so a LOC on "U.S" ends inside it) follows ``alignment_mode``: ``"expand"`` (the
  default) grows it to the whole tokens it touches (LOC "U.S.-based": the entity is kept, its
  offsets are spaCy's, wider than ``distill-predict``'s); ``"contract"`` shrinks it to the tokens
  wholly inside it, and drops it when there are none ("U.S" is dropped); ``"strict"`` drops every
  span that does not fit spaCy's tokens exactly. Two spans that, so grown, overlap are resolved by
  the ``doc.ents`` rule below.
* **Sentences: a line of the doc's text is a sentence** (``split="lines"``, the rule of
  ``distill-predict --format text``: a doc that is a file's text gets that file's spans); or the
  whole doc as one sequence (``"doc"``), or spaCy's sentences (``"sents"``, needs a sentencizer or
  parser earlier in the pipeline). A span never crosses a sentence.
* **Nested spans and ``doc.ents``.** Every span the model predicts, with its score, goes to the
  span group ``doc.spans[spans_key]`` (``attrs["scores"]``: one score per span, the Tagger's mean
  probability over the span's words; spans that map to the same tokens and label are kept once,
  with the higher score). For a per-type BILOU model (the rnn recipe, bilou-per-type teachers)
  these nest across types. ``doc.ents`` cannot overlap, so it gets the non-overlapping outermost
  ones, by the rule of the Tagger's own flat tags (``seqdistill.bilou.flatten_spans``): spans by
  start, the longer first (ties by label), and a span overlapping one already kept is dropped.
  ``doc.ents`` is replaced, not merged with entities set earlier in the pipeline.
* **Batching.** ``nlp.pipe(texts, batch_size=N)`` hands ``N`` docs (all their sentences) to the
  Tagger in one call; the Tagger sorts them by length and runs the model on ``batch_size``
  sentences (the component's setting, default 32) at a time. ``nlp(text)`` is one call for one doc.
* **The model directory is referred to by its path** (``nlp.to_disk`` stores the config, and a
  pipeline loaded from it loads the model from that path again; the directory is not copied).
"""

from typing import Iterable, Iterator, Optional

from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.scorer import get_ner_prf
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import minibatch

from ..bilou import flatten_spans
from .tagger import Tagger

FACTORY = "seqdistill_ner"
ALIGNMENT_MODES = ("expand", "contract", "strict")
SPLITS = ("lines", "doc", "sents")


def _check_options(batch_size: int, alignment_mode: str, split: str) -> None:
    if alignment_mode not in ALIGNMENT_MODES:
        raise ValueError(f"alignment_mode {alignment_mode!r} is not one of {', '.join(ALIGNMENT_MODES)}")
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")


class SeqdistillNER(Pipe):
    """The component: ``tagger`` (a :class:`~seqdistill.inference.Tagger`, or anything called as
    ``tagger(texts, batch_size=..., scores=...)`` returning its ``TaggedSentence`` list)."""

    def __init__(
        self,
        nlp: Language,
        name: str,
        tagger,
        *,
        batch_size: int = 32,
        spans_key: str = "seqdistill",
        alignment_mode: str = "expand",
        split: str = "lines",
        scores: bool = True,
    ):
        _check_options(batch_size, alignment_mode, split)
        self.name, self.tagger = name, tagger
        self.batch_size, self.spans_key = batch_size, spans_key
        self.alignment_mode, self.split, self.scores = alignment_mode, split, scores

    def __call__(self, doc: Doc) -> Doc:
        error_handler = self.get_error_handler()
        try:
            return self._annotate([doc])[0]
        except Exception as e:
            error_handler(self.name, self, [doc], e)
            return doc

    def pipe(self, docs: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """``batch_size`` docs (what ``nlp.pipe(..., batch_size=N)`` passes) per Tagger call."""
        error_handler = self.get_error_handler()
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            try:
                yield from self._annotate(batch)
            except Exception as e:
                error_handler(self.name, self, batch, e)

    def score(self, examples, **kwargs) -> dict:
        """Entity precision, recall and F1 (``nlp.evaluate``), as spaCy's own ``ner`` scores them."""
        return get_ner_prf(examples)

    # -- the work ----------------------------------------------------------------------------------
    def _segments(self, doc: Doc) -> list[tuple[int, int]]:
        """The ``(start, end)`` character ranges of the doc's sentences, those with a word only."""
        text = doc.text
        if self.split == "doc":
            ranges = [(0, len(text))]
        elif self.split == "sents":
            if not doc.has_annotation("SENT_START"):
                raise ValueError(
                    f"{self.name}: split='sents' needs sentence boundaries; add a 'sentencizer' (or a "
                    f"parser) before {self.name!r}, or use split='lines'"
                )
            ranges = [(s.start_char, s.end_char) for s in doc.sents]
        else:
            ranges, pos = [], 0
            for line in text.split("\n"):
                ranges.append((pos, pos + len(line)))
                pos += len(line) + 1
        return [(a, b) for a, b in ranges if not text[a:b].isspace() and a < b]

    def _annotate(self, docs: list[Doc]) -> list[Doc]:
        segments = [self._segments(doc) for doc in docs]
        texts = [doc.text[a:b] for doc, segs in zip(docs, segments) for a, b in segs]
        tagged = iter(self.tagger(texts, batch_size=self.batch_size, scores=self.scores) if texts else [])
        for doc, segs in zip(docs, segments):
            found: dict[tuple[int, int, str], float | None] = {}
            for a, _ in segs:
                for e in next(tagged).spans:
                    span = doc.char_span(a + e.char_start, a + e.char_end, alignment_mode=self.alignment_mode)
                    if span is None or len(span) == 0:
                        continue  # does not fit spaCy's tokens (alignment_mode "contract" or "strict")
                    key = (span.start, span.end, e.type)
                    if key not in found or (e.score is not None and (found[key] is None or e.score > found[key])):
                        found[key] = e.score
            doc.spans[self.spans_key] = SpanGroup(
                doc,
                name=self.spans_key,
                spans=[Span(doc, s, t, label=label) for s, t, label in found],
                attrs={"scores": list(found.values())},
            )
            doc.ents = [Span(doc, s, t, label=label) for s, t, label in flatten_spans(list(found))]
        return docs


@Language.factory(
    FACTORY,
    default_config={
        "batch_size": 32,
        "spans_key": "seqdistill",
        "alignment_mode": "expand",
        "split": "lines",
        "scores": True,
        "threads": None,
        "device": "cpu",
        "words": None,
        "min_score": None,
    },
    assigns=["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans"],
    default_score_weights={"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None},
)
def make_component(
    nlp: Language,
    name: str,
    model: str,
    batch_size: int,
    spans_key: str,
    alignment_mode: str,
    split: str,
    scores: bool,
    threads: Optional[int],
    device: str,
    words: Optional[str] = None,
    min_score: Optional[float] = None,
) -> SeqdistillNER:
    """``nlp.add_pipe("seqdistill_ner", config={"model": DIR})``: ``model`` any directory
    ``Tagger.load`` takes, as a string (spaCy's configs hold JSON values only); ``batch_size`` sentences per forward pass; ``spans_key`` the span group
    of every span (nested ones included); ``alignment_mode`` how a span that ends inside a spaCy
    token is mapped (expand, contract, strict); ``split`` what a sentence is (lines, doc, sents);
    ``scores`` whether span scores are computed; ``threads`` the runtime's threads (ONNX Runtime's
    session, or torch's, process-wide; None: the runtime's default); ``device`` torch's; ``words`` the
    words rule for the text (seqdistill.corpora.words; None: the model's); ``min_score`` drops spans
    less confident than it."""
    _check_options(batch_size, alignment_mode, split)  # before loading the model
    tagger = Tagger.load(model, device=device, threads=threads, words=words, min_score=min_score)
    return SeqdistillNER(
        nlp,
        name,
        tagger,
        batch_size=batch_size,
        spans_key=spans_key,
        alignment_mode=alignment_mode,
        split=split,
        scores=scores,
    )


__all__ = ["FACTORY", "SeqdistillNER", "make_component"]
