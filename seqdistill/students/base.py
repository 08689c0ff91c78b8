"""What every student architecture shares: its config (``StudentConfig``, saved as the student
directory's ``config.json``), filling its embeddings from the teacher's, and saving it the Hugging
Face way (``config.json`` + ``model.safetensors`` + tokenizer). The architectures (``archs/``) import
this module; ``archs/__init__.py`` finds them and loads a student directory (no cycle)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from ..cache_schema import LabelSchema
from ..vocabulary import save_tokenizer

EMBEDDINGS = ("teacher", "svd", "random")


@dataclass
class StudentConfig:
    """What every student architecture's config holds; an architecture with settings of its own
    subclasses it in its module (``BiLSTMCRFConfig``, ``TaggerConfig``, ``TransformerConfig``) and
    names the subclass as its model class's ``config_class``. A student directory's ``config.json``
    holds the fields of its architecture's class (:func:`config_from_json` reads it)."""

    label_schema: dict
    vocab_size: int
    embedding_dim: int
    embedding: str = "teacher"  # teacher (TE) | svd | random
    freeze_embeddings: bool = True  # TE: the teacher's embeddings stay frozen (paper 000 §5.2)
    hidden_size: int = 300  # per direction (paper 000, Table 6)
    num_layers: int = 1
    dropout: float = 0.5  # on embeddings and on the LSTM output (paper 000, Table 6)
    arch: str = "bilstm-crf"  # bilstm-crf (000) | bilstm-tagger (001) | transformer (000, 002) | rnn-tagger (003)
    extra: dict = field(default_factory=dict)
    teacher_vocab_size: int = 0  # a trimmed vocabulary (vocabulary.py): the teacher's rows; 0: ids are rows

    @property
    def schema(self) -> LabelSchema:
        return LabelSchema.from_json(self.label_schema)


# Written into every student's config.json, whatever its architecture, before each architecture
# had a config class of its own (issue 56): such files still load, these fields dropped where the
# architecture has none.
SHARED_BEFORE = ("projection_dim", "pooling", "head", "encoder_config", "char_dim", "char_filters", "char_width")


def config_from_json(cls: type[StudentConfig], obj: dict, where) -> StudentConfig:
    """The ``cls`` config a ``config.json`` holds; fields of other architectures written by older
    versions (``SHARED_BEFORE``) are dropped, any other unknown field is refused, naming it."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(obj) - names - set(SHARED_BEFORE))
    if unknown:
        raise ValueError(f"{where}: fields {unknown} are not settings of a {obj.get('arch')!r} student")
    return cls(**{k: v for k, v in obj.items() if k in names})


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
