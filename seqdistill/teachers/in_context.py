"""In-context SenTScore teachers (issue 55): a base decoder-only LM read with SenTScore (paper 004),
K gold demonstrations before every prompt, nothing trained. Made by ``distill-cache
in-context-teacher``; ``build``, ``distill-eval`` and the sentscore recipe take it as they take a
fine-tuned SenTScore teacher (its kind is ``sentscore``).

Decisions, named here:

* **A command of its own, the kind unchanged.** Making the teacher trains nothing and needs no dev
  set, so it is not an option of ``finetune-teacher``; what reads the teacher (the search, the
  cache's fields, the recipe) is SenTScore's own, so it is not a new kind. ``teacher.json`` says
  ``in_context``, and that is the only difference a loader sees.
* **The directory holds no weights.** It names the model (a local directory or GGUF file, made
  absolute) and records its sha256: the GGUF file's, or one digest over a directory's
  ``*.safetensors`` files (name and bytes, sorted). Loading checks it and refuses a model that
  changed. Beside it: the model's config (as the teacher runs it), its tokenizer, and
  ``demonstrations.jsonl`` (words and sBIO tags, in the order they are given). A cache built from
  the teacher states all of this through the teacher's fingerprints (``base.teacher_fingerprints``).
* **Demonstrations.** ``--demos FILE`` is a labelled pool; ``--n-demos K`` draws K of its
  sentences with ``--seed`` (kept in file order), and without ``--n-demos`` every sentence of the
  file is a demonstration, in file order ("given as a file"). 0 demonstrations is a valid teacher:
  the prompt of a fine-tuned one, on a model that was never fine-tuned. The label schema is sBIO
  over the pool's entity types, whatever K.
* **Every layer attends to the whole sequence.** Demonstrations make prompts longer than a
  sliding window (Gemma 3 270M's is 512 tokens; 20 CoNLL sentences take about 1,200), and the
  search needs a cache that never slides (``sentscore_search.context_limit``). So the model is
  loaded with its sliding-window layers made full-attention layers. Within the window, this is the
  same computation; beyond it, those layers see more than they were trained on.
* **The demonstrations' keys and values are shared.** They are computed once per model and
  precision (``sentscore_search._context_states``) and attended to apart by every sentence and
  beam (``shared_prefix.py``), neither computed again in front of every sentence nor copied into
  every row's cache (docs/BENCHMARKS.md has the speed-up).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from .base import DEMONSTRATIONS, TeacherError, file_sha256, sha256_files


def model_sha256(source: str) -> str:
    """The sha256 an in-context teacher records of its model: a GGUF file's, or one digest over a
    directory's ``*.safetensors`` files (each name and its bytes, in sorted order: ``sha256_files``)."""
    p = Path(source)
    if p.is_dir():
        names = sorted(f.name for f in p.glob("*.safetensors"))
        if names:
            return sha256_files(p, names)
    elif p.is_file():
        return file_sha256(p)
    raise TeacherError(f"{source}: no GGUF file and no *.safetensors weights to fingerprint")


def local_model(source: str) -> str:
    """The model's path made absolute; a hub name (nothing local) is refused, since its sha256
    cannot be recorded before it is downloaded."""
    if not os.path.exists(source):
        raise TeacherError(
            f"{source}: an in-context teacher names its model by a local directory or GGUF file, whose sha256 "
            "it records; download it first (e.g. huggingface-cli download NAME --local-dir DIR)"
        )
    return os.path.abspath(source)


def draw_demonstrations(sentences: list, n: int | None, seed: int) -> list:
    """``n`` sentences drawn with ``seed`` and kept in file order, or all of them (``n`` None)."""
    if n is None:
        return list(sentences)
    if not 0 <= n <= len(sentences):
        raise TeacherError(f"--n-demos {n}: the pool holds {len(sentences)} sentences")
    return [sentences[i] for i in sorted(random.Random(seed).sample(range(len(sentences)), n))]


def write_demonstrations(directory: Path, demonstrations: list[tuple[list[str], list[str]]]) -> None:
    lines = [json.dumps({"words": w, "tags": t}, ensure_ascii=False) for w, t in demonstrations]
    (directory / DEMONSTRATIONS).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def read_demonstrations(directory: Path) -> list[tuple[list[str], list[str]]]:
    path = directory / DEMONSTRATIONS
    if not path.is_file():
        raise TeacherError(f"{path}: missing; an in-context teacher keeps its demonstrations there")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            obj = json.loads(line)
            words, tags = obj["words"], obj["tags"]
        except (ValueError, KeyError, TypeError):
            raise TeacherError(f'{path}:{n}: expected {{"words": [...], "tags": [...]}}') from None
        out.append((words, tags))
    return out


def checked_model(directory: Path, record: dict) -> str:
    """The model an in-context teacher names, checked against the sha256 it recorded."""
    source = record.get("model")
    if not source or not os.path.exists(source):
        raise TeacherError(
            f"{directory}: the in-context teacher's model {source!r} is not there; put it back, or make the "
            "teacher again with distill-cache in-context-teacher"
        )
    if model_sha256(source) != record.get("model_sha256"):
        raise TeacherError(
            f"{directory}: the model {source} changed since the teacher was made (its sha256 differs from "
            "teacher.json's); make the teacher again, or restore the model"
        )
    return source
