"""Trained torch models behind one interface: a student directory or a teacher directory, each
turned into word scores for the numpy decoder (``decode.py``).

The student and teacher packages are imported only when such a directory is loaded, so that an
exported directory (``onnx_runtime.py``) runs without them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..cache_schema import LabelSchema
from .decode import Decoded, Decoder


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """All parameters, and those outside the word embedding matrix (the largest nn.Embedding or
    nn.EmbeddingBag): paper 003's Table 1 counts both."""
    total = sum(p.numel() for p in model.parameters())
    embeddings = [
        m.weight.numel() for m in model.modules() if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))
    ]
    return total, total - max(embeddings, default=0)


def is_student_dir(d: Path) -> bool:
    config = d / "config.json"
    return config.is_file() and "arch" in json.loads(config.read_text())


class Backend:
    """What the :class:`~seqdistill.inference.Tagger` needs of a model: its identity and size,
    its decoder, and ``scores(words)``: word scores ``[B, L, T]``, or BILOU logits ``[B, L, E, 5]``."""

    name: str
    kind: str  # teacher | student
    what: str  # the student's arch (bilstm-crf, bilstm-tagger, transformer, rnn-tagger) or the teacher's kind
    runtime: str = "torch"
    quantize: str = "none"
    decoder: Decoder
    params: int
    params_without_embeddings: int

    def scores(self, words: list[list[str]]) -> np.ndarray:
        raise NotImplementedError

    def decode(self, words: list[list[str]], with_scores: bool = False, with_spans: bool = True) -> list[Decoded]:
        return self.decoder(self.scores(words), np.array([len(w) for w in words]), with_scores, with_spans)


def _numpy(tensors) -> tuple[np.ndarray, ...]:
    return tuple(t.detach().float().cpu().numpy() for t in tensors)


def bilou_decoder(schema: LabelSchema, entity_types) -> Decoder:
    from ..bilou import transition_scores

    return Decoder("bilou", schema, _numpy(transition_scores()), tuple(entity_types))


def student_decoder(model) -> Decoder:
    """A torch student's decoder: the CRF's Viterbi (BiLSTM-CRF, transformer with a CRF head),
    the BILOU layers (rnn-tagger) or the argmax (softmax heads)."""
    cfg = model.config
    if cfg.arch == "rnn-tagger":
        return bilou_decoder(cfg.schema, model.entity_types)
    if getattr(model, "crf", None) is not None:
        return Decoder("crf", cfg.schema, _numpy(model.crf.scores()))
    return Decoder("argmax", cfg.schema)


def teacher_decoder(teacher) -> Decoder:
    if teacher.kind == "crf":
        return Decoder("crf", teacher.schema, _numpy(teacher.crf.scores()))
    if teacher.kind == "bilou-per-type":
        return bilou_decoder(teacher.schema, teacher.types)
    return Decoder("argmax", teacher.schema)


class TorchStudent(Backend):
    kind = "student"

    def __init__(self, directory: Path, device: str = "cpu"):
        from ..students.models import load_student

        self.module, self.tokenizer = load_student(directory, device)
        self.name, self.what = directory.name, self.module.config.arch
        self.decoder = student_decoder(self.module)
        self.params, self.params_without_embeddings = parameter_counts(self.module)

    def scores(self, words: list[list[str]]) -> np.ndarray:
        x = self.module.inputs(self.tokenizer, words).to(self.module.device)
        with torch.inference_mode():
            out = self.module(x)
        return getattr(out, "logits", out).float().cpu().numpy()  # the BiLSTM tagger's softmax head


class TorchTeacher(Backend):
    kind = "teacher"

    def __init__(self, directory: Path, device: str = "cpu", trust_remote_code: bool = False):
        from ..teachers import load_teacher

        self.module = load_teacher(directory, trust_remote_code=trust_remote_code, device=device)
        self.tokenizer = self.module.tokenizer
        self.name, self.what = directory.name, self.module.kind
        self.decoder = None if self.what == "sentscore" else teacher_decoder(self.module)
        self.params, self.params_without_embeddings = parameter_counts(self.module)

    def scores(self, words: list[list[str]]) -> np.ndarray:
        with torch.inference_mode():
            return self.module.encode(words).logits.float().cpu().numpy()

    def decode(self, words: list[list[str]], with_scores: bool = False, with_spans: bool = True) -> list[Decoded]:
        if self.decoder is not None:
            return super().decode(words, with_scores, with_spans)
        # a SenTScore teacher decodes itself (the tag-wise beam search of paper 004): tags, no scores
        from ..cache_schema.labels import tags_to_spans

        return [
            Decoded(tags, tags_to_spans(tags, self.module.schema.scheme), None) for tags in self.module.predict(words)
        ]
