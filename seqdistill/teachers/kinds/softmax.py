"""The ``softmax`` teacher kind: encoder + dropout + linear (papers 001, 003), or any
``AutoModelForTokenClassification`` checkpoint (a directory without ``teacher.json``, a Hub id).
Its teachers output tag logits and decode by the argmax.

Its cache layer also holds k-best paths with global log-probabilities, log Z and marginals under
the scheme CRF (``teachers/paths.py``: the log-softmax as emissions, transitions 0 where the scheme
allows a step, -inf where it forbids one), so that MGKD's sequence losses take any token
classifier (issue 65). Decisions: the teacher's own decoding (``predict``, its export) stays the
argmax it was trained for; the cache's best path is the scheme-valid one, which differs from the
argmax only where the argmax breaks the scheme. The gold NLL stays the factorised softmax's."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from ...cache_schema import FieldSpec, LabelSchema, TagError
from ..base import TEACHER_JSON, TeacherError, TeacherOutput
from ..encoder import EncoderKind, Teacher
from ..paths import add_paths, marginals_field, path_fields, path_values, scheme_scores


class TokenClassifierTeacher(Teacher):
    kind = "softmax"

    def add_structure(self, out: TeacherOutput, k: int, marginals: bool) -> None:
        """k-best paths, log Z and (on request) marginals under the scheme CRF (``paths.py``)."""
        emissions = torch.log_softmax(out.logits.float(), dim=-1)
        if getattr(self, "_scheme", (None,))[0] != emissions.device:  # made once a device, not every batch
            self._scheme = (emissions.device, scheme_scores(self.schema, emissions.device))
        add_paths(out, emissions, self._scheme[1], k, marginals)


def load_token_classifier(d: Path, trust_remote_code: bool = False) -> Teacher:
    """An ``AutoModelForTokenClassification`` checkpoint (no ``teacher.json``) as a softmax teacher."""
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    config_path = d / "config.json"
    if not config_path.exists():
        raise TeacherError(
            f"{d}: neither a seqdistill teacher ({TEACHER_JSON}) nor a Hugging Face model "
            "(config.json); fine-tune one with `distill-cache finetune-teacher`"
        )
    config = AutoConfig.from_pretrained(d, trust_remote_code=trust_remote_code)
    if not any(a.endswith("ForTokenClassification") for a in (config.architectures or [])):
        raise TeacherError(
            f"{d}: a plain encoder has no tagging head; fine-tune it first with "
            f"`distill-cache finetune-teacher --encoder {d}`"
        )
    labels = [config.id2label[i] for i in range(config.num_labels)]
    schema = token_classifier_schema(d, labels)
    model = AutoModelForTokenClassification.from_pretrained(d, trust_remote_code=trust_remote_code)
    head = getattr(model, "classifier", None)
    if not isinstance(head, nn.Linear):
        raise TeacherError(f"{d}: its classifier is not a linear layer; seqdistill cannot reuse it")
    teacher = TokenClassifierTeacher(model.base_model, AutoTokenizer.from_pretrained(d), schema)
    # Decision: tags of the scheme missing from the checkpoint's labels get bias -1e4 (never chosen).
    with torch.no_grad():
        teacher.classifier.weight.zero_()
        teacher.classifier.bias.fill_(-1e4)
        for i, tag in enumerate(labels):
            j = schema.tags.index(tag)
            teacher.classifier.weight[j] = head.weight[i]
            teacher.classifier.bias[j] = head.bias[i]
    return teacher


def token_classifier_schema(d: Path, labels: list[str]) -> LabelSchema:
    """The label schema of a checkpoint's ``id2label``, refused by name where it cannot be read as
    spans: labels without names (transformers' ``LABEL_0``...), labels without span boundaries (an
    IO tagger's bare types, which would read as paper 004's sBIO), labels that fit no scheme."""
    shown = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "")
    if all(re.fullmatch(r"LABEL_\d+", label) for label in labels):
        raise TeacherError(
            f"{d}: its {len(labels)} labels have no names ({shown}): set id2label in its config.json to its tag "
            "names (O, B-PER, I-PER, ...), in the order of its classifier's outputs"
        )
    try:
        schema = LabelSchema.from_sequences([labels])
    except TagError as e:
        raise TeacherError(
            f"{d}: its labels ({shown}) fit no tag scheme ({e}); seqdistill reads IOB1, IOB2, BIOES, BILOU, BMES "
            "and BMEWO taggers: rename them in id2label of its config.json"
        ) from None
    if schema.scheme == "sBIO":
        raise TeacherError(
            f"{d}: its labels ({shown}) mark no span boundaries (no B-/I- prefixes: an IO tagger), so two "
            "entities side by side cannot be told apart; seqdistill needs a scheme with boundaries "
            "(IOB2, BIOES, ...): fine-tune one with `distill-cache finetune-teacher`"
        )
    return schema


class SoftmaxKind(EncoderKind):
    """Encoder + linear (papers 001, 003), or any token-classification checkpoint: tag logits, and
    k-best paths and marginals under the scheme CRF."""

    model = TokenClassifierTeacher
    help = "encoder + linear (papers 001, 003): tag logits, k-best paths and marginals under the scheme"
    name = "softmax"

    def decoding(self, options, scheme, precision):
        return {"k": options.k, "constrained": True, "scheme": scheme, "transitions": "scheme", "precision": precision}

    def own_fields(self, schema, options):
        fields = [
            FieldSpec("logits", "word", options.dense_dtype, (schema.num_tags,), "zarr", description="tag logits")
        ]
        fields += path_fields(
            "log of the softmax's mass on the scheme's valid paths (scheme CRF)",
            "the product of the words' softmax probabilities over the scheme's valid paths, renormalised",
        )
        if options.marginals:
            fields.append(marginals_field(schema, options.dense_dtype, "tag marginals under the scheme CRF"))
        return fields

    def own_values(self, host, j, n, options):
        values = {"logits": host["logits"][j, :n], **path_values(host, j, n)}
        if options.marginals:
            values["marginals"] = host["marginals"][j, :n]
        return values


KIND = SoftmaxKind()
