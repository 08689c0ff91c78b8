"""A trimmed vocabulary (issue 36): the rows of the teacher's input embedding matrix that a cache's
corpora use, and how a student built from them reads any text.

A multilingual teacher's vocabulary is large (EmbeddingGemma-300M and Gemma 3: 262,144 subwords,
two thirds of the model's parameters), and a corpus uses a small part of it (CoNLL-2003 and 10k
Wikipedia sentences: about 30k subwords). So:

* **The cache** exports only the rows of the subwords its corpora use (``kept_subwords``: every
  subword id the teacher's tokenizer gives any word of any sentence the build reads, with the same
  encoding students use, ``encoding.word_pieces``, plus the tokenizer's special tokens), together
  with their ids and the size of the teacher's matrix (``embeddings.safetensors``: ``weight``
  ``[n, D]``, ``ids`` ``[n]``, metadata ``rows``). Each teacher layer has its own set (its own
  tokenizer), so adding a teacher to a cache adds its set with its layer; the corpora of a cache
  are fixed when it is built. ``distill-cache verify`` tokenizes the cache's words again and checks
  that every subword is kept. ``distill-cache build --full-vocabulary`` exports every row;
  ``--vocabulary-text FILE`` keeps the subwords of FILE's words too, without rows in the cache or a
  teacher pass over it (text like what the students will tag; the export's metadata names it).
* **A student** that starts from those rows keeps them and one more, the **UNK row** (the rule for
  unseen subwords, ``UNSEEN_RULE``): any subword id outside the kept set, at inference on new text,
  maps to row ``n``, initialised as the mean of the kept rows (and trained with the others when the
  embeddings train). A word made only of unseen subwords still has its char feature where the
  student has one (MGKD ``--chars``). Chosen over a hashed bucket (which would give unrelated
  subwords one shared trained row each, by accident of the hash) and over the char feature alone
  (not every student has one). The student keeps the teacher's tokenizer whole, and its model holds
  the map from teacher ids to rows (``RowIndex``, a buffer of the teacher's matrix size), so the
  torch model and its ONNX export read the same ids and give the same tags.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from .encoding import word_pieces

EMBEDDINGS_EXPORT = "embeddings.safetensors"  # in a teacher layer's exports
UNSEEN_RULE = "unk-row"  # unseen subwords share one row, the mean of the kept rows (module docstring)


def kept_subwords(tokenizer, sentences, rows: int, batch_size: int = 1024) -> np.ndarray:
    """Sorted ids of every subword the tokenizer gives the words of ``sentences`` (an iterable of
    word lists), as students encode them (``word_pieces``), and of its special tokens, below the
    embedding matrix's ``rows`` (a tokenizer may know tokens the matrix has no row for, which the
    teacher cannot read either: EmbeddingGemma's ``<image_soft_token>`` is id 262,144 of a
    262,144-row matrix)."""
    seen = {int(i) for i in tokenizer.all_special_ids}
    if tokenizer.unk_token_id is not None:
        seen.add(int(tokenizer.unk_token_id))
    batch: list[list[str]] = []

    def flush():
        for sentence in word_pieces(tokenizer, batch):
            for pieces in sentence:
                seen.update(pieces)
        batch.clear()

    for words in sentences:
        if words:
            batch.append(list(words))
        if len(batch) >= batch_size:
            flush()
    flush()
    return np.array(sorted(i for i in seen if i < rows), dtype=np.int64)


def unseen_share(tokenizer, sentences: list[list[str]], row_of_id: np.ndarray, kept: int) -> float:
    """The share of the words of ``sentences`` that have a subword outside a trimmed vocabulary's
    ``kept`` rows, which a student reads through the UNK row (``row_of_id``: teacher id -> row, row
    ``kept`` for the UNK row). A student's accuracy falls with it: the words only tell it that they
    are new (issue 37: 14.1% of CoNLL-2003's test words for a cache over its train and dev sets, 13
    F1 lost)."""
    pieces = [w for sentence in word_pieces(tokenizer, sentences) for w in sentence]
    if not pieces:
        return 0.0
    return sum(bool((row_of_id[np.asarray(w)] == kept).any()) for w in pieces) / len(pieces)


def read_kept(path) -> tuple[Tensor | None, int]:
    """The kept subword ids of an embeddings export and the teacher matrix's row count; ``(None,
    0)`` when the export holds every row."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        if "ids" not in f.keys():
            return None, 0
        return f.get_tensor("ids"), int((f.metadata() or {})["rows"])


def save_tokenizer(tokenizer, directory) -> None:
    """``save_pretrained``, with a fast tokenizer's ``tokenizer.json`` written without indentation:
    the same tokenizer in fewer bytes (EmbeddingGemma's: 13.7 MB instead of 31.8 MB), which matters
    once a student's own weights are a few MB. Used for the cache's exports, student directories and
    ONNX exports; teacher directories keep the file as transformers writes it."""
    from pathlib import Path

    tokenizer.save_pretrained(directory)
    path = Path(directory) / "tokenizer.json"
    if getattr(tokenizer, "is_fast", False) and path.is_file():
        tokenizer.backend_tokenizer.save(str(path), pretty=False)


def with_unk_row(weight: Tensor) -> Tensor:
    """``[n + 1, D]``: the kept rows, then the UNK row (their mean)."""
    w = weight.float()
    return torch.cat([w, w.mean(0, keepdim=True)])


class RowIndex(nn.Module):
    """Teacher subword id -> row of a trimmed embedding matrix: kept id ``ids[i]`` -> row ``i``, any
    other id -> row ``n`` (the UNK row). ``rows == 0``: no trimming, ids are rows (the module holds
    nothing, so untrimmed students keep their state dicts)."""

    def __init__(self, rows: int = 0):
        super().__init__()
        self.trimmed = rows > 0
        if self.trimmed:
            self.register_buffer("row_of_id", torch.zeros(rows, dtype=torch.long))

    def fill(self, ids: Tensor) -> None:
        """Map the kept ``ids`` (sorted, unique) to rows ``0..n-1`` and every other id to ``n``."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and int(ids.max()) >= self.row_of_id.numel():
            raise ValueError(f"kept subword id {int(ids.max())} is outside the teacher's {self.row_of_id.numel()} rows")
        with torch.no_grad():
            self.row_of_id.fill_(ids.numel())
            self.row_of_id[ids.to(self.row_of_id.device)] = torch.arange(ids.numel(), device=self.row_of_id.device)

    def forward(self, ids: Tensor) -> Tensor:
        return self.row_of_id[ids] if self.trimmed else ids
