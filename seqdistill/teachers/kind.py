"""What a teacher kind declares: :class:`TeacherKind`, the one object per kind that the build,
fine-tuning, loading, the CLI and export read (each kind is a module of ``kinds/``, found by the
registry there; docs/ARCHITECTURE.md shows how one is added).

A kind carries the name its teachers carry (``Teacher.kind``, ``teacher.json``, the manifest's
teacher ``kind``). On the model side it declares its model class, how a new teacher is built over
a pretrained model and how a saved one is loaded, its line of ``--head`` help, the tag scheme its
teachers train in and the fine-tuning defaults of its paper; the model class itself declares its
loss, its decoder (``decoder()``) and its ONNX graph (``export_graph()``). On the cache side it
declares

* the build options it refuses (:meth:`~TeacherKind.refusal`) and its default K;
* the decoding settings the manifest records (:meth:`~TeacherKind.decoding`);
* the fields of its layer (:meth:`~TeacherKind.fields`) and how the outputs of a batch become the
  columns of a shard (:meth:`~TeacherKind.shard_columns`), which agree field for field
  (tests/test_teacher_kinds.py checks it for every kind);
* the gold targets whose NLL its teachers compute (:meth:`~TeacherKind.gold_targets`).

``pipeline/build.py`` calls these and never switches on a kind's name. The fields any kind may
add on request (gold NLL, hidden layers, subword outputs) are handled here once; a subclass
declares only its own (:meth:`~TeacherKind.own_fields`, :meth:`~TeacherKind.own_values`).
docs/cache-format.md gives every field's meaning.

Decisions: the cache side loads no weights, so that what a kind writes can be read and tested
without a teacher. The build's settings come in as :class:`LayerOptions`, plain values, because the
build config belongs to stage one (``pipeline``), which teachers never import.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..cache_schema import FieldSpec, LabelSchema
from .base import TeacherError, TeacherOutput


@dataclass(frozen=True)
class SpanOptions:
    """How a span teacher's scores are read (issue 71; ``semicrf.py``): the entity types it is asked
    for and the semi-CRF's parameters, ``phi = (l + b) / T`` with ``b = -logit(threshold)``."""

    entity_types: tuple[tuple[str, str], ...]  # (name the model reads, tag the cache writes)
    threshold: float = 0.5  # GLiNER's own default threshold: b = 0
    temperature: float = 1.0
    max_width: int = 0  # words of the widest span: the model's, filled in when its directory is read

    @property
    def bias(self) -> float:
        return math.log((1.0 - self.threshold) / self.threshold)

    def to_json(self) -> dict:
        return {
            "entity_types": {name: tag for name, tag in self.entity_types},
            "threshold": self.threshold,
            "bias": self.bias,
            "temperature": self.temperature,
            "max_width": self.max_width,
        }


@dataclass(frozen=True)
class LayerOptions:
    """What a build asks of a teacher's layer."""

    k: int  # paths kept per sentence, by the kinds that decode paths
    marginals: bool = True  # CRF posterior marginals
    hidden_layers: tuple[int, ...] = ()  # encoder layers whose hidden states are stored (0 = embeddings)
    subwords: bool = False  # subword-level outputs beside the word-level ones
    dense_dtype: str = "float16"  # stored dtype of the large float fields (a cache_schema dtype)
    hidden_int8: bool = False  # hidden states as int8 with a per-word absmax scale (encodings.py)
    hidden_project: int = 0  # hidden states as N PCA coefficients (0: the full states)
    word_topk: int = 0  # per-word tag distributions as their top N values and indices (0: dense)
    span: SpanOptions | None = None  # a span teacher's types and semi-CRF (--entity-types)


PROJECTION_EXPORT = "projection.safetensors"  # the layer's PCA components and means (exports)


def hidden_spec(name: str, level: str, hidden_size: int, options: LayerOptions, description: str = "") -> FieldSpec:
    """A hidden-state field as ``options`` store it: fp16/bf16/fp32, int8 with scales, and/or PCA
    coefficients (the stored space is what readers return; encodings.py)."""
    encoding: dict = {}
    if options.hidden_int8:
        encoding["quantize"] = "int8-absmax"
    if options.hidden_project:
        encoding.update(project_from=hidden_size, project_export=PROJECTION_EXPORT)
    dim = options.hidden_project or hidden_size
    dtype = "int8" if options.hidden_int8 else options.dense_dtype
    return FieldSpec(name, level, dtype, (dim,), "zarr", description=description, encoding=encoding)


class TeacherKind(ABC):
    """One teacher kind. A subclass names the kind, its model class and help line, and declares its
    own cache fields and their values; the rest has defaults that suit an encoder kind decoding no
    paths."""

    name: str
    model: type  # the teacher class (its ``kind`` attribute is ``name``)
    help: str  # one line of ``finetune-teacher --head`` help
    target_scheme: str | None = None  # the tag scheme its teachers train in (None: the corpus's)
    finetune_defaults: dict = {}  # FinetuneConfig values of its paper, over paper 000's
    layerwise_lr = True  # fine-tune with layer-wise decayed rates (paper 000, §3.1), else one rate
    co_finetune = True  # may be co-fine-tuned under one shared head (paper 002)
    default_k = 10  # paths per sentence when the build does not say (paper 000: K = 10 for a CRF)
    finetunable = True  # offered by finetune-teacher --head
    # A file that marks a directory in the model's own format (no teacher.json): such a directory is
    # read by read_directory and load_directory, with the build's options (a GLiNER's entity types)
    marker: str | None = None
    # Per-word tag distributions that --word-topk stores sparsely, with the rule that rebuilds the
    # tags left out (encodings.py): probabilities spread their residual mass, scores keep the row's
    # log-mean-exp. Other per-word fields (SenTScore tag scores, nested type logits) stay dense.
    topk_fills = {
        "emissions": "logmeanexp",
        "marginals": "residual",
        "logits": "logmeanexp",
        "subword_logits": "logmeanexp",
    }

    # -- the model side ---------------------------------------------------------------------------
    @abstractmethod
    def build(self, encoder_path: str, schema: LabelSchema, *, trust_remote_code: bool = False, seed: int = 13, **head):
        """A new teacher of this kind (its head initialised at random) over a pretrained model, a
        local directory or a hub name; ``head``: pooling, dropout, max_length (encoder kinds)."""

    @abstractmethod
    def load(self, directory, meta: dict, trust_remote_code: bool = False):
        """The teacher a directory written by its ``save`` holds (``meta``: its teacher.json)."""

    def read_directory(self, directory, options: "LayerOptions", trust_remote_code: bool = False):
        """``(label schema, pooling, decoding settings, options)`` of a directory marked by
        :attr:`marker`, without loading its weights (the options completed from its config)."""
        raise TeacherError(f"{directory}: teacher kind {self.name!r} reads no directory of its own format")

    def load_directory(self, directory, options: "LayerOptions", trust_remote_code: bool = False):
        """The teacher a directory marked by :attr:`marker` holds, read as ``options`` ask."""
        raise TeacherError(f"{directory}: teacher kind {self.name!r} reads no directory of its own format")

    def hidden_size(self, directory) -> int:
        """The width of the hidden states a teacher directory's model gives, from its config (no
        weights loaded): ``config.json``'s, an EncoderDecoderModel's encoder's."""
        import json
        from pathlib import Path

        config = json.loads((Path(directory) / "config.json").read_text())
        config = config.get("encoder", config)  # an EncoderDecoderModel keeps the encoder's config apart
        return int(config.get("hidden_size") or config.get("d_model"))

    # -- the cache side ---------------------------------------------------------------------------
    def refusal(self, options: LayerOptions) -> str | None:
        """Why this kind cannot write a layer with ``options`` (naming what to leave out), or None."""
        return None

    def decoding(self, options: LayerOptions, scheme: str, precision: str) -> dict:
        """The decoding settings the manifest records for the layer (``precision``: of the run)."""
        return {"precision": precision}

    def gold_targets(self, rows: list[dict], schema: LabelSchema) -> Tensor | None:
        """What the teacher's ``outputs(words, tags)`` scores for the gold NLL of a batch of example
        rows: gold tag ids ``[B, W]`` (-1 on padding and on unlabelled rows), or None if no row is
        labelled."""
        if all(r["tags"] is None for r in rows):
            return None
        tags = torch.full((len(rows), max(r["n_words"] for r in rows)), -1, dtype=torch.long)
        for j, r in enumerate(rows):
            if r["tags"] is not None:
                tags[j, : r["n_words"]] = torch.tensor(schema.encode(r["tags"]))
        return tags

    @abstractmethod
    def own_fields(self, schema: LabelSchema, options: LayerOptions) -> list[FieldSpec]:
        """The fields only this kind writes."""

    @abstractmethod
    def own_values(self, host: dict, j: int, n: int, options: LayerOptions) -> dict:
        """The values of :meth:`own_fields` for example ``j`` (of ``n`` words) of the batch whose
        host outputs (:func:`to_host`) are ``host``, by field name."""

    def fields(self, schema: LabelSchema, hidden_size: int, options: LayerOptions) -> list[FieldSpec]:
        """Every field of the layer: this kind's own, then the gold NLL, hidden layers and subword
        outputs asked for."""
        dense = options.dense_dtype
        fields = self.own_fields(schema, options)
        fields.append(
            FieldSpec(
                "gold_nll",
                "example",
                "float32",
                nullable=True,
                description="teacher NLL of the gold tags (labelled rows; null otherwise)",
            )
        )
        for layer in options.hidden_layers:
            fields.append(
                hidden_spec(
                    f"hidden_{layer}",
                    "word",
                    hidden_size,
                    options,
                    f"hidden states of encoder layer {layer} (0 = embeddings)",
                )
            )
        if options.subwords:
            fields += [
                FieldSpec("subword_ids", "subword", "int32", (), "zarr", description="tokenizer ids"),
                FieldSpec("subword_word_ids", "subword", "int32", (), "zarr", description="word of each subword"),
                FieldSpec(
                    "subword_logits",
                    "subword",
                    dense,
                    (schema.num_tags,),
                    "zarr",
                    description="head outputs on each subword",
                ),
            ]
            for layer in options.hidden_layers:
                fields.append(hidden_spec(f"subword_hidden_{layer}", "subword", hidden_size, options))
        return [self._sparse(f, options) for f in fields]

    def _sparse(self, spec: FieldSpec, options: LayerOptions) -> FieldSpec:
        fill = self.topk_fills.get(spec.name)
        if not options.word_topk or fill is None:
            return spec
        if options.word_topk >= spec.shape[0]:
            raise TeacherError(
                f"--word-topk {options.word_topk} keeps every one of the {spec.shape[0]} tags of field "
                f"{spec.name!r}: use fewer, or leave it out for dense storage"
            )
        return dataclasses.replace(spec, encoding={"topk": options.word_topk, "fill": fill})

    def shard_columns(self, rows: list[dict], outputs: list[tuple[dict, int]], options: LayerOptions) -> dict:
        """Columns of one shard of the layer: ``rows`` are the shard's example rows, ``outputs``
        each row's ``(host outputs of its batch, its index in the batch)``."""
        cols: dict[str, list] = {"example_id": [r["example_id"] for r in rows]}

        def add(name, value):
            cols.setdefault(name, []).append(value)

        for r, (host, j) in zip(rows, outputs):
            n = r["n_words"]
            for name, value in self.own_values(host, j, n, options).items():
                add(name, value)
            gold = host.get("gold_nll")
            add("gold_nll", None if gold is None or r["tags"] is None else float(gold[j]))
            for layer in options.hidden_layers:
                add(f"hidden_{layer}", host["hidden"][layer][j, :n])
            if options.subwords:
                wid = host["subword_word_ids"][j]
                s = int((wid >= 0).sum())
                add("subword_word_ids", wid[:s].astype(np.int32))
                add("subword_ids", host["subword_ids"][j, :s].astype(np.int32))
                add("subword_logits", host["subword_logits"][j, :s])
                for layer in options.hidden_layers:
                    add(f"subword_hidden_{layer}", host["subword_hidden"][layer][j, :s])
        return cols


def to_host(out: TeacherOutput) -> dict:
    """A batch's outputs on the host as numpy (float32 for floats), by ``TeacherOutput`` field,
    as :meth:`TeacherKind.shard_columns` takes them."""
    return map_outputs(out, lambda v: (v.float() if v.is_floating_point() else v).cpu().numpy())


def map_outputs(out, fn) -> dict:
    """``fn`` over every tensor of a batch's outputs (a ``TeacherOutput``, or a dict by its field
    names), by field; dicts of tensors (hidden states by layer) keep their keys, fields that are
    None are left out."""
    host = {}
    for name, value in (out if isinstance(out, dict) else out.__dict__).items():
        if isinstance(value, Tensor):
            host[name] = fn(value)
        elif isinstance(value, dict):
            host[name] = {k: fn(v) for k, v in value.items()}
    return host
