"""``Tagger``: any trained model (a torch student, a teacher, an exported ONNX directory) tagging
raw texts or pre-split words, with entity spans and their character offsets.

    from seqdistill import Tagger
    tagger = Tagger.load("student-onnx/")             # or a student or teacher directory
    for s in tagger(["Peter Blackburn visits Paris."]):
        print(s.tags, [(e.type, e.char_start, e.char_end, e.text) for e in s.spans])

Inputs: a string (one text), a list of strings (texts, split by the model's words rule,
``corpora.words``), or a list of word lists (pre-split; offsets then point into the words joined by
one space). Sentences are tagged in batches of similar length (``batch_size``) and returned in input order.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..corpora.documents import document_sentences
from ..corpora.words import join_words, splitter
from ..decode import Decoded
from .torch_models import Backend


@dataclass
class Span:
    type: str
    start: int  # first word
    end: int  # one past the last word
    char_start: int  # offsets into the sentence's text
    char_end: int
    text: str
    score: float | None = None  # mean probability of the chosen tags over the span's words


@dataclass
class TaggedSentence:
    text: str
    words: list[str]
    offsets: list[tuple[int, int]]
    tags: list[str]
    spans: list[Span]

    def to_json(self) -> dict:
        out = asdict(self)
        out["offsets"] = [list(o) for o in self.offsets]
        return out


CALIBRATION_FILE = "calibration.json"  # {"temperature": T, ...}: written by distill-eval --fit-temperature


def read_temperature(directory) -> float:
    """The span-confidence temperature a model directory records (1.0 when it records none)."""
    import json

    path = Path(directory) / CALIBRATION_FILE
    if not path.is_file():
        return 1.0
    try:
        t = float(json.loads(path.read_text())["temperature"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a calibration file ({e}); delete it or fit it again") from None
    if not t > 0:
        raise ValueError(f"{path}: temperature {t} must be positive")
    return t


@dataclass
class TaggedDocument:
    """A document's text, its sentences (each ``TaggedSentence`` with offsets into the document, its
    ``text`` the sentence's own) and all their spans, offsets into the document."""

    text: str
    sentences: list[TaggedSentence]
    spans: list[Span]

    def to_json(self) -> dict:
        return {
            "text": self.text,
            "sentences": [s.to_json() for s in self.sentences],
            "spans": [asdict(sp) for sp in self.spans],
        }


def load_backend(path, *, device: str = "cpu", threads: int | None = None, trust_remote_code: bool = False) -> Backend:
    """An exported directory (``export.json``), a student directory (``config.json`` with a
    seqdistill ``arch``) or a teacher directory, by what the directory holds; with the temperature
    of its span confidences (``calibration.json``)."""
    backend = _load_backend(path, device=device, threads=threads, trust_remote_code=trust_remote_code)
    if backend.decoder is not None:
        backend.decoder.temperature = read_temperature(path)
    return backend


def _load_backend(path, *, device: str, threads: int | None, trust_remote_code: bool) -> Backend:
    from .onnx_runtime import OnnxModel, is_export_dir
    from .torch_models import TorchStudent, TorchTeacher, is_student_dir

    d = Path(path)
    if not d.is_dir():
        from ..teachers.loading import HUB_ID, resolve_model_dir

        if not HUB_ID.fullmatch(str(path)):
            raise FileNotFoundError(f"{d}: no such model directory")
        teacher = TorchTeacher(resolve_model_dir(str(path)), device, trust_remote_code)  # by Hub id (issue 65)
        teacher.name = str(path).rsplit("/", 1)[-1]  # NAME of ORG/NAME, not the snapshot's commit
        return teacher
    if is_export_dir(d):
        return OnnxModel(d, threads)
    if threads:
        import torch

        torch.set_num_threads(threads)  # process-wide: torch has no per-model thread count
    if is_student_dir(d):
        return TorchStudent(d, device)
    return TorchTeacher(d, device, trust_remote_code)


class Tagger:
    def __init__(self, backend: Backend, words: str | None = None, min_score: float | None = None):
        """``words``: the words rule raw texts are split by (``corpora.words``); None: the one the
        model directory records (the rule its training corpus implies). ``min_score``: spans less
        confident than this are dropped (``__call__``)."""
        self.backend = backend
        self.words = words or backend.words
        self.min_score = min_score
        splitter(self.words)  # an unknown rule, or mecab without fugashi, fails here, not at the first text

    @classmethod
    def load(
        cls,
        path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        trust_remote_code: bool = False,
        words: str | None = None,
        min_score: float | None = None,
    ) -> "Tagger":
        """Load any model directory. ``threads``: the ONNX Runtime session's threads, or torch's
        (process-wide) for a torch model; None keeps the runtime's default (all cores). ``words``:
        the words rule for raw text (default: the model's)."""
        backend = load_backend(path, device=device, threads=threads, trust_remote_code=trust_remote_code)
        return cls(backend, words, min_score)

    # -- identity ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def kind(self) -> str:
        return self.backend.kind

    @property
    def runtime(self) -> str:
        return (
            self.backend.runtime
            if self.backend.quantize == "none"
            else f"{self.backend.runtime} {self.backend.quantize}"
        )

    @property
    def scheme(self) -> str:
        return self.backend.scheme

    @property
    def decoder(self):
        return self.backend.decoder

    @property
    def nested(self) -> bool:
        """Whether spans may nest (one BILOU layer per entity type)."""
        return self.decoder is not None and self.decoder.nested

    @property
    def params(self) -> int:
        return self.backend.params

    @property
    def params_without_embeddings(self) -> int:
        return self.backend.params_without_embeddings

    # -- tagging -----------------------------------------------------------------------------------
    def __call__(
        self, inputs, batch_size: int = 32, scores: bool = True, min_score: float | None = None
    ) -> list[TaggedSentence]:
        """Tag texts or pre-split sentences. ``min_score``: drop the spans whose confidence is below
        it (their words' tags become O, for a flat model); None: ``self.min_score``."""
        min_score = self.min_score if min_score is None else min_score
        scores = scores or min_score is not None
        if isinstance(inputs, str):
            inputs = [inputs]
        split = splitter(self.words)
        texts, words, offsets = [], [], []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                w, o = split(item)
                t = item
            elif isinstance(item, (list, tuple)) and all(isinstance(x, str) for x in item):
                w = list(item)
                t, o = join_words(w)
            else:
                raise TypeError(f"input {i}: a text (str) or a list of words (list of str), not {type(item).__name__}")
            texts.append(t), words.append(w), offsets.append(o)
        decoded = self._decode(words, batch_size, scores, True)
        out = []
        for t, w, o, d in zip(texts, words, offsets, decoded):
            spans = [
                Span(
                    etype,
                    s,
                    e,
                    o[s][0],
                    o[e - 1][1],
                    t[o[s][0] : o[e - 1][1]],
                    None if d.scores is None else d.scores[j],
                )
                for j, (s, e, etype) in enumerate(d.spans)
            ]
            tags = d.tags
            if min_score is not None:
                dropped = [sp for sp in spans if sp.score is not None and sp.score < min_score]
                spans = [sp for sp in spans if sp.score is None or sp.score >= min_score]
                if dropped and not self.nested:
                    tags = list(tags)
                    for sp in dropped:
                        tags[sp.start : sp.end] = ["O"] * (sp.end - sp.start)
            out.append(TaggedSentence(t, w, o, tags, spans))
        return out

    @property
    def document_language(self) -> str:
        """The sentence splitter's language for documents: ``ja`` under the mecab words rule, else ``en``."""
        return "ja" if self.words == "mecab" else "en"

    def documents(
        self,
        texts,
        batch_size: int = 32,
        scores: bool = True,
        min_score: float | None = None,
        splitter: str = "pysbd",
        language: str | None = None,
    ) -> list[TaggedDocument]:
        """Tag whole documents: each is split into sentences (``corpora.documents``: ``splitter``,
        ``language`` — default ``ja`` under the mecab words rule, else ``en``), every sentence of
        every document is tagged in batches of similar length, and words and spans come back with
        character offsets into their document."""
        if isinstance(texts, str):
            texts = [texts]
        language = language or self.document_language
        for d, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"document {d}: a text (str), not {type(text).__name__}")
        owners = document_sentences(texts, splitter, language)
        pieces = [texts[d][start:end] for d, start, end in owners]
        tagged = self(pieces, batch_size, scores, min_score) if pieces else []
        docs = [TaggedDocument(t, [], []) for t in texts]
        for (d, start, _), s in zip(owners, tagged):
            s.offsets = [(a + start, b + start) for a, b in s.offsets]  # into the document
            for sp in s.spans:
                sp.char_start, sp.char_end = sp.char_start + start, sp.char_end + start
            docs[d].sentences.append(s)
            docs[d].spans += s.spans
        return docs

    def unseen(
        self,
        sentences: list[list[str]],
        gold_spans: list[list[tuple[int, int, str]]] | None = None,
        batch_size: int = 64,
        predicted_spans: list[list[tuple[int, int, str]]] | None = None,
    ) -> dict | None:
        """What a student over a trimmed vocabulary (``seqdistill.vocabulary``) reads through its UNK
        row in ``sentences``: ``words``, the share of their words with a subword outside its kept
        rows; with ``gold_spans`` (``(start, end exclusive, type)`` per sentence) ``gold_spans``, the
        share of those that hold such a word; ``predicted_spans``, the same of the spans it predicts
        there (those given, when already made, as ``distill-eval`` has them). The span shares are the
        ones that matter: the words a tagger exists to find (new names, numbers, codes) are the ones a
        cache is least likely to have seen (issue 53: 0.5% of a corpus's test words, three quarters of
        them inside gold spans). A share is None where there are no spans. None for models that keep
        every row."""
        from ..vocabulary import unseen_share, unseen_span_share

        flags = self.backend.unseen_words(sentences)
        if flags is None:
            return None
        out = {"words": unseen_share(flags)}
        if gold_spans is not None:
            out["gold_spans"] = unseen_span_share(flags, gold_spans)
        if predicted_spans is None:
            predicted_spans = self.predict_spans(sentences, batch_size)
        out["predicted_spans"] = unseen_span_share(flags, predicted_spans)
        return out

    def unseen_share(self, sentences: list[list[str]]) -> float | None:
        """The share of the words of ``sentences`` read through the UNK row (``unseen``'s ``words``);
        None for models that keep every row."""
        from ..vocabulary import unseen_share

        flags = self.backend.unseen_words(sentences)
        return None if flags is None else unseen_share(flags)

    def predict(self, sentences: list[list[str]], batch_size: int = 64) -> list[list[str]]:
        """Flat tags of pre-split sentences."""
        return [d.tags for d in self._decode(sentences, batch_size, False, False)]

    def predict_spans(self, sentences: list[list[str]], batch_size: int = 64) -> list[list[tuple[int, int, str]]]:
        """``(start, end, type)`` spans: nested across types for a per-type (BILOU) model."""
        return [d.spans for d in self._decode(sentences, batch_size, False, True)]

    def predict_batch(self, sentences: list[list[str]]) -> list[list[str]]:
        """One batch as given (the unit ``latency`` times)."""
        return [d.tags for d in self._decode(sentences, len(sentences) or 1, False, False)]

    def _decode(
        self, sentences: list[list[str]], batch_size: int, with_scores: bool, with_spans: bool
    ) -> list[Decoded]:
        """Decode in batches of similar length (``length_batches``); an empty sentence gets no tags."""
        out: list[Decoded | None] = [Decoded([], [], [] if with_scores else None)] * len(sentences)
        for idx in length_batches([len(s) for s in sentences], batch_size):
            for i, d in zip(idx, self.backend.decode([list(sentences[i]) for i in idx], with_scores, with_spans)):
                out[i] = d
        return out


def length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """The indices of the non-empty sentences (of these ``lengths``), sorted shortest first and cut
    into batches of at most ``batch_size`` sentences, none padded past twice its own length: a batch ends early where the
    next sentence is more than twice as long as the batch's first. Decision, named here: a fixed
    count alone lets a long tail (CoNLL-2003's 124-word table rows) pad a whole batch, and an ONNX
    graph computes every padded position (docs/RESULTS.md, "Documents against sentences": 30% more
    padded words for the same 4,030). Tags do not depend on the batch (issue 34), so this changes
    speed only."""
    batches: list[list[int]] = []
    for i in sorted((i for i, n in enumerate(lengths) if n), key=lengths.__getitem__):
        if not batches or len(batches[-1]) == batch_size or lengths[i] > 2 * lengths[batches[-1][0]]:
            batches.append([])
        batches[-1].append(i)
    return batches


def latency(tagger: Tagger, sentences: list[list[str]], batch_size: int, batches: int = 20) -> float:
    """Median milliseconds per sentence over ``batches`` batches of ``batch_size`` sentences
    (tokenization and decoding included)."""
    times = []
    tagger.predict_batch(sentences[:batch_size])  # warm-up
    for i in range(batches):
        start = (i * batch_size) % max(1, len(sentences) - batch_size)
        batch = sentences[start : start + batch_size]
        t0 = time.perf_counter()
        tagger.predict_batch(batch)
        times.append((time.perf_counter() - t0) * 1000 / len(batch))
    return statistics.median(times)


__all__ = ["Span", "TaggedSentence", "Tagger", "latency", "load_backend"]
