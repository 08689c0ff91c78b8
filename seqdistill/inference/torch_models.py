"""Trained torch models behind one interface: a student directory or a teacher directory, each
turned into word scores for the numpy decoder (``seqdistill.decode``), which the model names
(``decoder()``, declared by its architecture or teacher kind).

The student and teacher packages are imported only when such a directory is loaded, so that an
exported directory (``onnx_runtime.py``) runs without them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..decode import Decoded, Decoder
from ..vocabulary import UNSEEN_RULE, unseen_words


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
    words: str = "default"  # the words rule raw text is split by (corpora.words), from the model directory
    vocabulary: dict | None = None  # a trimmed vocabulary (seqdistill.vocabulary): rows kept, of how many
    embedding_rows: int | None = None  # a student's embedding rows (a trimmed one's UNK row included); None: unknown

    @property
    def scheme(self) -> str:
        """The tag scheme of the model's tags (its decoder's)."""
        return self.decoder.schema.scheme

    def scores(self, words: list[list[str]]) -> np.ndarray:
        raise NotImplementedError

    def row_of_id(self) -> np.ndarray | None:
        """A trimmed vocabulary's map from teacher subword ids to rows (``vocabulary.RowIndex``);
        None where every row is kept."""
        return None

    def unseen_words(self, words: list[list[str]]) -> list[list[bool]] | None:
        """Per word, whether it has a subword outside the kept rows (``vocabulary.unseen_words``);
        None where every row is kept."""
        rows = self.row_of_id() if self.vocabulary else None
        return None if rows is None else unseen_words(self.tokenizer, words, rows, int(self.vocabulary["kept"]))

    def decode(self, words: list[list[str]], with_scores: bool = False, with_spans: bool = True) -> list[Decoded]:
        return self.decoder(self.scores(words), np.array([len(w) for w in words]), with_scores, with_spans)


def trimmed_vocabulary(config) -> dict | None:
    """What a student over a trimmed vocabulary kept (``seqdistill.vocabulary``), None otherwise."""
    if not getattr(config, "teacher_vocab_size", 0):
        return None
    return {"kept": config.vocab_size - 1, "teacher": config.teacher_vocab_size, "unseen": UNSEEN_RULE}


class TorchStudent(Backend):
    kind = "student"

    def __init__(self, directory: Path, device: str = "cpu"):
        from ..students.archs import load_student
        from ..students.sizes import parameter_counts

        self.module, self.tokenizer = load_student(directory, device)
        self.name, self.what = directory.name, self.module.config.arch
        self.words = self.module.config.extra.get("words", "default")
        self.vocabulary = trimmed_vocabulary(self.module.config)
        self.embedding_rows = int(self.module.config.vocab_size)
        self.decoder = self.module.decoder()
        self.params, self.params_without_embeddings = parameter_counts(self.module)

    def row_of_id(self) -> np.ndarray | None:
        vocab = getattr(self.module, "vocab", None)
        return vocab.row_of_id.cpu().numpy() if vocab is not None and vocab.trimmed else None

    def scores(self, words: list[list[str]]) -> np.ndarray:
        x = self.module.inputs(self.tokenizer, words).to(self.module.device)
        with torch.inference_mode():
            out = self.module(x)
        return getattr(out, "logits", out).float().cpu().numpy()  # the BiLSTM tagger's softmax head


class TorchTeacher(Backend):
    kind = "teacher"

    def __init__(self, directory: Path, device: str = "cpu", trust_remote_code: bool = False):
        from ..students.sizes import parameter_counts
        from ..teachers import load_teacher

        self.module = load_teacher(directory, trust_remote_code=trust_remote_code, device=device)
        self.tokenizer = self.module.tokenizer
        self.name, self.what = directory.name, self.module.kind
        meta = directory / "teacher.json"  # absent from a Hugging Face token classifier's directory
        self.words = json.loads(meta.read_text()).get("words", "default") if meta.exists() else "default"
        self.decoder = self.module.decoder()  # None: the teacher decodes itself (SenTScore's beam search)
        self.params, self.params_without_embeddings = parameter_counts(self.module)

    @property
    def scheme(self) -> str:
        """A teacher that decodes itself (SenTScore's beam search) has no decoder: its label schema's."""
        return self.module.schema.scheme

    def scores(self, words: list[list[str]]) -> np.ndarray:
        with torch.inference_mode():
            return self.module.encode(words).logits.float().cpu().numpy()

    def decode(self, words: list[list[str]], with_scores: bool = False, with_spans: bool = True) -> list[Decoded]:
        if self.decoder is not None:
            return super().decode(words, with_scores, with_spans)
        # a teacher that decodes itself (SenTScore's tag-wise beam search, paper 004): tags, no scores
        from ..cache_schema.labels import tags_to_spans

        return [
            Decoded(tags, tags_to_spans(tags, self.module.schema.scheme), None) for tags in self.module.predict(words)
        ]
