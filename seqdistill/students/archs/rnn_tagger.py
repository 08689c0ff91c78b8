"""Paper 003's students (issue 9): the teacher's embeddings, a "conv" block, a bidirectional
recurrent stack (LSTM, SRU or SRU++) and one BILOU head per entity type (Fig. 1).

    subword ids -> embeddings (the teacher's matrix) -> conv block -> 4 x bidirectional RNN
        (dropout 0.1 between layers) -> first subword of each word -> E heads of 5 BILOU logits

The conv block is two layers of three parallel 1-D convolutions (kernel sizes 1, 3 and 5, "same"
padding) whose outputs are concatenated, each layer followed by BatchNorm and ReLU; the first
keeps the embedding width D, the second halves it (the paper: 768 -> 384). Decisions, named here:
``extra["projection"]`` P (``distill-train rnn --projection``; 0, the paper's, by default) puts a learned
matrix between the embeddings and the conv block, which then runs at P and P / 2 (the recurrent layers
keep their width): an exported MPNet-base student spends 58% of its time at batch 1 in the conv block
at 768 (docs/BENCHMARKS.md, issue 82). The table and the matrix are both linear, so the export folds
them (``E P^T``, ``[V, P]``), as the cnn-crf student's export does: the student ships a table P / D
of the teacher's, and its parameters are counted as shipped (``parameter_counts``). Also:
the three convolutions of a layer split its output width between them (D/3 each, the remainder
to the last), padding positions are zeroed before each convolution so that they never leak into
real words, and BatchNorm normalises over real positions only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...bilou import decode_layers, flatten_layers
from ...decode import Decoder, bilou_decoder
from ...onnx_graphs import PaddedBiLSTM
from ...tokenization import SubwordBatch, words_to_subwords
from ...vocabulary import RowIndex
from ..base import StudentConfig
from ..sizes import parameter_counts
from ..sru import ExportSRU, recurrent_stack, replace_sru_scans

KERNELS = (1, 3, 5)


class MaskedBatchNorm(nn.BatchNorm1d):
    """BatchNorm over the real positions of ``[B, C, T]`` (padding neither counts nor changes)."""

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        flat = x.transpose(1, 2)[mask]  # [N, C]
        out = torch.zeros_like(x.transpose(1, 2))
        out[mask] = super().forward(flat) if flat.shape[0] > 1 or not self.training else flat
        return out.transpose(1, 2)


class ConvLayer(nn.Module):
    """Three parallel convolutions (kernels 1, 3, 5) concatenated, then BatchNorm and ReLU."""

    def __init__(self, width_in: int, width_out: int):
        super().__init__()
        sizes = [width_out // 3] * 2 + [width_out - 2 * (width_out // 3)]
        self.convs = nn.ModuleList(nn.Conv1d(width_in, n, k, padding=k // 2) for n, k in zip(sizes, KERNELS))
        self.norm = MaskedBatchNorm(width_out)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = x.transpose(1, 2) * mask.unsqueeze(1).to(x.dtype)  # [B, C, T], padding zeroed
        h = torch.cat([conv(h) for conv in self.convs], 1)
        return torch.relu(self.norm(h, mask)).transpose(1, 2)


class RNNTagger(nn.Module):
    arch = "rnn-tagger"

    def __init__(self, config: StudentConfig):
        super().__init__()
        self.config = config
        types = config.extra.get("entity_types")
        if not types:
            raise ValueError("an rnn-tagger needs extra['entity_types'] (one BILOU head per type)")
        self.entity_types = list(types)
        projection = config.extra.get("projection") or 0
        width = projection or config.embedding_dim
        self.vocab = RowIndex(config.teacher_vocab_size)  # teacher ids -> rows (vocabulary.py)
        self.embed = nn.Embedding(config.vocab_size, config.embedding_dim)
        self.embed.weight.requires_grad_(not (config.embedding == "teacher" and config.freeze_embeddings))
        self.project = nn.Linear(config.embedding_dim, projection, bias=False) if projection else None
        self.conv = nn.ModuleList([ConvLayer(width, width), ConvLayer(width, width // 2)])
        self.rnn = recurrent_stack(config.extra.get("cell", "sru++"), width // 2, config.hidden_size, config.num_layers)
        self.dropout = nn.Dropout(config.dropout)
        self.heads = nn.Linear(2 * config.hidden_size, 5 * len(self.entity_types))  # E parallel heads of 5

    @property
    def device(self) -> torch.device:
        return self.heads.weight.device

    @staticmethod
    def inputs(tokenizer, batch_words: list[list[str]]) -> SubwordBatch:
        return words_to_subwords(tokenizer, batch_words)

    def forward(self, x: SubwordBatch) -> Tensor:
        """BILOU logits per word and entity type, ``[B, L, E, 5]``."""
        h = self.embed(self.vocab(x.ids))
        if self.project is not None:
            h = self.project(h)
        for conv in self.conv:
            h = conv(h, x.mask)
        for i, layer in enumerate(self.rnn):
            h = layer(self.dropout(h) if i else h, x.mask)
        words = x.first_subword(h)
        B, L, _ = words.shape
        return self.heads(self.dropout(words)).view(B, L, len(self.entity_types), 5)

    @torch.no_grad()
    def decode_layers(self, x: SubwordBatch) -> Tensor:
        """Per-type BILOU tag ids ``[B, L, E]`` from the automaton's Viterbi (-1 past the end)."""
        return decode_layers(self(x), x.word_mask)

    @torch.no_grad()
    def decode(self, x: SubwordBatch) -> Tensor:
        """Flat tag ids of the student's label schema (see ``bilou.flatten_layers``)."""
        return flatten_layers(self.decode_layers(x), x.word_mask, self.entity_types, self.config.schema)

    @property
    def folded_projection(self) -> nn.Linear | None:
        """``--projection``'s matrix, which the export folds into the table (``students.sizes``)."""
        return self.project

    def parameter_counts(self) -> dict[str, int]:
        """All parameters and those outside the embedding matrix (the paper's Table 1 counts both), as
        the export ships them: a projection folded into the table (``[V, P]``, the embeddings)."""
        total, without = parameter_counts(self)
        return {"all": total, "without_embeddings": without}

    def decoder(self) -> Decoder:
        return bilou_decoder(self.config.schema, self.entity_types)

    def export_graph(self) -> tuple[nn.Module, str, dict]:
        """BILOU logits ``[B, L, E * 5]`` over subwords pooled to words (first subword)."""
        return RNNGraph(self), "subwords", {"pooling": "first"}


class RNNGraph(nn.Module):
    """The CNN + LSTM/SRU/SRU++ tagger (paper 003) for ONNX: embeddings (a projection folded in), the conv block (BatchNorm
    with its running statistics, padding zeroed), the recurrent stack, first subword, BILOU logits
    ``[B, L, E * 5]``. An SRU recurrence is exported as a placeholder node that
    :meth:`finish_onnx` turns into an ONNX ``Scan`` (``sru.replace_sru_scans``)."""

    def __init__(self, model: RNNTagger):
        super().__init__()
        self.vocab, self.conv, self.heads = model.vocab, model.conv, model.heads
        self.embed = model.embed
        if model.project is not None:  # folded: E P^T
            weight = model.embed.weight.detach() @ model.project.weight.detach().T
            self.embed = nn.Embedding.from_pretrained(weight.contiguous())
        cell = model.config.extra.get("cell", "sru++")
        self.lstm = cell == "lstm"
        self.rnn = nn.ModuleList(PaddedBiLSTM(layer.lstm) if self.lstm else ExportSRU(layer) for layer in model.rnn)
        self.custom_opsets = None if self.lstm else {"seqdistill": 1}

    def forward(self, ids: Tensor, lengths: Tensor, pool: Tensor) -> Tensor:
        mask = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)
        keep = mask.unsqueeze(-1).to(torch.float32)
        h = self.embed(self.vocab(ids))
        for layer in self.conv:
            x = h.transpose(1, 2) * keep.transpose(1, 2)
            x = torch.cat([conv(x) for conv in layer.convs], 1)
            n = layer.norm
            x = nn.functional.batch_norm(x, n.running_mean, n.running_var, n.weight, n.bias, False, 0.0, n.eps)
            h = torch.relu(x).transpose(1, 2) * keep
        for layer in self.rnn:
            h = layer(h, lengths) if self.lstm else layer(h, mask)
        return self.heads(pool @ h)

    def finish_onnx(self, path) -> None:
        if not self.lstm:
            replace_sru_scans(path)


ARCH = RNNTagger
