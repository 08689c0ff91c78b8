"""The ``softmax`` teacher kind: encoder + dropout + linear (papers 001, 003), or any
``AutoModelForTokenClassification`` checkpoint (a directory without ``teacher.json``). Its
teachers output tag logits and decode by the argmax."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ...cache_schema import FieldSpec, LabelSchema
from ..base import TEACHER_JSON, TeacherError
from ..encoder import EncoderKind, Teacher


class TokenClassifierTeacher(Teacher):
    kind = "softmax"


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
    model = AutoModelForTokenClassification.from_pretrained(d, trust_remote_code=trust_remote_code)
    labels = [config.id2label[i] for i in range(config.num_labels)]
    schema = LabelSchema.from_sequences([labels])
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


class SoftmaxKind(EncoderKind):
    """Encoder + linear (papers 001, 003), or any token-classification checkpoint: tag logits."""

    model = TokenClassifierTeacher
    help = "encoder + linear (papers 001, 003): tag logits"
    name = "softmax"

    def own_fields(self, schema, options):
        return [FieldSpec("logits", "word", options.dense_dtype, (schema.num_tags,), "zarr", description="tag logits")]

    def own_values(self, host, j, n, options):
        return {"logits": host["logits"][j, :n]}


KIND = SoftmaxKind()
