"""Teacher kinds: what a teacher of each kind writes into its layer of a cache.

A kind is one :class:`TeacherKind` in :data:`KINDS`, under the name its teachers carry
(``Teacher.kind``, ``teacher.json``, the manifest's teacher ``kind``). It declares

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

Decisions: this module knows no model class and loads no weights, so that what a kind writes can
be read and tested without a teacher. The build's settings come in as :class:`LayerOptions`, plain
values, because the build config belongs to the pipeline, which teachers never import.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..bilou import layers_from_spans
from ..cache_schema import FieldSpec, LabelSchema
from ..cache_schema.labels import tags_to_spans
from .base import TeacherError, TeacherOutput


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
    """The cache side of one teacher kind. A subclass names the kind and declares its own fields
    and their values; the rest has defaults that suit a kind decoding no paths."""

    name: str
    default_k = 10  # paths per sentence when the build does not say (paper 000: K = 10 for a CRF)
    # Per-word tag distributions that --word-topk stores sparsely, with the rule that rebuilds the
    # tags left out (encodings.py): probabilities spread their residual mass, scores keep the row's
    # log-mean-exp. Other per-word fields (SenTScore tag scores, nested type logits) stay dense.
    topk_fills = {
        "emissions": "logmeanexp",
        "marginals": "residual",
        "logits": "logmeanexp",
        "subword_logits": "logmeanexp",
    }

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


class CRFKind(TeacherKind):
    """Encoder + linear + CRF (paper 000): k-best paths with global log-probabilities, log Z,
    emissions and, on request, marginals."""

    name = "crf"

    def decoding(self, options, scheme, precision):
        return {"k": options.k, "constrained": True, "scheme": scheme, "precision": precision}

    def own_fields(self, schema, options):
        num_tags, dense = schema.num_tags, options.dense_dtype
        fields = [
            FieldSpec(
                "kbest_paths",
                "example",
                "int16",
                ("k", "words"),
                description="the k best tag paths (valid ones only), best first",
            ),
            FieldSpec(
                "kbest_log_probs",
                "example",
                "float32",
                ("k",),
                description="global log-probabilities of the k-best paths (path score - log Z)",
            ),
            FieldSpec("log_z", "example", "float32", description="CRF log-partition"),
            FieldSpec("emissions", "word", dense, (num_tags,), "zarr", description="CRF emission scores"),
        ]
        if options.marginals:
            fields.append(
                FieldSpec("marginals", "word", dense, (num_tags,), "zarr", description="CRF posterior tag marginals")
            )
        return fields

    def own_values(self, host, j, n, options):
        lp = host["kbest_log_probs"][j]
        valid = np.isfinite(lp)
        values = {
            "kbest_paths": host["kbest_paths"][j][valid, :n].astype(np.int16),
            "kbest_log_probs": lp[valid].astype(np.float32),
            "log_z": float(host["log_z"][j]),
            "emissions": host["logits"][j, :n],
        }
        if options.marginals:
            values["marginals"] = host["marginals"][j, :n]
        return values


class SoftmaxKind(TeacherKind):
    """Encoder + linear (papers 001, 003), or any token-classification checkpoint: tag logits."""

    name = "softmax"

    def own_fields(self, schema, options):
        return [FieldSpec("logits", "word", options.dense_dtype, (schema.num_tags,), "zarr", description="tag logits")]

    def own_values(self, host, j, n, options):
        return {"logits": host["logits"][j, :n]}


class SentScoreKind(TeacherKind):
    """An encoder-decoder read with SenTScore (paper 004): its beams over sBIO tags, their scores
    and the best beam's per-word tag scores."""

    name = "sentscore"
    default_k = 1  # greedy, as paper 004 builds its pseudo-labels

    def refusal(self, options):
        if options.hidden_layers or options.subwords:
            return (
                "a SenTScore teacher stores no hidden layers or subword fields: leave out "
                "--hidden-layers and --subwords"
            )
        return None

    def decoding(self, options, scheme, precision):
        return {"k": options.k, "constrained": True, "scheme": scheme, "precision": precision, "algorithm": "sentscore"}

    def own_fields(self, schema, options):
        return [
            FieldSpec(
                "kbest_paths",
                "example",
                "int16",
                ("k", "words"),
                description="the SenTScore beams (sBIO tag ids), best first; the first is the pseudo-label",
            ),
            FieldSpec(
                "kbest_scores",
                "example",
                "float32",
                ("k",),
                description="log-likelihood of each beam's SenT' output under the teacher",
            ),
            FieldSpec(
                "tag_scores",
                "word",
                "float32",
                (schema.num_tags,),
                "zarr",
                description="log-likelihood of 't s_i' for each sBIO tag t at word i on the best beam "
                "(-inf where sBIO forbids t)",
            ),
        ]

    def own_values(self, host, j, n, options):
        scores = host["kbest_log_probs"][j]
        valid = np.isfinite(scores)
        return {
            "kbest_paths": host["kbest_paths"][j][valid, :n].astype(np.int16),
            "kbest_scores": scores[valid].astype(np.float32),
            "tag_scores": host["logits"][j, :n].astype(np.float32),
        }


class BilouPerTypeKind(TeacherKind):
    """One BILOU head per entity type (paper 003): 5 logits per type and word, types possibly
    nested; the gold NLL is of the per-type BILOU layers."""

    name = "bilou-per-type"

    def refusal(self, options):
        if options.subwords:
            return "a bilou-per-type teacher stores word-level outputs only: leave out --subwords"
        return None

    def gold_targets(self, rows, schema):
        """Gold BILOU layers ``[B, W, E]`` (-1 on padding and unlabelled rows): from a nested row's
        every entity, else from its flat tags; None if no row is labelled."""
        if all(r["tags"] is None for r in rows):
            return None
        types = list(schema.entity_types)
        out = torch.full((len(rows), max(r["n_words"] for r in rows), len(types)), -1, dtype=torch.long)
        for j, r in enumerate(rows):
            if r["tags"] is None:
                continue
            spans = (
                tags_to_spans(r["tags"], schema.scheme)
                if r["entity_spans"] is None
                else [(a, b, t) for (a, b), t in zip(r["entity_spans"], r["entity_types"])]
            )
            out[j, : r["n_words"]] = torch.tensor(layers_from_spans(spans, r["n_words"], types))
        return out

    def own_fields(self, schema, options):
        return [
            FieldSpec(
                "type_logits",
                "word",
                options.dense_dtype,
                (len(schema.entity_types), 5),
                "zarr",
                description="BILOU logits (O, B, I, L, U) of each entity type, types in the label schema's order",
            )
        ]

    def own_values(self, host, j, n, options):
        return {"type_logits": host["logits"][j, :n]}


KINDS: dict[str, TeacherKind] = {k.name: k for k in (CRFKind(), SoftmaxKind(), SentScoreKind(), BilouPerTypeKind())}


def teacher_kind(name: str) -> TeacherKind:
    """The registered kind called ``name``."""
    if name not in KINDS:
        raise TeacherError(f"teacher kind {name!r} is not one of {tuple(KINDS)}")
    return KINDS[name]


def to_host(out: TeacherOutput) -> dict:
    """A batch's outputs on the host as numpy (float32 for floats), by ``TeacherOutput`` field,
    as :meth:`TeacherKind.shard_columns` takes them."""
    host = {}
    for name, value in out.__dict__.items():
        if isinstance(value, Tensor):
            host[name] = value.float().cpu().numpy() if value.is_floating_point() else value.cpu().numpy()
        elif isinstance(value, dict):
            host[name] = {k: v.float().cpu().numpy() for k, v in value.items()}
    return host
