"""Paper 000's student (Huang et al., 2015): word vectors -> dropout -> BiLSTM -> dropout -> linear
-> CRF.

Words are vectors in the teacher's input space: the mean of the teacher's embeddings of the word's
subwords (an ``EmbeddingBag`` over the teacher's tokenizer ids, both exported into the cache at
build time), so the student needs no vocabulary of its own. The embedding matrix is the teacher's,
frozen ("TE", paper 000 §5.2), trainable, reduced by SVD to E dimensions (paper 001 §3), or random.
Decoding is the CRF's Viterbi; the ONNX graph stops at the emissions (``BagsGraph``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...crf import CRF
from ...decode import Decoder, crf_decoder
from ...onnx_graphs import PaddedBiLSTM
from ...tokenization import WORD_VECTORS_FILE, WordBatch, WordHashing, words_to_bags
from ...vocabulary import RowIndex
from ..base import StudentConfig
from ..padded_lstm import bilstm
from ..word_vectors import HashedWordVectors, WordVectors


@dataclass
class BiLSTMCRFConfig(StudentConfig):
    """The BiLSTM-CRF's settings beyond every student's: a char CNN word feature (Ma & Hovy, 2016)
    and pretrained word vectors."""

    arch: str = "bilstm-crf"
    char_dim: int = 0  # byte embedding width of the char CNN feature (0: no char feature)
    char_filters: int = 0  # the char CNN's filters, the feature's width
    char_width: int = 3  # the char CNN's window
    # pretrained word vectors (students/word_vectors.py; --word-vectors): the table's words, width and
    # the bytes of its word list (0: no word vector feature)
    word_vectors_rows: int = 0
    word_vectors_dim: int = 0
    word_vectors_bytes: int = 0
    # a hashed word table instead (issue 83; --hash-rows): its rows, n-gram lengths and hashes a key
    # (tokenization.WordHashing; 0 rows: none), its width word_vectors_dim
    word_hash_rows: int = 0
    word_hash_minn: int = 3
    word_hash_maxn: int = 5
    word_hash_count: int = 2


class BagsCRFStudent(nn.Module):
    """What the students over word bags with a CRF share (this BiLSTM-CRF, ``cnn_crf.py``'s CNN-CRF):
    the teacher-id map and the ``EmbeddingBag``, the char CNN feature, their inputs, CRF decoding.
    A subclass builds its layers with ``_bag_embedding`` and ``_char_layers`` (in the order its
    parameters are drawn) and has an ``out`` layer."""

    # training only, so not in the student's config (the recipe sets it; --word-vectors-dropout)
    word_vectors_dropout: float = 0.0

    def _bag_embedding(self, config: BiLSTMCRFConfig) -> None:
        self.vocab = RowIndex(config.teacher_vocab_size)  # teacher ids -> rows (vocabulary.py)
        self.embed = nn.EmbeddingBag(config.vocab_size, config.embedding_dim, mode="mean")
        self.embed.weight.requires_grad_(not (config.embedding == "teacher" and config.freeze_embeddings))

    def _char_layers(self, config: BiLSTMCRFConfig) -> None:
        if config.char_filters:  # a char CNN word feature (Ma & Hovy, 2016), concatenated to the word vector
            self.char_embed = nn.Embedding(257, config.char_dim, padding_idx=0)  # bytes + 1; 0 pads
            self.char_conv = nn.Conv1d(
                config.char_dim, config.char_filters, config.char_width, padding=config.char_width // 2
            )

    def _word_vector_layer(self, config: BiLSTMCRFConfig) -> None:
        if config.word_hash_rows:
            hashing = WordHashing(
                config.word_hash_rows, config.word_hash_minn, config.word_hash_maxn, config.word_hash_count
            )
            self.word_vectors = HashedWordVectors(hashing, config.word_vectors_dim)
            return
        self.word_vectors = (
            WordVectors(config.word_vectors_rows, config.word_vectors_dim, config.word_vectors_bytes)
            if config.word_vectors_rows
            else None
        )

    def extra_features(self, x: Tensor, words: WordBatch) -> Tensor:
        """``x`` with the word vectors (if any) and the char feature (if any) concatenated, in that order."""
        if self.word_vectors is not None:
            x = torch.cat([x, self._dropped(self.word_vectors(words.word_ids))], -1)
        if self.config.char_filters:
            x = torch.cat([x, self.char_feature(words.char_ids)], -1)
        return x

    def _dropped(self, vectors: Tensor) -> Tensor:
        """In training, each word's vector zeroed with probability ``word_vectors_dropout``: the
        student then meets, in training, words the table lacks (row 0, zero), as test words are when
        the table was read from the training text (Lample et al. 2016 replace training words by the
        unknown word for the same reason). No draw at 0, so a run without it is unchanged."""
        p = self.word_vectors_dropout
        if not self.training or p <= 0:
            return vectors
        return vectors * (torch.rand(vectors.shape[:-1], device=vectors.device) >= p).unsqueeze(-1).to(vectors.dtype)

    def keep_word_vectors(self, rows: int) -> int:
        """Keep the first ``rows`` of the word vector table (its commonest words; ``distill-export
        --word-vectors-rows``); the words past them then read as unknown words, row 0, as they do
        in a student trained with ``--word-vectors-rows``. Returns the rows it had."""
        had = self.config.word_vectors_rows
        if isinstance(self.word_vectors, HashedWordVectors):
            raise ValueError("--word-vectors-rows: a hashed word table holds no word list; its size is --hash-rows")
        if self.word_vectors is None:
            raise ValueError(
                "--word-vectors-rows: the student has no word vectors (it was trained without --word-vectors)"
            )
        if not 0 < rows <= had:
            raise ValueError(f"--word-vectors-rows {rows}: give 1 to {had:,}, the student's rows (0: keep them all)")
        self.word_vectors = self.word_vectors.first(rows)
        self.config.word_vectors_rows = rows
        self.config.word_vectors_bytes = self.word_vectors.words.numel()
        return had

    def export_fields(self) -> dict:
        """export.json's fields of the ``bags`` graph's optional inputs: ``chars`` (``char_ids``) and
        ``word_vectors`` (``word_ids``, looked up in the word list the export writes beside the graph)."""
        fields: dict = {"chars": True} if self.config.char_filters else {}
        if isinstance(self.word_vectors, HashedWordVectors):  # the graph's table, no word list (format 5)
            fields["word_hashing"] = {**self.word_vectors.hashing.to_json(), "dim": self.config.word_vectors_dim}
        elif self.word_vectors is not None:
            fields["word_vectors"] = {
                "file": WORD_VECTORS_FILE,
                "rows": self.config.word_vectors_rows,
                "dim": self.config.word_vectors_dim,
                "lookup": "the word as written, else lowercased, else row 0 (tokenization.word_vector_rows)",
            }
        return fields

    @property
    def device(self) -> torch.device:
        return self.out.weight.device

    def bag_vectors(self, words: WordBatch) -> Tensor:
        """``[B, L, D]``: each word the mean of its subwords' embeddings."""
        B, L = words.mask.shape
        return self.embed(self.vocab(words.bag_ids), words.bag_offsets).view(B, L, -1)

    def char_feature(self, char_ids: Tensor) -> Tensor:
        """``[B, L, F]``: each word's bytes ``[B, L, C]`` embedded, convolved and max-pooled over
        its real bytes (Ma & Hovy, 2016, §2.1); 0 for padding words."""
        B, L, C = char_ids.shape
        ids = char_ids.reshape(B * L, C)
        h = self.char_conv(self.dropout(self.char_embed(ids)).transpose(1, 2))  # [B*L, F, C]
        pad = (ids == 0).unsqueeze(1)
        h = h.masked_fill(pad, -1e4).amax(-1)
        return torch.where(pad.all(-1), torch.zeros_like(h), h).reshape(B, L, -1)

    def inputs(self, tokenizer, batch_words: list[list[str]]) -> WordBatch:
        batch = words_to_bags(tokenizer, batch_words, chars=bool(self.config.char_filters))
        if self.word_vectors is not None:
            batch.word_ids = self.word_vectors.rows(batch_words)
        return batch

    @torch.no_grad()
    def decode(self, words: WordBatch) -> Tensor:
        return self.crf.decode(self(words), words.mask)

    def decoder(self) -> Decoder:
        return crf_decoder(self.config.schema, self.crf)


class BiLSTMCRF(BagsCRFStudent):
    arch = "bilstm-crf"
    config_class = BiLSTMCRFConfig

    def __init__(self, config: BiLSTMCRFConfig):
        super().__init__()
        self.config = config
        schema = config.schema
        self._bag_embedding(config)
        self.dropout = nn.Dropout(config.dropout)
        self._char_layers(config)
        self._word_vector_layer(config)
        self.lstm = nn.LSTM(
            config.embedding_dim + config.word_vectors_dim + config.char_filters,
            config.hidden_size,
            num_layers=config.num_layers,
            bidirectional=True,
            batch_first=True,
        )
        self.out = nn.Linear(2 * config.hidden_size, schema.num_tags)
        self.crf = CRF.from_schema(schema)

    def forward(self, words: WordBatch) -> Tensor:
        """Emission scores ``[B, L, T]``."""
        x = self.extra_features(self.bag_vectors(words), words)
        h = bilstm(self.lstm, self.dropout(x), words.mask.sum(1))
        return self.out(self.dropout(h))

    def export_graph(self) -> tuple[nn.Module, str, dict]:
        """The ONNX graph of the emissions, its inputs (``bags``) and its export.json fields."""
        return BagsGraph(self), "bags", self.export_fields()


class BagsGraph(nn.Module):
    """The BiLSTM-CRF's emissions ``[B, L, T]`` over padded word pieces: the mean of each word's
    subword embeddings (the ``EmbeddingBag``) as one product, the student's word vectors and char
    CNN feature when it has them (``BagsCRFStudent.extra_features``), the exact padded BiLSTM, linear.

    The optional inputs follow ``lengths`` in ``onnx_runtime.bag_inputs``' order: ``char_ids``,
    then ``word_ids`` (each word's row of the word vector table, looked up by the runtime), or for a
    hashed table ``word_ids`` and ``word_index`` (``tokenization.WordHashing.distinct_rows``)."""

    char_feature = BagsCRFStudent.char_feature  # the student's own code, no second copy

    def __init__(self, model: BiLSTMCRF):
        super().__init__()
        self.vocab, self.embed, self.lstm, self.out = model.vocab, model.embed, PaddedBiLSTM(model.lstm), model.out
        self.optional_features(model)

    def optional_features(self, model: BagsCRFStudent) -> None:
        """The student's char CNN and word vector table, when it has them (registered after the other
        layers, in the order that keeps a graph's initializers, and so its bytes, as they were before
        word vectors had an export)."""
        self.chars = bool(model.config.char_filters)
        if self.chars:
            self.char_embed, self.char_conv = model.char_embed, model.char_conv
        self.dropout = model.dropout  # the char CNN's; off in an exported (eval) graph
        self.hashed = isinstance(model.word_vectors, HashedWordVectors)  # its own mean over a word's rows
        self.word_table = (
            model.word_vectors if self.hashed else model.word_vectors.embed if model.word_vectors is not None else None
        )

    def words(self, piece_ids: Tensor, piece_mask: Tensor) -> Tensor:
        weights = piece_mask / piece_mask.sum(2, keepdim=True).clamp(min=1.0)  # [B, L, P]: 1/n on a word's n pieces
        e = nn.functional.embedding(self.vocab(piece_ids), self.embed.weight)  # [B, L, P, D]
        return (weights.unsqueeze(2) @ e).squeeze(2)

    def features(self, x: Tensor, extra: tuple[Tensor, ...]) -> Tensor:
        """``x`` with the word vectors and the char feature, in ``extra_features``' order, from the
        graph's optional inputs (``char_ids``, then ``word_ids`` and, for a hashed table, ``word_index``)."""
        char_ids = extra[0] if self.chars else None
        if self.hashed:  # each distinct word's mean once (word_ids [U + 1, K]), then each word's (word_index [B, L])
            x = torch.cat([x, nn.functional.embedding(extra[-1], self.word_table(extra[-2]))], -1)
        elif self.word_table is not None:
            x = torch.cat([x, self.word_table(extra[-1])], -1)
        if char_ids is not None:
            x = torch.cat([x, self.char_feature(char_ids)], -1)
        return x

    def forward(self, piece_ids: Tensor, piece_mask: Tensor, lengths: Tensor, *extra: Tensor) -> Tensor:
        return self.out(self.lstm(self.features(self.words(piece_ids, piece_mask), extra), lengths))


ARCH = BiLSTMCRF
