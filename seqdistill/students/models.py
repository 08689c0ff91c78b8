"""Student models, saved the Hugging Face way: ``config.json`` + ``model.safetensors`` + tokenizer.

:class:`BiLSTMCRF` is paper 000's student (Huang et al., 2015): word vectors -> dropout -> BiLSTM
-> dropout -> linear -> CRF. Words are vectors in the teacher's input space: the mean of the
teacher's embeddings of the word's subwords (an ``EmbeddingBag`` over the teacher's tokenizer
ids, both exported into the cache at build time), so the student needs no vocabulary of its own.
The embedding matrix is the teacher's, frozen ("TE", paper 000 §5.2), trainable, reduced by SVD to
E dimensions (paper 001 §3), or random.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ..cache_schema import LabelSchema
from ..crf import CRF
from ..encoding import WordBatch, words_to_bags

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

    @property
    def schema(self) -> LabelSchema:
        return LabelSchema.from_json(self.label_schema)


class BiLSTMCRF(nn.Module):
    def __init__(self, config: StudentConfig):
        super().__init__()
        self.config = config
        schema = config.schema
        self.embed = nn.EmbeddingBag(config.vocab_size, config.embedding_dim, mode="mean")
        self.embed.weight.requires_grad_(not (config.embedding == "teacher" and config.freeze_embeddings))
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(config.embedding_dim, config.hidden_size, num_layers=config.num_layers,
                            bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * config.hidden_size, schema.num_tags)
        self.crf = CRF.from_schema(schema)

    @property
    def device(self) -> torch.device:
        return self.out.weight.device

    def forward(self, words: WordBatch) -> Tensor:
        """Emission scores ``[B, L, T]``."""
        B, L = words.mask.shape
        x = self.embed(words.bag_ids, words.bag_offsets).view(B, L, -1)
        lengths = words.mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.dropout(x), lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=L)
        return self.out(self.dropout(h))

    @staticmethod
    def inputs(tokenizer, batch_words: list[list[str]]) -> WordBatch:
        return words_to_bags(tokenizer, batch_words)

    @torch.no_grad()
    def decode(self, words: WordBatch) -> Tensor:
        return self.crf.decode(self(words), words.mask)


def init_embeddings(model: nn.Module, teacher_weight: Tensor | None) -> None:
    """Fill the embedding matrix from the teacher's (``teacher``, or its SVD reduction to
    ``embedding_dim``: W V_E = U_E S_E, paper 001 §3), or leave it random."""
    cfg = model.config
    if cfg.embedding == "random":
        return
    if teacher_weight is None:
        raise ValueError(f"embedding {cfg.embedding!r} needs the teacher's exported embedding matrix")
    w = teacher_weight.float()
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
    tokenizer.save_pretrained(d / "tokenizer")
    return d


def student_architectures() -> dict[str, type[nn.Module]]:
    """``StudentConfig.arch`` -> model class."""
    from .tagger import BiLSTMTagger
    from .rnn_tagger import RNNTagger
    from .transformer import TransformerTagger

    return {"bilstm-crf": BiLSTMCRF, "bilstm-tagger": BiLSTMTagger, "transformer": TransformerTagger,
            "rnn-tagger": RNNTagger}


def load_student(directory, device: str | None = None):
    """A saved student and its tokenizer; no cache and no teacher needed."""
    from transformers import AutoTokenizer

    d = Path(directory)
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d}: no config.json; not a seqdistill student directory")
    config = StudentConfig(**json.loads((d / "config.json").read_text()))
    archs = student_architectures()
    if config.arch not in archs:
        raise ValueError(f"{d}: unknown student architecture {config.arch!r}; known: {', '.join(archs)}")
    model = archs[config.arch](config)
    model.load_state_dict(load_file(str(d / "model.safetensors")))
    model.eval()
    if device:
        model.to(device)
    return model, AutoTokenizer.from_pretrained(d / "tokenizer")
