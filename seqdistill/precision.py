"""Mixed precision, one rule for every forward pass: a teacher's inference (``teachers.base``), its
fine-tuning and a student's training step (``--precision`` of ``distill-train``).

Decisions, named here:

* mixed precision is autocast, never bf16 weights: the optimiser's updates, the weights it keeps
  and the CRF's partition function stay fp32 (``crf.py`` turns autocast off inside; the teacher
  kinds cast their scores to fp32), so only the matrix products run in 16 bits;
* ``auto`` is bf16 on a GPU and fp32 on the CPU: a CPU run stays exact and reproducible unless
  asked. ``bf16`` asked for explicitly autocasts on the CPU too, where a CPU with AMX or
  AVX512-BF16 runs MPNet-base's forward about 3x and its training step about 1.9x faster
  (docs/BENCHMARKS.md, "bf16 on the CPU");
* fp16 runs on a GPU only (a CPU has no fp16 arithmetic worth the name), and only for inference:
  training in fp16 needs a loss scaler, which the trainer does not have, so the training options
  offer fp32 and bf16.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
TRAINING_PRECISIONS = ("fp32", "bf16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class PrecisionError(ValueError):
    """A precision that is not one of :data:`PRECISIONS`, or not one the device runs."""


def resolve_precision(device: torch.device | str, precision: str | None = "auto") -> str:
    """The precision a forward pass runs at on ``device`` (``None``: fp32), by the rules above."""
    device = torch.device(device)
    if precision is None:
        return "fp32"
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise PrecisionError("precision fp16 runs on a GPU only: on the CPU use bf16 (or fp32)")
    return precision


def autocast(device: torch.device | str, precision: str | None = "auto") -> AbstractContextManager:
    """Autocast to bf16 or fp16 (:func:`resolve_precision`), or a region that changes nothing at fp32."""
    dtype = DTYPES.get(resolve_precision(device, precision))
    return torch.autocast(torch.device(device).type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)
