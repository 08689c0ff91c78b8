"""What every student architecture shares: its config (``StudentConfig``, saved as the student
directory's ``config.json``), filling its embeddings from the teacher's, and saving it the Hugging
Face way (``config.json`` + ``model.safetensors`` + tokenizer). The architectures (``archs/``) import
this module; ``archs/__init__.py`` finds them and loads a student directory (no cycle)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from ..cache_schema import LabelSchema
from ..vocabulary import save_tokenizer

EMBEDDINGS = ("teacher", "svd", "random")


@dataclass
class StudentConfig:
    label_schema: dict
    vocab_size: int
    embedding_dim: int
    embedding: str = "teacher"  # teacher (TE) | svd | random
    freeze_embeddings: bool = True  # TE: the teacher's embeddings stay frozen (paper 000 §5.2)
    hidden_size: int = 300  # per direction (paper 000, Table 6)
    num_layers: int = 1
    dropout: float = 0.5  # on embeddings and on the LSTM output (paper 000, Table 6)
    arch: str = "bilstm-crf"  # bilstm-crf (000) | bilstm-tagger (001, tagger.py) | transformer | rnn-tagger (003)
    extra: dict = field(default_factory=dict)
    projection_dim: int = 0  # bilstm-tagger: width of the projection z~ (eq. 5), the teacher's hidden size
    pooling: str = "first"  # bilstm-tagger: subword -> word pooling, the teacher's (first | mean)
    head: str = "crf"  # transformer: crf | softmax
    encoder_config: dict = field(default_factory=dict)  # transformer: its K-layer encoder's Hugging Face config
    char_dim: int = 0  # bilstm-crf: byte embedding width of the char CNN feature (0: no char feature)
    char_filters: int = 0  # bilstm-crf: the char CNN's filters, the feature's width
    char_width: int = 3  # bilstm-crf: the char CNN's window (Ma & Hovy, 2016)
    teacher_vocab_size: int = 0  # a trimmed vocabulary (vocabulary.py): the teacher's rows; 0: ids are rows

    @property
    def schema(self) -> LabelSchema:
        return LabelSchema.from_json(self.label_schema)


def init_embeddings(model: nn.Module, exports) -> None:
    """Fill the embedding matrix from the teacher's (``teacher``, or its SVD reduction to
    ``embedding_dim``: W V_E = U_E S_E, paper 001 §3), or leave it random. ``exports``: the cache's
    ``TeacherExports`` (None for a random matrix); over a trimmed vocabulary the matrix is the kept
    rows and the UNK row (``vocabulary.py``, the SVD taken over them), and the model's ``vocab``
    maps the teacher's ids to them."""
    cfg = model.config
    if cfg.teacher_vocab_size:
        model.vocab.fill(exports.ids)
    if cfg.embedding == "random":
        return
    if exports is None:
        raise ValueError(f"embedding {cfg.embedding!r} needs the teacher's exported embedding matrix")
    w = exports.student_weight().float()
    if cfg.embedding == "svd":
        u, s, _ = torch.linalg.svd(w, full_matrices=False)
        w = u[:, : cfg.embedding_dim] * s[: cfg.embedding_dim]
    if tuple(w.shape) != (cfg.vocab_size, cfg.embedding_dim):
        raise ValueError(f"embedding matrix {tuple(w.shape)} does not fit ({cfg.vocab_size}, {cfg.embedding_dim})")
    with torch.no_grad():
        model.embed.weight.copy_(w)


def save_student(model: nn.Module, tokenizer, directory) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(asdict(model.config), indent=1) + "\n")
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(d / "model.safetensors"))
    save_tokenizer(tokenizer, d / "tokenizer")
    return d
