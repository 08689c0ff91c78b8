"""Building and loading a teacher of any kind, through the registry of kinds (``kinds/``): the kind
builds and loads its own teachers; this module only finds the kind.

A directory without ``teacher.json`` that holds a Hugging Face ``AutoModelForTokenClassification``
checkpoint is read as a softmax teacher (``kinds/softmax.py``): the one format not written by a
teacher's ``save``. Where a teacher is named that is not a local directory, a Hugging Face Hub id
(``ORG/NAME``) is resolved through huggingface_hub's own download and cache (``resolve_model_dir``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..cache_schema import LabelSchema
from .base import TEACHER_JSON, TeacherError
from .kinds import KINDS, teacher_kind
from .kinds.softmax import load_token_classifier
from .pretrained import hub_missing


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


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_FILES = [
    "*.json",
    "*.safetensors",
    "*.txt",
    "*.model",
    "tokenizer*",
]  # weights, config and tokenizer: no other formats


def resolve_model_dir(name) -> Path:
    """A local directory as it is; otherwise a Hugging Face Hub id ``ORG/NAME``, fetched into (or,
    offline, found in) the hub cache by ``huggingface_hub.snapshot_download``, which honours
    ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE`` and ``HF_TOKEN`` as every Hugging Face tool does.
    Decision: only the safetensors weights, JSON configs and tokenizer files are fetched (a repo's
    other weight formats are never read; pickled ``.bin`` weights never loaded)."""
    d = Path(name)
    if d.is_dir():
        return d
    if not HUB_ID.fullmatch(str(name)):
        raise TeacherError(f"{name}: no such teacher directory, and not a Hugging Face Hub id (ORG/NAME)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), allow_patterns=HUB_FILES))
    except Exception as e:  # huggingface_hub's errors: not found, offline and not cached, no network, gated
        raise TeacherError(hub_missing(str(name), e)) from None


def load_teacher(directory, *, trust_remote_code: bool = False, device: str | torch.device | None = None):
    """Restore a teacher directory written by a teacher's ``save``, or wrap an
    ``AutoModelForTokenClassification`` checkpoint (a directory or a Hub id) as a softmax teacher;
    in eval mode."""
    d = resolve_model_dir(directory)
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
