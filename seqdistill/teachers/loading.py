"""Building and loading a teacher of any kind.

The one module that knows both teacher families: encoders with a tagging head (``models.py``) and
the SenTScore encoder-decoder (``seq2seq.py``). Neither imports the other, nor this module.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..cache_schema import LabelSchema
from .base import TEACHER_JSON, TeacherError
from .kinds import KINDS, teacher_kind
from .models import Teacher, build_encoder_teacher, load_encoder_teacher, load_token_classifier
from .seq2seq import SentScoreTeacher, build_sentscore_teacher, load_sentscore_teacher


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
) -> Teacher | SentScoreTeacher:
    """A new teacher (head initialised at random) over a pretrained model: a local directory or a
    hub name. A SenTScore teacher takes no pooling, dropout or maximum length."""
    teacher_kind(kind)  # refuses an unknown kind by name
    if kind == SentScoreTeacher.kind:
        return build_sentscore_teacher(encoder_path, schema, trust_remote_code=trust_remote_code, seed=seed)
    return build_encoder_teacher(
        encoder_path,
        schema,
        kind,
        pooling=pooling,
        dropout=dropout,
        max_length=max_length,
        trust_remote_code=trust_remote_code,
        seed=seed,
    )


def load_teacher(
    directory, *, trust_remote_code: bool = False, device: str | torch.device | None = None
) -> Teacher | SentScoreTeacher:
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
        load = load_sentscore_teacher if kind == SentScoreTeacher.kind else load_encoder_teacher
        teacher = load(d, meta, trust_remote_code)
    teacher.source_dir = d
    teacher.eval()
    if device is not None:
        teacher.to(device)
    return teacher
