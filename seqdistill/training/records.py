"""Where the trainer's records go: one object per destination, each called with every epoch's
record. A new logger is one class with ``open(out_dir, history)``, ``write(record)`` and
``close()``, named in :data:`REPORTERS` (``--report-to NAME``)."""

from __future__ import annotations

import json
import math
from pathlib import Path


class MetricsFile:
    """``OUT/metrics.jsonl``, one record per line; on a resume rewritten from the checkpoint's
    history first, so that it holds each epoch once. Always on."""

    def open(self, out_dir: Path, history: list[dict]) -> None:
        with open(out_dir / "metrics.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in history)
        self.file = open(out_dir / "metrics.jsonl", "a")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoard:
    """Every number of a record as a TensorBoard scalar at the record's step (``OUT/tensorboard``;
    nested fields as ``a/b``)."""

    def open(self, out_dir: Path, history: list[dict]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ValueError(
                "--report-to tensorboard needs the tensorboard package: pip install 'seqdistill[tensorboard]'"
            ) from None
        self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        for k, v in scalars(record):
            self.writer.add_scalar(k, v, record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


REPORTERS = {"tensorboard": TensorBoard}


def scalars(record: dict, prefix: str = ""):
    """The finite numbers of a record, by name (``a/b`` for nested fields; epoch and step left out)."""
    for k, v in record.items():
        if k in ("epoch", "step") and not prefix:
            continue
        if isinstance(v, dict):
            yield from scalars(v, f"{prefix}{k}/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            yield f"{prefix}{k}", v


def reporters(report_to) -> list:
    """The record destinations of a run: metrics.jsonl, and each of ``report_to``."""
    unknown = [name for name in report_to if name not in REPORTERS]
    if unknown:
        raise ValueError(f"--report-to {unknown[0]!r} is not one of {', '.join(REPORTERS)}")
    return [MetricsFile(), *(REPORTERS[name]() for name in report_to)]
