"""The ``bilou-per-type`` teacher kind (paper 003): one BILOU head of 5 outputs per entity type, types
possibly nested; decoded by one BILOU automaton's Viterbi per type."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...bilou import layers_from_spans
from ...cache_schema import FieldSpec, LabelSchema
from ...cache_schema.labels import tags_to_spans
from ...decode import Decoder, bilou_decoder
from ..base import TeacherOutput
from ..encoder import EncoderKind, Teacher


class BilouTeacher(Teacher):
    """One BILOU head per entity type (paper 003): the linear layer outputs 5 logits for each
    type, ``logits [B, W, E, 5]``; the loss is the sum over types of each layer's token
    cross-entropy; decoding is the BILOU automaton's Viterbi per type (``seqdistill.bilou``). The
    layers come from the sentence's entity spans (nested ones included) or, for a flat corpus, from
    its tags. Predicted layers are flattened back into the label schema's tags for flat
    evaluation: spans by start, the longer first, an overlapping later span dropped."""

    kind = "bilou-per-type"

    def __init__(self, encoder: nn.Module, tokenizer, schema: LabelSchema, **kwargs):
        super().__init__(encoder, tokenizer, schema, **kwargs)
        self.types = list(schema.entity_types)
        self.classifier = nn.Linear(encoder.config.hidden_size, 5 * len(self.types))

    def encode(self, batch_words, hidden_layers=(), subwords: bool = False, segments=None) -> TeacherOutput:
        out = super().encode(batch_words, hidden_layers, subwords, segments)
        B, W, _ = out.logits.shape
        out.logits = out.logits.view(B, W, len(self.types), 5)
        if out.subword_logits is not None:
            out.subword_logits = out.subword_logits.view(*out.subword_logits.shape[:2], len(self.types), 5)
        return out

    def layer_targets(self, tags: Tensor) -> Tensor:
        """Per-type BILOU ids ``[B, W, E]`` (-1 on padding) from flat tag ids ``[B, W]``."""
        from ...bilou import layers_from_tags

        out = torch.full((*tags.shape, len(self.types)), -1, dtype=torch.long)
        for b, row in enumerate(tags.tolist()):
            n = sum(1 for t in row if t >= 0)
            if n:
                out[b, :n] = torch.tensor(layers_from_tags(self.schema.decode(row[:n]), self.schema.scheme, self.types))
        return out

    def loss(self, batch_words, tags: Tensor) -> Tensor:
        """Sum over types of the token cross-entropy of each BILOU layer. ``tags``: flat tag ids
        ``[B, W]``, or per-type layers ``[B, W, E]`` (nested corpora)."""
        out = self.encode(batch_words)
        layers = (tags if tags.dim() == 3 else self.layer_targets(tags)).to(self.device)
        ce = nn.functional.cross_entropy(
            out.logits.reshape(-1, 5), layers.reshape(-1), ignore_index=-1, reduction="sum"
        )
        return ce / out.word_mask.sum().clamp(min=1)

    def decode(self, out: TeacherOutput) -> Tensor:
        """Flat tag ids of the label schema from the per-type Viterbi layers."""
        from ...bilou import decode_layers, flatten_layers

        return flatten_layers(decode_layers(out.logits, out.word_mask), out.word_mask, self.types, self.schema)

    def decoder(self) -> Decoder:
        return bilou_decoder(self.schema, self.types)

    def predict_spans(self, batch_words: list[list[str]]) -> list[list[tuple[int, int, str]]]:
        """Each sentence's ``(start, end, type)`` spans, nested across types (one Viterbi per type)."""
        from ...bilou import decode_layers, predicted_spans

        with torch.inference_mode():
            out = self.encode(batch_words)
            return predicted_spans(decode_layers(out.logits, out.word_mask).cpu(), out.word_mask.cpu(), self.types)

    def gold_nll(self, out: TeacherOutput, tags: Tensor) -> Tensor:
        """The summed per-type NLL of the gold layers (flat ids [B, W] or layers [B, W, E])."""
        layers = (tags if tags.dim() == 3 else self.layer_targets(tags.cpu())).to(self.device, non_blocking=True)
        logp = torch.log_softmax(out.logits.float(), -1).gather(-1, layers.clamp(min=0).unsqueeze(-1))
        return -(logp.squeeze(-1) * (layers >= 0)).sum((1, 2))


class BilouPerTypeKind(EncoderKind):
    """One BILOU head per entity type (paper 003): 5 logits per type and word, types possibly
    nested; the gold NLL is of the per-type BILOU layers."""

    model = BilouTeacher
    help = "one BILOU head of 5 outputs per entity type (paper 003)"
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


KIND = BilouPerTypeKind()
