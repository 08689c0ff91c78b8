"""Inference: load any trained model (a torch student, a teacher, or an exported ONNX directory),
tag text or words with it, and time it. One neutral layer that ``distill-eval``,
``distill-predict`` and any serving front end call; it imports no training code, and imports the
student or teacher package only to load a directory of that kind."""

from ..corpora.words import join_words, split_words
from ..decode import Decoded, Decoder, viterbi
from .onnx_runtime import ExportError
from .tagger import Span, TaggedDocument, TaggedSentence, Tagger, latency, load_backend

__all__ = [
    "Decoded",
    "Decoder",
    "ExportError",
    "Span",
    "TaggedDocument",
    "TaggedSentence",
    "Tagger",
    "join_words",
    "latency",
    "load_backend",
    "split_words",
    "viterbi",
]
