"""XtremeDistil's student (paper 001 §3): a BiLSTM tagger over the teacher's subword tokens.

    subword ids -> embeddings (E, from the SVD of the teacher's matrix) -> dropout -> BiLSTM (H per
    direction) -> dropout -> pool to words -> z~ = GeLU(W_f h + b_f)          (eq. 5)
        -> softmax head  p^s = softmax(W_s z~)                                (eq. 1)
        -> logit regressor  r^s = W_r z~ + b_r                                 (eq. 3)

Decisions, named here:

* The heads read the projection z~, not h directly. Eqs. 1 and 3 write them on h, but the paper's
  gradual unfreezing (Table 4) unfreezes "Projection" between the heads and the BiLSTM in stages 2
  and 3 and its F1 moves when it does, which only happens if the heads sit on z~; reading h would
  make that unfreezing step a no-op.
* The BiLSTM runs over subwords (the paper's WordPiece input, no length limit); outputs are pooled
  to words the way the teacher pooled its own (``first`` subword by default, or ``mean``), so the
  student's word outputs line up with the teacher's word-level logits and hidden states in the
  cache. The paper's extra ``X`` tag on continuation pieces is not needed: continuation pieces are
  simply not scored.
* Prediction is the argmax of the softmax head per word (the paper has no CRF); an invalid IOB2
  sequence is scored as seqeval reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...decode import Decoder, argmax_decoder
from ...onnx_graphs import PaddedBiLSTM
from ...tokenization import SubwordBatch, words_to_subwords
from ...vocabulary import RowIndex
from ..base import StudentConfig
from ..padded_lstm import bilstm

# Parameter groups from the top of the network to the bottom: the order of gradual unfreezing (§5.3).
GROUPS = ("softmax", "regressor", "projection", "bilstm", "embeddings")


@dataclass
class TaggerOutput:
    projection: Tensor  # z~ [B, L, P] (eq. 5)
    logits: Tensor  # W_s z~ [B, L, T], the softmax head's scores (eq. 1)
    regression: Tensor  # r^s [B, L, T] (eq. 3)


@dataclass
class TaggerConfig(StudentConfig):
    """The BiLSTM tagger's settings beyond every student's (paper 001)."""

    arch: str = "bilstm-tagger"
    projection_dim: int = 0  # width of the projection z~ (eq. 5), the teacher's hidden size (0: 2 x hidden_size)
    pooling: str = "first"  # subword -> word pooling, the teacher's (first | mean)


class BiLSTMTagger(nn.Module):
    arch = "bilstm-tagger"
    config_class = TaggerConfig

    def __init__(self, config: TaggerConfig):
        super().__init__()
        if config.pooling not in ("first", "mean"):
            raise ValueError(f"pooling {config.pooling!r} is not first or mean")
        self.config = config
        num_tags = config.schema.num_tags
        proj = config.projection_dim or 2 * config.hidden_size
        self.vocab = RowIndex(config.teacher_vocab_size)  # teacher ids -> rows (vocabulary.py)
        self.embed = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=None)
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(
            config.embedding_dim, config.hidden_size, num_layers=config.num_layers, bidirectional=True, batch_first=True
        )
        self.project = nn.Linear(2 * config.hidden_size, proj)
        self.classifier = nn.Linear(proj, num_tags, bias=False)  # W_s (eq. 1 has no bias)
        self.regressor = nn.Linear(proj, num_tags)  # <W_r, b_r> (eq. 3)

    def groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameter groups that gradual unfreezing switches on, by name (see ``GROUPS``)."""
        return {
            "softmax": list(self.classifier.parameters()),
            "regressor": list(self.regressor.parameters()),
            "projection": list(self.project.parameters()),
            "bilstm": list(self.lstm.parameters()),
            "embeddings": list(self.embed.parameters()),
        }

    @property
    def device(self) -> torch.device:
        return self.project.weight.device

    @staticmethod
    def inputs(tokenizer, batch_words: list[list[str]]) -> SubwordBatch:
        return words_to_subwords(tokenizer, batch_words)

    def forward(self, x: SubwordBatch) -> TaggerOutput:
        h = bilstm(self.lstm, self.dropout(self.embed(self.vocab(x.ids))), x.mask.sum(1))
        words = self.pool(self.dropout(h), x)
        z = nn.functional.gelu(self.project(words))
        return TaggerOutput(z, self.classifier(z), self.regressor(z))

    def pool(self, h: Tensor, x: SubwordBatch) -> Tensor:
        """Subword states ``[B, S, D]`` to word states ``[B, L, D]`` (first subword, or the mean)."""
        if self.config.pooling == "first":
            return x.first_subword(h)
        L = x.first.shape[1]
        index = x.word_ids.clamp(min=0).unsqueeze(-1).expand(-1, -1, h.shape[-1])
        sums = h.new_zeros(h.shape[0], L, h.shape[-1]).scatter_add(1, index, h * x.mask.unsqueeze(-1))
        counts = h.new_zeros(h.shape[0], L).scatter_add(1, x.word_ids.clamp(min=0), x.mask.to(h.dtype))
        return sums / counts.clamp(min=1).unsqueeze(-1)

    @torch.no_grad()
    def decode(self, x: SubwordBatch) -> Tensor:
        """Tag ids ``[B, L]``: the argmax of the softmax head (eq. 1), -1 past each sentence."""
        ids = self(x).logits.argmax(-1)
        return ids.masked_fill(~x.word_mask, -1)

    def decoder(self) -> Decoder:
        return argmax_decoder(self.config.schema)

    def export_graph(self) -> tuple[nn.Module, str, dict]:
        """The softmax head's logits over subwords pooled to words (``subwords`` inputs)."""
        return SubwordLSTMGraph(self), "subwords", {"pooling": self.config.pooling}


class SubwordLSTMGraph(nn.Module):
    """The BiLSTM tagger (papers 001, 004) for ONNX: subword embeddings, the exact padded BiLSTM,
    pooled to words, the GeLU projection (eq. 5) and the softmax head's logits (eq. 1)."""

    def __init__(self, model: BiLSTMTagger):
        super().__init__()
        self.vocab, self.embed, self.lstm = model.vocab, model.embed, PaddedBiLSTM(model.lstm)
        self.project, self.classifier = model.project, model.classifier

    def forward(self, ids: Tensor, lengths: Tensor, pool: Tensor) -> Tensor:
        h = self.lstm(self.embed(self.vocab(ids)), lengths)
        return self.classifier(nn.functional.gelu(self.project(pool @ h)))


ARCH = BiLSTMTagger
