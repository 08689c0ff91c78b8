"""What every teacher shares, whatever its model: the files of a teacher directory, the outputs
of a batch, mixed precision for inference, fingerprints and the error type.

The encoder teachers (``models.py``) and the encoder-decoder one (``seq2seq.py``) both import this
module and never each other; ``loading.py`` is the one place that knows them both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ..precision import PRECISIONS as PRECISIONS  # the teachers package re-exports it
from ..precision import PrecisionError, autocast
from ..precision import resolve_precision as precision_rule

TEACHER_JSON = "teacher.json"
HEAD_FILE = "head.safetensors"
WEIGHT_FILES = ("model.safetensors", HEAD_FILE)
DEMONSTRATIONS = "demonstrations.jsonl"  # an in-context or server teacher's (in_context.py)
GLINER_CONFIG = "gliner_config.json"  # a GLiNER span model's directory (span_model.py)
GLINER_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # its package reads the first that exists
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "merges.txt",
)


class TeacherError(ValueError):
    """A teacher directory or request that cannot be used, with what to do."""


@dataclass
class TeacherOutput:
    """Word-level outputs of a batch (``[B, W, ...]``, zero on padding) and optional extras."""

    word_mask: Tensor
    logits: Tensor  # emissions of a CRF teacher, logits of a softmax teacher
    hidden: dict[int, Tensor] = field(default_factory=dict)
    subword_logits: Tensor | None = None  # [B, S, T]
    subword_word_ids: Tensor | None = None  # [B, S], -1 on padding
    subword_ids: Tensor | None = None  # [B, S] tokenizer ids
    subword_hidden: dict[int, Tensor] = field(default_factory=dict)
    # CRF teachers only
    log_z: Tensor | None = None
    kbest_paths: Tensor | None = None  # [B, K, W], -1 outside the sentence or on invalid beams
    kbest_log_probs: Tensor | None = None  # [B, K], -inf on invalid beams
    marginals: Tensor | None = None
    gold_nll: Tensor | None = None
    shortest: int | None = None  # words of the batch's shortest sentence, known on the host (crf.py)


def resolve_precision(device: torch.device | str, precision: str | None = "auto") -> str:
    """The precision a teacher's forward pass runs at on ``device``: ``auto`` is bf16 on GPU and fp32
    on CPU; ``bf16`` asked for explicitly autocasts on the CPU too; fp16 is a GPU precision only
    (``training.precision``, the one rule; refused here as a :class:`TeacherError`)."""
    try:
        return precision_rule(device, precision)
    except PrecisionError as e:
        raise TeacherError(str(e)) from None


def inference_autocast(device: torch.device, precision: str | None = "auto"):
    """Mixed precision for a teacher's forward pass (:func:`resolve_precision`): autocast to bf16 or
    fp16, or none at fp32. Structured outputs (CRF, k-best, marginals) stay fp32 whatever this is."""
    try:
        return autocast(device, precision)
    except PrecisionError as e:
        raise TeacherError(str(e)) from None


def write_teacher_json(directory: Path, kind: str, schema, **fields) -> None:
    """``teacher.json``: what a teacher directory holds (its kind, label schema and the kind's own
    settings), read by ``load_teacher``."""
    meta = {"format": "seqdistill-teacher", "format_version": 1, "kind": kind, "label_schema": schema.to_json()}
    (directory / TEACHER_JSON).write_text(json.dumps({**meta, **fields}, indent=1) + "\n")


def add_teacher_fields(directory: Path, **fields) -> None:
    """Add ``fields`` to a saved teacher directory's ``teacher.json`` (what the fine-tuning run knows
    and the teacher object does not, such as the words rule of its training corpus)."""
    path = Path(directory) / TEACHER_JSON
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=1) + "\n")


def teacher_fingerprints(directory) -> dict[str, str]:
    """sha256 fingerprints of a teacher directory's weight and tokenizer files (no model loaded; a
    GLiNER directory's: the weight file its package reads and its ``gliner_config.json``),
    of the GGUF file it was fine-tuned from, when it was (``teacher.json``'s ``base``), and of an
    in-context teacher's model and demonstrations (``in_context``)."""
    d = Path(directory)
    out = {"weights": sha256_files(d, WEIGHT_FILES), "tokenizer": sha256_files(d, TOKENIZER_FILES)}
    if (d / GLINER_CONFIG).is_file():  # the weights its package reads, and its config (span heads, widths)
        weights = next((name for name in GLINER_WEIGHTS if (d / name).is_file()), GLINER_WEIGHTS[0])
        out["weights"] = sha256_files(d, (weights, GLINER_CONFIG))
    meta = d / TEACHER_JSON
    record = json.loads(meta.read_text()) if meta.is_file() else {}
    base = record.get("base")
    if base and base.get("gguf_sha256"):
        out["base_gguf"] = base["gguf_sha256"]
    in_context = record.get("in_context")
    if in_context:  # no weights in the directory: the model it names, and the demonstrations
        out["model"] = in_context["model_sha256"]
        out["demonstrations"] = sha256_files(d, (DEMONSTRATIONS,))
    return out


def file_sha256(path) -> str:
    """The sha256 of one file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_files(root: Path, names) -> str:
    """One digest over the named files that exist (name and content of each, in sorted order)."""
    h = hashlib.sha256()
    for name in sorted(names):
        p = root / name
        if p.is_file():
            h.update(name.encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()
