"""What of a large teacher trains (issue 35): LoRA adapters through ``peft``, and a frozen input
embedding matrix.

Decisions, named here:

* **LoRA** (``--lora-rank R``): ``peft``'s ``LoraConfig(r=R, lora_alpha=2R, target_modules=
  "all-linear")`` on the teacher's pretrained model (the encoder of an encoder teacher, the whole
  generative model of a SenTScore teacher). "all-linear" is peft's rule: every linear layer of the
  transformer blocks, never the output layer. Only the adapters and the teacher's own head (linear
  layer, CRF) train; the pretrained weights, embeddings included, stay as loaded. The scaling
  ``alpha = 2 x rank`` is a common choice, named rather than tuned; no adapter dropout, so that a
  run is a pure function of its seed.
* **The saved teacher has its adapters merged** (``merge_and_unload`` on a copy, at every best
  epoch, so training goes on over the adapters): build, inference and export see a plain model of
  the architecture they know, and its fingerprint is that of the merged weights.
* **Frozen embeddings** (``--freeze-embeddings``): the input embedding matrix keeps its pretrained
  values, an option of its own (with or without LoRA). For Gemma 3 270M it is 170M of the 268M
  parameters: freezing it saves their gradient and AdamW's two moments, about 2 GB in fp32
  (docs/BENCHMARKS.md, "Fine-tuning a large teacher", measures each choice). A model whose output
  layer is tied to the input embeddings (Gemma) keeps its output layer too.
"""

from __future__ import annotations

import contextlib
import copy
import re


class AdapterError(ValueError):
    """An adapter setting that cannot be applied, with what to do."""


def pretrained_part(teacher) -> str:
    """The attribute of ``teacher`` that holds its pretrained model."""
    return getattr(teacher, "pretrained_attr", "encoder")


def attach_lora(teacher, rank: int) -> None:
    """Wrap the teacher's pretrained model with rank-``rank`` LoRA adapters (peft); only the
    adapters, and the teacher's parameters outside the pretrained model, stay trainable."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise AdapterError("--lora-rank needs the peft package: pip install 'seqdistill[lora]'") from None
    if rank < 1:
        raise AdapterError(f"--lora-rank must be at least 1, not {rank}")
    attr = pretrained_part(teacher)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear")
    setattr(teacher, attr, get_peft_model(getattr(teacher, attr), config))


def freeze_embeddings(teacher) -> int:
    """Keep the pretrained model's input embedding matrix fixed; returns its parameter count."""
    embeddings = getattr(teacher, pretrained_part(teacher)).get_input_embeddings()
    embeddings.weight.requires_grad_(False)
    return embeddings.weight.numel()


def block_depth(name: str) -> int | None:
    """The transformer block a pretrained model's parameter belongs to (``encoder.layer.3.x`` -> 3),
    -1 for the embeddings, None for what lies above the blocks (pooler, final norms)."""
    m = re.search(r"\.layers?\.(\d+)\.", f".{name}")
    if m:
        return int(m.group(1))
    return -1 if "embed" in name else None


def freeze_lower_layers(teacher, n: int) -> int:
    """Keep the input embeddings and the lowest ``n`` blocks of the pretrained model fixed; returns
    the number of parameters frozen."""
    model = getattr(teacher, pretrained_part(teacher))
    blocks = {d for name, _ in model.named_parameters() if (d := block_depth(name)) is not None and d >= 0}
    if not 0 <= n < max(blocks, default=-1) + 1:
        raise AdapterError(
            f"--freeze-layers must be between 0 and {max(blocks, default=-1)} (this model has {len(blocks)} blocks), not {n}"
        )
    frozen = 0
    for name, p in model.named_parameters():
        d = block_depth(name)
        if d is not None and d < n:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


@contextlib.contextmanager
def merged(teacher):
    """A context in which ``teacher``'s pretrained model is a plain model with its adapters merged
    (a copy; the adapters stay in training)."""
    attr = pretrained_part(teacher)
    adapted = getattr(teacher, attr)
    if hasattr(adapted, "merge_and_unload"):
        setattr(teacher, attr, copy.deepcopy(adapted).merge_and_unload())
    try:
        yield teacher
    finally:
        setattr(teacher, attr, adapted)


def trainable(teacher) -> tuple[int, int]:
    """(trainable parameters, all parameters) of a teacher."""
    params = list(teacher.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
