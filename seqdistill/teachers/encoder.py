"""Encoder teachers: a Hugging Face encoder with a tagging head, run on batches of words.

:class:`Teacher` is what the encoder kinds share (``kinds/crf.py``, ``kinds/softmax.py``,
``kinds/bilou_per_type.py`` each subclass it with their head, and :class:`EncoderKind` builds and
loads them). All return word-level outputs (first-subword pooling by default, mean selectable), on request the
subword-level outputs with their word ids, and the hidden states of chosen layers (layer 0 is the
embedding output, layer i the output of encoder block i).

A teacher directory is self-contained: the encoder's ``config.json`` + ``model.safetensors``, the
tokenizer files, ``head.safetensors`` (linear and CRF) and ``teacher.json`` (kind, label schema,
pooling, maximum length). ``load_teacher(DIR)`` (``loading.py``) restores it without the training
code, and never runs remote code unless ``trust_remote_code=True`` is passed explicitly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ..cache_schema import LabelSchema
from ..decode import Decoder, argmax_decoder
from ..onnx_graphs import SegmentsGraph
from ..tokenization import SegmentBatch, WordTokenizer
from ..vocabulary import EMBEDDINGS_EXPORT, UNSEEN_RULE, save_tokenizer, with_unk_row
from .base import (
    HEAD_FILE,
    TeacherError,
    TeacherOutput,
    inference_autocast,
    teacher_fingerprints,
    write_teacher_json,
)
from .kind import TeacherKind
from .pretrained import base_record, from_pretrained, save_model


class Teacher(nn.Module):
    """Encoder + dropout + linear over words; subclasses add the CRF or nothing."""

    kind = "softmax"

    def __init__(
        self,
        encoder: nn.Module,
        tokenizer,
        schema: LabelSchema,
        *,
        pooling: str = "first",
        dropout: float = 0.5,
        max_length: int | None = None,
    ):
        super().__init__()
        self.encoder, self.tokenizer, self.schema = encoder, tokenizer, schema
        self.pooling, self.dropout_p = pooling, dropout
        self.max_length = max_length or _encoder_max_length(encoder, tokenizer)
        self.words = WordTokenizer(tokenizer, self.max_length, pooling)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, schema.num_tags)
        self.source_dir: Path | None = None
        self.base: dict | None = None  # the GGUF file it was built from (pretrained.py)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @property
    def num_layers(self) -> int:
        return int(self.encoder.config.num_hidden_layers)

    # -- forward --------------------------------------------------------------------------------
    def autocast(self, precision: str | None = "auto"):
        return inference_autocast(self.device, precision)

    def prepare(self, batch_words: list[list[str]]) -> SegmentBatch:
        """The host side of a batch, which the build runs ahead of the device in worker threads
        (and pins for a GPU): the words tokenized into segments (``tokenization.py``).
        ``encode(words, segments=...)`` takes it."""
        return self.words(batch_words)

    def encode(
        self,
        batch_words: list[list[str]],
        hidden_layers=(),
        subwords: bool = False,
        segments: SegmentBatch | None = None,
    ) -> TeacherOutput:
        """Run the encoder and the linear head on a batch of sentences (``segments``: the batch
        :meth:`prepare` made, if it was made ahead)."""
        for layer in hidden_layers:
            if not 0 <= layer <= self.num_layers:
                raise TeacherError(
                    f"hidden layer {layer} does not exist: the encoder has layers 0..{self.num_layers} (0 = embeddings)"
                )
        seg = segments if segments is not None else self.words(batch_words)
        seg = seg.to(self.device, non_blocking=True)
        out = self.encoder(
            input_ids=seg.input_ids,
            attention_mask=seg.attention_mask,
            output_hidden_states=bool(hidden_layers),
            return_dict=True,
        )
        tokens = out.last_hidden_state
        words = seg.pool(tokens)
        logits = self.classifier(self.dropout(words))
        result = TeacherOutput(seg.word_mask, logits, shortest=seg.shortest)
        for layer in hidden_layers:  # the last layer's states are pooled once
            states = out.hidden_states[layer]
            result.hidden[layer] = words if states is tokens else seg.pool(states)
        if subwords:
            result.subword_logits = self.classifier(self.dropout(seg.subwords(tokens)))
            result.subword_word_ids = seg.subword_word_ids
            result.subword_ids = seg.input_ids.reshape(-1)[seg.subword_index.clamp(min=0)]
            for layer in hidden_layers:
                result.subword_hidden[layer] = seg.subwords(out.hidden_states[layer])
        return result

    def loss(self, batch_words: list[list[str]], tags: Tensor) -> Tensor:
        """Training loss on gold tag ids ``[B, W]`` (-1 on padding): token cross-entropy."""
        out = self.encode(batch_words)
        return nn.functional.cross_entropy(out.logits[out.word_mask], tags.to(self.device)[out.word_mask])

    @torch.no_grad()
    def predict(self, batch_words: list[list[str]]) -> list[list[str]]:
        """Best tag sequence of each sentence."""
        out = self.encode(batch_words)
        ids = self.decode(out)
        return [self.schema.decode(ids[b, : len(w)].tolist()) for b, w in enumerate(batch_words)]

    def decode(self, out: TeacherOutput) -> Tensor:
        return out.logits.argmax(-1)

    def outputs(
        self,
        batch_words,
        tags: Tensor | None = None,
        *,
        k: int = 10,
        marginals: bool = True,
        hidden_layers=(),
        subwords: bool = False,
        precision: str | None = "auto",
        prepared: SegmentBatch | None = None,
    ) -> TeacherOutput:
        """Everything a cache stores for this teacher kind (inference mode; the encoder under
        ``precision`` autocast, ``base.resolve_precision``; the emissions cast to fp32, so the CRF
        always runs in fp32). ``prepared``: what :meth:`prepare` made of ``batch_words`` ahead of time."""
        with torch.inference_mode():
            with self.autocast(precision):
                out = self.encode(batch_words, hidden_layers, subwords, prepared)
            out.logits = out.logits.float()
            self.add_structure(out, k, marginals)
            if tags is not None:
                out.gold_nll = self.gold_nll(out, tags)
            return out

    def add_structure(self, out: TeacherOutput, k: int, marginals: bool) -> None:
        """What this kind adds to ``out`` beyond the encoder's (k-best paths, marginals): nothing here."""

    def gold_nll(self, out: TeacherOutput, tags: Tensor) -> Tensor:
        """Per-sentence NLL of the gold tags under the factorised softmax model."""
        tags = tags.to(self.device, non_blocking=True)
        logp = torch.log_softmax(out.logits.float(), -1).gather(2, tags.clamp(min=0).unsqueeze(2)).squeeze(2)
        return -(logp * (out.word_mask & (tags >= 0))).sum(1)

    # -- decoding and export ----------------------------------------------------------------------
    def decoder(self) -> Decoder | None:
        """The numpy decoder of this teacher's word scores (``seqdistill.decode``): the argmax here;
        None for a teacher that decodes itself."""
        return argmax_decoder(self.schema)

    def export_graph(self) -> tuple[nn.Module, str, dict]:
        """The ONNX graph ``distill-export`` traces: the encoder and the linear head over the
        teacher's own segments (token scores, pooled to words in numpy), its inputs and the fields
        its export.json adds."""
        fields = {"framing": "teacher", "max_length": self.max_length, "pooling": self.pooling}
        return SegmentsGraph(self.encoder, self.classifier), "segments", fields

    def export_head(self, directory: Path) -> None:
        """What a student needs of this kind's head beyond the embeddings (``export_for_students``):
        nothing here."""

    # -- identity -------------------------------------------------------------------------------
    def fingerprints(self) -> dict[str, str]:
        """sha256 of the weight files and of the tokenizer files of the teacher directory."""
        if self.source_dir is None:
            raise TeacherError("this teacher was not loaded from a directory: save it first")
        return teacher_fingerprints(self.source_dir)

    # -- persistence ----------------------------------------------------------------------------
    def head_state(self) -> dict[str, Tensor]:
        return {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}

    def save(self, directory) -> Path:
        """Write a self-contained teacher directory."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        save_model(self.encoder, d)
        self.tokenizer.save_pretrained(d)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head_state().items()}, str(d / HEAD_FILE))
        base = {"base": self.base} if self.base else {}
        write_teacher_json(
            d, self.kind, self.schema, pooling=self.pooling, dropout=self.dropout_p, max_length=self.max_length, **base
        )
        self.source_dir = d
        return d


def build_encoder_teacher(
    cls: type[Teacher],
    encoder_path: str,
    schema: LabelSchema,
    *,
    pooling: str = "first",
    dropout: float = 0.5,
    max_length: int | None = None,
    trust_remote_code: bool = False,
    seed: int = 13,
) -> Teacher:
    """A new encoder teacher of class ``cls`` (head initialised at random) over a pretrained encoder:
    a local directory, a hub name or a GGUF file (``pretrained.py``)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = from_pretrained(AutoTokenizer, encoder_path, trust_remote_code=trust_remote_code)
    encoder = from_pretrained(AutoModel, encoder_path, trust_remote_code=trust_remote_code)
    torch.manual_seed(seed)
    teacher = cls(encoder, tokenizer, schema, pooling=pooling, dropout=dropout, max_length=max_length)
    teacher.base = base_record(encoder_path)
    return teacher


def load_encoder_teacher(cls: type[Teacher], d: Path, meta: dict, trust_remote_code: bool = False) -> Teacher:
    """The encoder teacher of class ``cls`` a directory written by :meth:`Teacher.save` holds
    (``meta``: its ``teacher.json``)."""
    from transformers import AutoModel, AutoTokenizer

    schema = LabelSchema.from_json(meta["label_schema"])
    tokenizer = AutoTokenizer.from_pretrained(d, trust_remote_code=trust_remote_code)
    encoder = AutoModel.from_pretrained(d, trust_remote_code=trust_remote_code)
    teacher = cls(
        encoder,
        tokenizer,
        schema,
        pooling=meta.get("pooling", "first"),
        dropout=meta.get("dropout", 0.5),
        max_length=meta.get("max_length"),
    )
    teacher.base = meta.get("base")
    head = load_file(str(d / HEAD_FILE))
    missing = set(teacher.head_state()) - set(head)
    if missing:
        raise TeacherError(f"{d / HEAD_FILE}: missing tensors {sorted(missing)}")
    with torch.no_grad():
        for name, value in teacher.head_state().items():
            value.copy_(head[name])
    return teacher


def _encoder_max_length(encoder, tokenizer) -> int:
    positions = getattr(encoder.config, "max_position_embeddings", None) or 512
    # models with learned offsets (RoBERTa, MPNet) reserve pad_token_id + 1 positions
    if getattr(encoder.config, "model_type", "") in ("roberta", "mpnet", "xlm-roberta", "camembert"):
        positions -= (encoder.config.pad_token_id or 0) + 1
    limit = getattr(tokenizer, "model_max_length", None) or positions
    return int(min(positions, limit if limit < 1e9 else positions))


def export_for_students(
    teacher: Teacher,
    directory,
    encoder_layers: int = 0,
    kept=None,
    vocabulary_text: list[dict] | None = None,
    how: dict | None = None,
    trimmed_dtype: torch.dtype = torch.float16,
) -> None:
    """Write what a student needs from the teacher, so that training never loads the teacher:

    * ``tokenizer/`` — the tokenizer files;
    * ``embeddings.safetensors`` — the input embedding matrix (``weight``, ``[vocab, hidden]``, fp32),
      or, with ``kept`` (sorted subword ids, ``vocabulary.choose_rows``), only those rows in
      ``trimmed_dtype`` (the cache's ``--dtype``, fp16 by default, as its other large fields: a
      trimmed vocabulary is the large-matrix case, where bytes matter), with
      ``ids`` beside them and the whole matrix's row count in the metadata (``rows``), and the
      files of ``build --vocabulary-text`` that widened the set (``vocabulary_text``: JSON, each
      file's name, sha256 and sentence count) and how the rows were chosen (``how``: JSON,
      ``vocabulary.KeptRows.metadata``);
    * ``label_schema.json``; ``encoder_config.json`` — the teacher encoder's config;
    * what the teacher's kind adds (``export_head``): a CRF teacher's ``crf.safetensors``, its
      ``transitions``, ``start``, ``end`` as used (-inf where forbidden);
    * ``encoder_<N>/`` — on request, a Hugging Face model directory with the embeddings and the first
      N blocks of the encoder (papers 000 and 002 initialise transformer students from them).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    save_tokenizer(teacher.tokenizer, d / "tokenizer")
    emb = teacher.encoder.get_input_embeddings().weight.detach().float().cpu()
    if kept is None:
        save_file({"weight": emb.contiguous()}, str(d / EMBEDDINGS_EXPORT))
    else:
        ids = torch.as_tensor(kept, dtype=torch.long)
        meta = {"rows": str(emb.shape[0]), "unseen": UNSEEN_RULE}
        if vocabulary_text:
            meta["vocabulary_text"] = json.dumps(vocabulary_text)
        if how:
            meta["vocabulary"] = json.dumps(how)
        weight = emb[ids].to(trimmed_dtype).contiguous()
        save_file({"weight": weight, "ids": ids}, str(d / EMBEDDINGS_EXPORT), metadata=meta)
    (d / "label_schema.json").write_text(json.dumps(teacher.schema.to_json(), indent=1) + "\n")
    (d / "encoder_config.json").write_text(teacher.encoder.config.to_json_string())
    teacher.export_head(d)
    if encoder_layers:
        _export_first_layers(teacher, d / f"encoder_{encoder_layers}", encoder_layers, kept)


def _export_first_layers(teacher: Teacher, directory: Path, n: int, kept=None) -> None:
    """The embeddings and first ``n`` blocks as a Hugging Face model directory; with ``kept``, its
    word embeddings are the kept rows and the UNK row (``vocabulary.with_unk_row``) and its config's
    ``vocab_size`` (and ``pad_token_id``) count rows, not teacher ids."""
    from transformers import AutoModel

    if not 0 < n <= teacher.num_layers:
        raise TeacherError(f"cannot export {n} encoder layers: the teacher has {teacher.num_layers}")
    config = teacher.encoder.config.__class__.from_dict(teacher.encoder.config.to_dict())
    config.num_hidden_layers = n
    if getattr(config, "layer_types", None):  # Gemma 3: each layer's attention (sliding or full), cut with them
        config.layer_types = list(config.layer_types[:n])
    state = dict(teacher.encoder.state_dict())
    if kept is not None:
        ids = torch.as_tensor(kept, dtype=torch.long)
        emb = teacher.encoder.get_input_embeddings().weight
        name = next(k for k, p in teacher.encoder.named_parameters() if p is emb)
        state[name] = with_unk_row(state[name][ids])
        pad = getattr(config, "pad_token_id", None)
        config.vocab_size = ids.numel() + 1
        if pad is not None:  # the pad token is special, so kept: its row
            config.pad_token_id = int(torch.searchsorted(ids, torch.tensor(pad)))
    small = AutoModel.from_config(config)
    state = {k: v for k, v in state.items() if k in small.state_dict()}
    missing = set(small.state_dict()) - set(state)
    if missing:
        raise TeacherError(f"cannot cut the encoder to {n} layers: no weights for {sorted(missing)[:3]}")
    small.load_state_dict(state)
    small.save_pretrained(directory, safe_serialization=True)
    teacher.tokenizer.save_pretrained(directory)


class EncoderKind(TeacherKind):
    """A kind whose teachers are a :class:`Teacher` subclass over a pretrained encoder."""

    def build(self, encoder_path, schema, *, trust_remote_code=False, seed=13, **head):
        return build_encoder_teacher(
            self.model, encoder_path, schema, trust_remote_code=trust_remote_code, seed=seed, **head
        )

    def load(self, directory, meta, trust_remote_code=False):
        return load_encoder_teacher(self.model, Path(directory), meta, trust_remote_code)
