"""The ``crf`` teacher kind: encoder + dropout + linear + CRF (paper 000's BERT+CRF).

Its teachers output emissions, log Z, k-best paths with global log-probabilities, marginals and the
gold NLL of labelled sentences; they decode by the CRF's Viterbi, and export the encoder and linear
head as a graph (the CRF's tables beside it, for the numpy decoder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.torch import save_file
from torch import Tensor

from ...cache_schema import FieldSpec
from ...crf import CRF
from ...decode import Decoder, crf_decoder
from ..base import TeacherOutput
from ..encoder import EncoderKind, Teacher


class CRFTeacher(Teacher):
    kind = "crf"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.crf = CRF.from_schema(self.schema)

    def loss(self, batch_words, tags: Tensor) -> Tensor:
        """Mean CRF negative log-likelihood of the gold paths (paper 000, eq. 7 for the teacher)."""
        out = self.encode(batch_words)
        return self.crf.nll(out.logits, out.word_mask, tags.to(self.device)).mean()

    def decode(self, out: TeacherOutput) -> Tensor:
        return self.crf.decode(out.logits, out.word_mask)

    def add_structure(self, out: TeacherOutput, k: int, marginals: bool) -> None:
        """k-best paths and log Z, and the marginals on request; log Z is computed once, by the
        marginals' forward pass when they are asked for, and reused by k-best and the gold NLL."""
        log_z, shortest = None, out.shortest
        if marginals:
            out.marginals, log_z = self.crf.marginals(out.logits, out.word_mask, with_log_z=True, shortest=shortest)
        best = self.crf.kbest(out.logits, out.word_mask, k, log_z=log_z, shortest=shortest)
        out.log_z, out.kbest_paths, out.kbest_log_probs = best.log_z, best.paths, best.log_probs

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


KIND = CRFKind()
