"""Building and loading a teacher of any kind, through the registry of kinds (``kinds/``): the kind
builds and loads its own teachers; this module only finds the kind.

A directory without ``teacher.json`` that holds a Hugging Face ``AutoModelForTokenClassification``
checkpoint is read as a softmax teacher (``kinds/softmax.py``): the one format not written by a
teacher's ``save``. Where a teacher is named that is not a local directory, a Hugging Face Hub id
(``ORG/NAME``) is resolved through huggingface_hub's own download and cache (``resolve_model_dir``).
A directory in a model's own format that a kind declares by its ``marker`` file (a GLiNER's
``gliner_config.json``: the span kind) is read by that kind, with the build's options.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..cache_schema import LabelSchema
from .base import GLINER_CONFIG, GLINER_WEIGHTS, TEACHER_JSON, TeacherError
from .kind import LayerOptions, TeacherKind
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
    other weight formats are never read; pickled ``.bin`` weights never loaded), except a GLiNER's
    ``pytorch_model.bin`` where its repository has no safetensors: its package reads that file with
    ``torch.load(..., weights_only=True)`` (tensors only, no code), and prefers safetensors."""
    d = Path(name)
    if d.is_dir():
        return d
    if not HUB_ID.fullmatch(str(name)):
        raise TeacherError(f"{name}: no such teacher directory, and not a Hugging Face Hub id (ORG/NAME)")
    from huggingface_hub import snapshot_download

    try:
        d = Path(snapshot_download(str(name), allow_patterns=HUB_FILES))
        if (d / GLINER_CONFIG).is_file() and not (d / GLINER_WEIGHTS[0]).is_file():
            d = Path(snapshot_download(str(name), allow_patterns=[*HUB_FILES, GLINER_WEIGHTS[1]]))
        return d
    except Exception as e:  # huggingface_hub's errors: not found, offline and not cached, no network, gated
        raise TeacherError(hub_missing(str(name), e)) from None


def marked_kind(directory) -> TeacherKind | None:
    """The kind whose ``marker`` file the directory holds (a directory in its model's own format,
    with no ``teacher.json``), or None."""
    d = Path(directory)
    if (d / TEACHER_JSON).exists():
        return None
    return next((k for k in KINDS.values() if k.marker and (d / k.marker).is_file()), None)


def load_teacher(
    directory,
    *,
    trust_remote_code: bool = False,
    device: str | torch.device | None = None,
    options: LayerOptions | None = None,
):
    """Restore a teacher directory written by a teacher's ``save``, read a directory in a kind's own
    format (``marked_kind``: a GLiNER, with ``options.span``'s types), or wrap an
    ``AutoModelForTokenClassification`` checkpoint (a directory or a Hub id) as a softmax teacher;
    in eval mode."""
    d = resolve_model_dir(directory)
    meta_path = d / TEACHER_JSON
    marked = marked_kind(d)
    if marked is not None:
        teacher = marked.load_directory(d, options, trust_remote_code)
    elif not meta_path.exists():
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
