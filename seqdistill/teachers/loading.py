"""Building and loading a teacher of any kind, through the registry of kinds (``kinds/``): the kind
builds and loads its own teachers; this module only finds the kind.

A directory without ``teacher.json`` that holds a Hugging Face ``AutoModelForTokenClassification``
checkpoint is read as a softmax teacher (``kinds/softmax.py``): the one format not written by a
teacher's ``save``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..cache_schema import LabelSchema
from .base import TEACHER_JSON, TeacherError
from .kinds import KINDS, teacher_kind
from .kinds.softmax import load_token_classifier


def build_teacher(
    encoder_path: str,
    schema: LabelSchema,
    kind: str = "crf",
    *,
    pooling: str = "first",
    dropout: float = 0.5,
    max_length: int | None = None,
    trust_remote_code: bool = False,
    seed: int = 13,
):
    """A new teacher of ``kind`` (head initialised at random) over a pretrained model: a local
    directory or a hub name. A kind that takes no pooling, dropout or maximum length (SenTScore's
    encoder-decoder) ignores them."""
    return teacher_kind(kind).build(
        encoder_path,
        schema,
        pooling=pooling,
        dropout=dropout,
        max_length=max_length,
        trust_remote_code=trust_remote_code,
        seed=seed,
    )


def load_teacher(directory, *, trust_remote_code: bool = False, device: str | torch.device | None = None):
    """Restore a teacher directory written by a teacher's ``save``, or wrap an
    ``AutoModelForTokenClassification`` checkpoint as a softmax teacher; in eval mode."""
    d = Path(directory)
    if not d.is_dir():
        raise TeacherError(f"{d}: no such teacher directory")
    meta_path = d / TEACHER_JSON
    if not meta_path.exists():
        teacher = load_token_classifier(d, trust_remote_code)
    else:
        meta = json.loads(meta_path.read_text())
        kind = meta.get("kind")
        if kind not in KINDS:
            raise TeacherError(f"{meta_path}: unknown teacher kind {kind!r}")
        teacher = KINDS[kind].load(d, meta, trust_remote_code)
    teacher.source_dir = d
    teacher.eval()
    if device is not None:
        teacher.to(device)
    return teacher
