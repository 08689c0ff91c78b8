"""The ``crf`` teacher kind: encoder + dropout + linear + CRF (paper 000's BERT+CRF).

Its teachers output emissions, log Z, k-best paths with global log-probabilities, marginals and the
gold NLL of labelled sentences; they decode by the CRF's Viterbi, and export the encoder and linear
head as a graph (the CRF's tables beside it, for the numpy decoder)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file
from torch import Tensor

from ...cache_schema import FieldSpec
from ...crf import CRF
from ...decode import Decoder, crf_decoder
from ..base import TeacherOutput
from ..encoder import EncoderKind, Teacher
from ..paths import add_paths, marginals_field, path_fields, path_values


class CRFTeacher(Teacher):
    kind = "crf"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.crf = CRF.from_schema(self.schema)

    def loss(self, batch_words, tags: Tensor) -> Tensor:
        """Mean CRF negative log-likelihood of the gold paths (paper 000, eq. 7 for the teacher)."""
        out = self.encode(batch_words)  # under bf16 autocast (--precision bf16) the emissions are bf16
        return self.crf.nll(out.logits.float(), out.word_mask, tags.to(self.device)).mean()

    def decode(self, out: TeacherOutput) -> Tensor:
        return self.crf.decode(out.logits, out.word_mask)

    def add_structure(self, out: TeacherOutput, k: int, marginals: bool) -> None:
        """k-best paths and log Z, and the marginals on request; log Z is computed once, by the
        marginals' forward pass when they are asked for, and reused by k-best and the gold NLL."""
        add_paths(out, out.logits, self.crf.scores(), k, marginals)

    def gold_nll(self, out: TeacherOutput, tags: Tensor) -> Tensor:
        tags = tags.to(self.device, non_blocking=True)
        return self.crf.nll(out.logits, out.word_mask, tags, log_z=out.log_z)

    def decoder(self) -> Decoder:
        return crf_decoder(self.schema, self.crf)

    def export_head(self, directory: Path) -> None:
        """``crf.safetensors``: the CRF's transitions, start and end as used (-inf where forbidden)."""
        save_file(
            {k: v.float().cpu().contiguous() for k, v in self.crf_scores().items()}, str(directory / "crf.safetensors")
        )

    def crf_scores(self) -> dict[str, Tensor]:
        """Transitions, start and end scores as used (-inf where the scheme forbids)."""
        trans, start, end = self.crf.scores()
        return {"transitions": trans.detach(), "start": start.detach(), "end": end.detach()}

    def head_state(self) -> dict[str, Tensor]:
        state = super().head_state()
        state.update({"crf.transitions": self.crf.transitions, "crf.start": self.crf.start, "crf.end": self.crf.end})
        return state


class CRFKind(EncoderKind):
    """Encoder + linear + CRF (paper 000): k-best paths with global log-probabilities, log Z,
    emissions and, on request, marginals."""

    model = CRFTeacher
    help = "encoder + linear + CRF (paper 000): k-best paths, marginals"
    name = "crf"

    def decoding(self, options, scheme, precision):
        return {"k": options.k, "constrained": True, "scheme": scheme, "precision": precision}

    def own_fields(self, schema, options):
        fields = path_fields("CRF log-partition", "path score - log Z")
        fields.append(
            FieldSpec(
                "emissions", "word", options.dense_dtype, (schema.num_tags,), "zarr", description="CRF emission scores"
            )
        )
        if options.marginals:
            fields.append(marginals_field(schema, options.dense_dtype, "CRF posterior tag marginals"))
        return fields

    def own_values(self, host, j, n, options):
        values = path_values(host, j, n)
        values["emissions"] = host["logits"][j, :n]
        if options.marginals:
            values["marginals"] = host["marginals"][j, :n]
        return values


KIND = CRFKind()
