"""A small transformer student (issue 8): the first K blocks of a teacher's encoder and its
embeddings (paper 002 §3.1, paper 000's "BP" initialisation), or the same architecture from
scratch, with a token-classification or CRF head over words.

    words -> the teacher's subwords -> [CLS] subwords [SEP] -> K encoder blocks
          -> first subword of each word -> dropout -> linear (-> CRF)

Decisions, named here:

* The encoder is rebuilt from the config the build exported (``encoder_config.json``, the teacher's,
  with ``num_hidden_layers = K``); its weights come from the cache's ``encoder_K/`` export (``distill-
  cache build --export-layers K``) with ``init="teacher"``, or stay random with ``init="scratch"``.
  No remote code: ``AutoModel.from_config`` of a config in the cache.
* Words are pooled from their first subword, as the teachers of this project pool theirs, so the
  student's word outputs and hidden states line up with the teachers' in the cache.
* Sentences longer than the encoder's positions are cut into overlapping windows of
  ``max_positions - 2`` subwords (stride half a window), each run with its own [CLS]/[SEP]; each
  subword takes its states from the window where it has the most context on its poorer side
  (``encoding.subword_windows``, the teachers' rule). A batch whose sentences all fit runs one
  window each, of the batch's own length (CoNLL sentences fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from ...crf import CRF
from ...decode import Decoder, argmax_decoder, crf_decoder
from ...onnx_graphs import SegmentsGraph
from ...tokenization import SubwordBatch, subword_windows, words_to_subwords
from ...vocabulary import EMBEDDINGS_EXPORT, RowIndex, read_kept
from ..base import StudentConfig

HEADS = ("crf", "softmax")


def encoder_from_config(encoder_config: dict):
    from transformers import AutoConfig, AutoModel

    config = dict(encoder_config)
    model_type = config.pop("model_type")
    return AutoModel.from_config(AutoConfig.for_model(model_type, **config))


@dataclass
class TransformerConfig(StudentConfig):
    """The transformer student's settings beyond every student's: its head and its encoder."""

    arch: str = "transformer"
    head: str = "crf"  # crf | softmax
    encoder_config: dict = field(default_factory=dict)  # its K-layer encoder's Hugging Face config


class TransformerTagger(nn.Module):
    arch = "transformer"
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig, export_dir=None):
        """``export_dir``: a teacher layer's exports, whose kept subword ids a trimmed student maps
        (``vocabulary.py``); None when loading a saved student (its map is in its weights)."""
        super().__init__()
        if config.head not in HEADS:
            raise ValueError(f"head {config.head!r} is not one of {HEADS}")
        self.config = config
        self.vocab = RowIndex(config.teacher_vocab_size)  # teacher ids -> rows (vocabulary.py)
        if self.vocab.trimmed and export_dir is not None:
            self.vocab.fill(read_kept(Path(export_dir) / EMBEDDINGS_EXPORT)[0])
        self.encoder = encoder_from_config(config.encoder_config)
        hidden = self.encoder.config.hidden_size
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(hidden, config.schema.num_tags)
        self.crf = CRF.from_schema(config.schema) if config.head == "crf" else None
        self.cls = config.extra.get("cls_token_id", 0)
        self.sep = config.extra.get("sep_token_id", 0)
        self.window = int(getattr(self.encoder.config, "max_position_embeddings", 512)) - 2

    @property
    def device(self) -> torch.device:
        return self.out.weight.device

    @property
    def num_layers(self) -> int:
        return int(self.encoder.config.num_hidden_layers)

    @staticmethod
    def inputs(tokenizer, batch_words: list[list[str]]) -> SubwordBatch:
        return words_to_subwords(tokenizer, batch_words)

    def encode(self, x: SubwordBatch) -> list[Tensor]:
        """Word-level hidden states of every layer: ``[embeddings, block 1, ..., block K]``, each
        ``[B, L, hidden]``."""
        B, S = x.ids.shape
        if S > self.window:
            return self._encode_overlapping(x)
        w = min(self.window, S)  # one window of the batch's own length when it fits
        n = max(1, -(-S // w))
        ids = nn.functional.pad(x.ids, (0, n * w - S)).view(B * n, w)
        mask = nn.functional.pad(x.mask, (0, n * w - S)).view(B * n, w)
        keep = mask.any(1)  # windows past a sentence's end are not run
        ids, mask = ids[keep], mask[keep]
        layers = []
        for h in self._run_windows(ids, mask.sum(1)):
            per_window = h.new_zeros(B * n, w, h.shape[-1])
            per_window[keep] = h[:, 1 : w + 1]
            sub = per_window.view(B, n * w, -1)[:, :S]
            layers.append(x.first_subword(sub))
        return layers

    def _encode_overlapping(self, x: SubwordBatch) -> list[Tensor]:
        """``encode`` for a batch with a sentence longer than a window: every sentence's windows
        (``subword_windows``) in one encoder call, each subword's states from its owning window."""
        B, S = x.ids.shape
        w, dev = self.window, x.ids.device
        lengths = x.mask.sum(1).tolist()
        row_sentence, row_start = [], []
        owner_row = torch.zeros(B, S, dtype=torch.long)
        owner_col = torch.zeros(B, S, dtype=torch.long)
        for b, n in enumerate(lengths):
            if not n:
                continue
            starts, owner = subword_windows(n, w)
            owner_row[b, :n] = torch.from_numpy(owner) + len(row_sentence)
            owner_col[b, :n] = torch.arange(n) - torch.from_numpy(starts[owner])
            row_sentence += [b] * len(starts)
            row_start += starts.tolist()
        sentence = torch.tensor(row_sentence)
        positions = torch.tensor(row_start)[:, None] + torch.arange(w)[None]  # [R, w]
        valid = positions < torch.tensor(lengths)[sentence][:, None]
        ids = x.ids[sentence[:, None].to(dev), positions.clamp(max=S - 1).to(dev)].masked_fill(~valid.to(dev), 0)
        hidden = self._run_windows(ids, valid.sum(1).to(dev))
        row, col = owner_row.to(dev), owner_col.to(dev) + 1  # + 1: past [CLS]
        keep = x.mask[..., None].to(hidden[0].dtype)
        return [x.first_subword(h[row, col] * keep) for h in hidden]

    def _run_windows(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, ...]:
        """The encoder's hidden states of every layer over windows ``ids [R, w]`` (``lengths``
        real subwords each), each framed as [CLS] subwords [SEP]: ``[R, w + 2, hidden]`` each."""
        R, w = ids.shape
        full = torch.zeros(R, w + 2, dtype=ids.dtype, device=ids.device)
        full[:, 0] = self.cls
        full[:, 1 : w + 1] = ids
        full[torch.arange(R, device=ids.device), lengths + 1] = self.sep
        attention = torch.arange(w + 2, device=ids.device)[None] < (lengths + 2)[:, None]
        out = self.encoder(
            input_ids=self.vocab(full), attention_mask=attention.long(), output_hidden_states=True, return_dict=True
        )
        return out.hidden_states

    def forward(self, x: SubwordBatch) -> Tensor:
        """Word emissions (CRF head) or logits (softmax head), ``[B, L, T]``."""
        return self.out(self.dropout(self.encode(x)[-1]))

    @torch.no_grad()
    def decode(self, x: SubwordBatch) -> Tensor:
        scores = self(x)
        if self.crf is not None:
            return self.crf.decode(scores, x.word_mask)
        return scores.argmax(-1).masked_fill(~x.word_mask, -1)

    def decoder(self) -> Decoder:
        return argmax_decoder(self.config.schema) if self.crf is None else crf_decoder(self.config.schema, self.crf)

    def export_graph(self) -> tuple[nn.Module, str, dict]:
        """The encoder and its linear head over [CLS]/[SEP]-framed windows (``segments`` inputs):
        token scores, pooled to words in numpy."""
        fields = {"framing": "windows", "window": self.window, "cls_token_id": self.cls, "sep_token_id": self.sep}
        encoder = RowsThenEncoder(self.vocab, self.encoder) if self.vocab.trimmed else self.encoder
        return SegmentsGraph(encoder, self.out), "segments", fields


class RowsThenEncoder(nn.Module):
    """A trimmed student's encoder for ONNX: teacher ids to rows (``RowIndex``), then the encoder."""

    def __init__(self, vocab: RowIndex, encoder: nn.Module):
        super().__init__()
        self.vocab, self.encoder = vocab, encoder

    @property
    def config(self):
        return self.encoder.config

    def forward(self, input_ids: Tensor, attention_mask):
        return self.encoder(input_ids=self.vocab(input_ids), attention_mask=attention_mask)


def transformer_config(
    schema_json: dict,
    export_dir,
    layers: int,
    tokenizer,
    *,
    head: str = "crf",
    dropout: float = 0.1,
    extra: dict | None = None,
) -> TransformerConfig:
    """The student's config from a teacher layer's exports: its encoder config cut to ``layers``; over
    a trimmed vocabulary (``vocabulary.py``) its ``vocab_size`` and ``pad_token_id`` count the kept
    rows and the UNK row, as in the exported ``encoder_K/``."""
    import json

    encoder_config = json.loads((Path(export_dir) / "encoder_config.json").read_text())
    ids, rows = read_kept(Path(export_dir) / EMBEDDINGS_EXPORT)
    if ids is not None:
        encoder_config["vocab_size"] = ids.numel() + 1
        if encoder_config.get("pad_token_id") is not None:
            encoder_config["pad_token_id"] = int(torch.searchsorted(ids, torch.tensor(encoder_config["pad_token_id"])))
    teacher_layers = int(encoder_config.get("num_hidden_layers", 0))
    if not 0 < layers <= teacher_layers:
        raise ValueError(f"a {layers}-layer student cannot start from a {teacher_layers}-layer teacher")
    encoder_config["num_hidden_layers"] = layers
    if encoder_config.get("layer_types"):  # Gemma 3: each layer's attention (sliding or full), cut with them
        encoder_config["layer_types"] = encoder_config["layer_types"][:layers]
    tokens = {
        "cls_token_id": tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id,
        "sep_token_id": tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id,
    }
    missing = [k for k, v in tokens.items() if v is None]
    if missing:
        raise ValueError(
            f"the teacher's tokenizer in {export_dir} has no {' or '.join(missing)} (nor BOS/EOS) to "
            "frame a sentence for the transformer student"
        )
    return TransformerConfig(
        schema_json,
        int(encoder_config.get("vocab_size", 0)),
        int(encoder_config["hidden_size"]),
        embedding="teacher",
        freeze_embeddings=False,
        hidden_size=int(encoder_config["hidden_size"]),
        num_layers=layers,
        dropout=dropout,
        arch="transformer",
        head=head,
        encoder_config=encoder_config,
        extra={**tokens, **(extra or {})},
        teacher_vocab_size=rows,
    )


def init_from_teacher(model: TransformerTagger, export_dir) -> None:
    """Load the embeddings and first K blocks that the build exported (``encoder_K/``)."""
    d = Path(export_dir) / f"encoder_{model.num_layers}"
    if not (d / "model.safetensors").exists():
        raise ValueError(
            f"the cache has no {d.name}/ export of the teacher's first {model.num_layers} layers: "
            f"build with `distill-cache build ... --export-layers {model.num_layers}`, or start the "
            "student from scratch"
        )
    state = load_file(str(d / "model.safetensors"))
    own = model.encoder.state_dict()
    missing = [k for k in own if k not in state]
    if missing:
        raise ValueError(f"{d}: no weights for {missing[:3]}")
    model.encoder.load_state_dict({k: state[k] for k in own})


ARCH = TransformerTagger
