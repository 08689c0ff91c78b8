"""Fine-tuning a teacher on a labelled corpus (paper 000's recipe by default).

AdamW; the encoder's top block learns at ``lr`` and each block below at ``layer_decay`` times the
rate of the one above (embeddings lowest), "discriminative fine-tuning" (paper 000, §3.1 and
Table 6); the linear head and the CRF learn at ``head_lr`` (1e-3); dropout 0.5 on the encoder
output; linear warm-up then linear decay; early stopping on dev F1 (seqeval, CoNLL micro), the
best epoch's weights written to the output directory.

The run is a plan of the one trainer that students use too (``seqdistill.training``): the same
loop, checkpoints, records (``OUT/metrics.jsonl``, ``--report-to tensorboard``) and progress bar.
Resumable: every ``checkpoint_every`` optimiser steps and at every epoch end the run writes
``OUT/checkpoint`` (``seqdistill.checkpoint``: weights, AdamW moments, the rates and the torch RNG,
no pickle). Killed at any point, the same command continues from the last checkpoint
and ends with the same weights as an uninterrupted run: the batch order is a pure function of
``(seed, epoch)``, so the batches a checkpoint had done are skipped. A checkpoint of a different
run (another encoder, corpus size or setting) is refused by name, never silently mixed. The
checkpoint is deleted when the run ends (for MPNet-base it is about 1.3 GB); ``resume=False``
(``--restart``) discards one.
"""

from __future__ import annotations

import json
import random
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import training
from ..cache_schema import LabelSchema
from ..config_fields import option
from ..corpora.words import implied_rule
from ..metrics import span_scores, span_set_scores
from ..training import REPORTERS, ListBatches, Plan, Stage, settings
from .adapters import attach_lora, block_depth, freeze_embeddings, freeze_lower_layers, merged, trainable
from .base import add_teacher_fields, inference_autocast
from .encoder import Teacher
from .kinds import KINDS, teacher_kind
from .loading import build_teacher


def _own(name: str) -> str:
    """`` (sentscore: 20).``: the kinds whose paper sets ``name`` otherwise, for its help."""
    own = [f"{k}: {kind.finetune_defaults[name]:g}" for k, kind in KINDS.items() if name in kind.finetune_defaults]
    return f" ({'; '.join(own)})." if own else "."


@dataclass
class FinetuneConfig:
    """A teacher's fine-tuning: paper 000's recipe by default (``finetune-teacher``'s options are
    these fields, ``seqdistill.cli.options``; a kind's own paper overrides some,
    :meth:`for_head`)."""

    head: str = option(
        "crf",
        "The teacher kind: "
        + "; ".join(f"{name}: {kind.help}" for name, kind in KINDS.items() if kind.finetunable)
        + ".",
        choices=tuple(name for name, kind in KINDS.items() if kind.finetunable),
    )
    epochs: int = option(10, "Most epochs" + _own("epochs"))
    batch_size: int = option(32, "Sentences per batch (paper 000, Table 6).")
    lr: float = option(
        1e-5,
        "Encoder top-block learning rate (paper 000, Table 6: BERT initial 1e-5); the one rate of a kind "
        "without layer-wise rates" + _own("lr"),
    )
    head_lr: float = option(1e-3, "Linear head and CRF learning rate (paper 000, Table 6: CRF 1e-3).")
    layer_decay: float = option(0.9, "Rate factor per block towards the input (paper 000, §3.1).")
    dropout: float = option(0.5, "Dropout on the encoder output (paper 000, Table 6).")
    weight_decay: float = option(0.01, "AdamW weight decay of the encoder.")
    warmup: float = option(0.1, "Fraction of the steps over which the rate rises linearly.")
    patience: int = option(3, "Epochs without a dev F1 gain before stopping" + _own("patience"))
    pooling: str = option("first", "Word vector from its subwords' states.", choices=("first", "mean"))
    max_length: int | None = option(None, "Subwords per window (default: the encoder's maximum).", metavar="N")
    lora_rank: int = option(
        0,
        "Train rank-R LoRA adapters (peft, every linear layer of the pretrained model) and the head "
        "instead of every weight; the saved teacher has them merged. 0: full fine-tuning.",
        metavar="R",
    )
    freeze_embeddings: bool = option(
        False, "Keep the pretrained model's input embedding matrix fixed (with or without --lora-rank)."
    )
    freeze_layers: int = option(
        0,
        "Keep the input embeddings and the lowest N transformer blocks fixed: no backward pass through "
        "them (faster; 0: every block trains).",
        metavar="N",
    )
    length_buckets: int = option(
        0,
        "Draw each batch from sentences of similar length: the shuffled epoch is cut into pools of this "
        "many batches, each pool sorted by length and cut into batches, and the batches shuffled "
        "(less padding, faster; 0: plain shuffled batches).",
        metavar="POOL",
    )
    precision: str = option(
        "fp32",
        "The forward pass of training: fp32, or bf16 autocast (the weights, AdamW and the CRF stay fp32; "
        "about 2x faster a step on a CPU with AMX/AVX512-BF16 or on a GPU). Dev F1 is scored in fp32.",
        choices=("fp32", "bf16"),
    )
    max_train_sentences: int | None = option(
        None, "Train on a seeded random subset of this size (demos, quick runs).", metavar="N"
    )
    seed: int = option(13, "Seed of the head, the batch order and the dropout masks.")
    checkpoint_every: int = option(
        100, "Optimiser steps between checkpoints in OUT/checkpoint (also at every epoch end; 0: epoch ends only)."
    )
    resume: bool = option(True, "Continue from OUT/checkpoint when it holds this run (--restart: start afresh).")
    report_to: tuple[str, ...] = option(
        (),
        "Also log the epoch records to: tensorboard (OUT/tensorboard; the tensorboard extra).",
        choices=tuple(REPORTERS),
    )

    @classmethod
    def for_head(cls, head: str, **overrides) -> "FinetuneConfig":
        """The defaults of the paper behind the kind ``head``: paper 000's, over which a kind names
        its own paper's (``TeacherKind.finetune_defaults``; sentscore: paper 004 §5, AdamW at 1e-3 for
        the whole model, 20 epochs, patience 5)."""
        return cls(head=head, **{**teacher_kind(head).finetune_defaults, **overrides})


def layerwise_groups(teacher: Teacher, cfg: FinetuneConfig) -> list[dict]:
    """Parameter groups: block i of N at lr * decay^(N-1-i), embeddings at lr * decay^N."""
    n = teacher.num_layers
    groups: dict[float, list] = {}
    for name, p in teacher.encoder.named_parameters():
        depth = block_depth(name)
        if depth is None:  # pooler, final norms: the top
            depth = n - 1
        lr = cfg.lr * cfg.layer_decay ** (n - 1 - depth)
        groups.setdefault(lr, []).append(p)
    out = [{"params": ps, "lr": lr, "weight_decay": cfg.weight_decay} for lr, ps in sorted(groups.items())]
    head = [p for name, p in teacher.named_parameters() if not name.startswith("encoder.")]
    out.append({"params": head, "lr": cfg.head_lr, "weight_decay": 0.0})
    return out


def evaluate(teacher: Teacher, sentences, batch_size: int = 64) -> dict:
    """seqeval scores of the teacher's best paths against gold tags; for a per-type (BILOU)
    teacher on sentences with nested ``entities``, exact-match scores of every span
    (``metrics.span_set_scores``)."""
    teacher.eval()
    nested = hasattr(teacher, "predict_spans") and all(s.entities is not None for s in sentences)
    # batches of similar length (less padding); the scores do not depend on the order
    sentences = sorted(sentences, key=lambda s: len(s.words))
    gold, pred = [], []
    for i in range(0, len(sentences), batch_size):
        batch = sentences[i : i + batch_size]
        if nested:
            pred += teacher.predict_spans([s.words for s in batch])
            gold += [s.entities for s in batch]
        else:
            pred += teacher.predict([s.words for s in batch])
            gold += [s.tags for s in batch]
    if nested:
        return span_set_scores(gold, pred)
    return span_scores(gold, pred, teacher.schema.scheme)


def finetune(
    encoder: str,
    train,
    dev,
    schema: LabelSchema,
    out_dir,
    cfg: FinetuneConfig | None = None,
    *,
    trust_remote_code: bool = False,
    device: str | None = None,
    log=print,
) -> dict:
    """Fine-tune a teacher on ``train`` (sentences with ``words`` and ``tags`` in ``schema``), keep
    the epoch with the best F1 on ``dev``, and save it to ``out_dir``. Returns the training summary."""
    cfg = cfg or FinetuneConfig()
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    dev_name = device or ("cuda" if torch.cuda.is_available() else "cpu")
    teacher = build_teacher(
        encoder,
        schema,
        cfg.head,
        pooling=cfg.pooling,
        dropout=cfg.dropout,
        max_length=cfg.max_length,
        trust_remote_code=trust_remote_code,
        seed=cfg.seed,
    ).to(dev_name)
    if cfg.lora_rank:
        attach_lora(teacher, cfg.lora_rank)
    if cfg.freeze_embeddings:
        freeze_embeddings(teacher)
    if cfg.freeze_layers:
        freeze_lower_layers(teacher, cfg.freeze_layers)
    groups = (
        layerwise_groups(teacher, cfg)
        if teacher_kind(cfg.head).layerwise_lr
        else [{"params": list(teacher.parameters()), "lr": cfg.lr, "weight_decay": cfg.weight_decay}]
    )  # a kind that fine-tunes at one rate (paper 004) has one group
    groups = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in groups]
    groups = [g for g in groups if g["params"]]  # LoRA, frozen embeddings: only what trains

    words_rule = implied_rule(s.words for s in train)  # what the front ends split raw text by

    def save(directory):
        with merged(teacher):  # LoRA: a plain model with the adapters merged
            teacher.save(directory)
        add_teacher_fields(directory, words=words_rule)

    out_dir = Path(out_dir)
    summary = fit(
        teacher.loss,
        [teacher],
        groups,
        train,
        dev,
        schema,
        cfg,
        save,
        log,
        out_dir=out_dir,
        run={"encoder": str(encoder)},
        device=torch.device(dev_name),
    )
    summary["encoder"] = str(encoder)
    summary["trainable_params"], summary["params"] = trainable(teacher)
    summary["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # Linux: KiB
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def warmup_linear_decay(steps: int, warmup: float):
    """The rate's factor at update ``u``: it rises linearly over the first ``warmup`` fraction of
    ``steps``, then falls linearly to 0."""
    warm = max(1, int(warmup * steps))
    return lambda u: min((u + 1) / warm, max(0.0, (steps - u) / max(1, steps - warm)))


def bucketed(indices: list[int], lengths: list[int], batch_size: int, pool: int, seed: int) -> list[int]:
    """``indices`` (already shuffled) reordered so that each run of ``batch_size`` holds sentences of
    similar length: cut into pools of ``pool`` batches, each pool sorted by length (stable, so ties
    keep the shuffle) and cut into batches, then the batches shuffled with ``seed``.
    Only the epoch's last batch can be short, and it stays last (the batch cutter expects it there)."""
    size = pool * batch_size
    batches = []
    for s in range(0, len(indices), size):
        chunk = sorted(indices[s : s + size], key=lambda i: lengths[i])
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    random.Random(seed).shuffle(batches)
    # a short batch (the epoch's remainder) moves to the end, where the batch cutter expects it
    batches.sort(key=lambda b: len(b) < batch_size)
    return [i for b in batches for i in b]


@dataclass
class SentenceBatch:
    """A batch of labelled sentences: their words and the gold targets of the teachers' kind."""

    words: list[list[str]]
    targets: torch.Tensor
    origin: tuple[int, int] = (0, 0)


def fit(
    loss_fn,
    teachers: list[Teacher],
    groups: list[dict],
    train,
    dev,
    schema: LabelSchema,
    cfg: FinetuneConfig,
    save,
    log=print,
    *,
    out_dir,
    run: dict | None = None,
    device=None,
) -> dict:
    """Fine-tune on the one trainer (``seqdistill.training``), for :func:`finetune` and
    co-fine-tuning: one stage of AdamW over ``groups``, linear warm-up and decay of every group's
    rate, the gradient norm clipped to 1, ``loss_fn(words, targets)`` per batch, early stopping on
    the mean dev F1 of ``teachers`` (patience counted once it is above 0: a SenTScore teacher tags
    every word O for its first epochs, and dev F1 0 is no plateau); ``save(out_dir)`` at every new
    best epoch. The batch order is a pure function of ``(seed, epoch)``. The run is checkpointed in
    ``out_dir`` and resumed from it (module docstring); ``run`` names what else the checkpoint must
    match (the encoders)."""
    sentences = list(train)
    if cfg.max_train_sentences:
        sentences = random.Random(cfg.seed).sample(sentences, min(cfg.max_train_sentences, len(sentences)))
    steps = cfg.epochs * ((len(sentences) + cfg.batch_size - 1) // cfg.batch_size)
    kind = teacher_kind(teachers[0].kind)

    lengths = [len(s.words) for s in sentences]

    def order(epoch: int) -> list[int]:
        indices = list(range(len(sentences)))
        random.Random(cfg.seed + epoch).shuffle(indices)
        if cfg.length_buckets:
            indices = bucketed(indices, lengths, cfg.batch_size, cfg.length_buckets, cfg.seed + epoch)
        return indices

    def collate(indices: list[int]) -> SentenceBatch:
        batch = [sentences[i] for i in indices]
        # the gold targets as the kind builds them for the cache's gold NLL: flat tag ids [B, W], or a
        # bilou-per-type teacher's per-type layers [B, W, E] from every entity of a nested sentence
        return SentenceBatch([s.words for s in batch], kind.gold_targets([s.gold_fields() for s in batch], schema))

    def dev_scores() -> dict:
        f1s = [evaluate(t, dev)["f1"] for t in teachers]
        return {"dev_f1": sum(f1s) / len(f1s), **({"dev_f1_each": f1s} if len(teachers) > 1 else {})}

    def autocast_loss(b: SentenceBatch):
        # decision: mixed precision by autocast, not bf16 weights, so that the optimiser's updates
        # and the CRF's partition function keep fp32 (the kinds cast their scores to fp32)
        with inference_autocast(torch.device(device or "cpu"), cfg.precision):
            return loss_fn(b.words, b.targets)

    params = [p for g in groups for p in g["params"]]
    stage = Stage(
        name="finetune",
        batches=ListBatches(order, collate, cfg.batch_size, size=len(sentences)),
        loss=lambda b: {"loss": autocast_loss(b)},
        params=lambda: params,
        optimizer=lambda _: torch.optim.AdamW(groups),
        evaluate=dev_scores,
        epochs=cfg.epochs,
        patience=cfg.patience,
        patience_above=0.0,
        lr_factor=warmup_linear_decay(steps, cfg.warmup),
        clip=1.0,
    )
    plan = Plan(
        model=teachers[0],
        modules={f"teacher{i}": t for i, t in enumerate(teachers[1:], 1)},
        stages=[stage],
        save=save,
        describe=f"fine-tuning on {len(sentences):,} sentences, {steps:,} steps at most",
        summary={"train_sentences": len(sentences)},
        keep_checkpoint=False,  # a teacher's checkpoint is the size of the teacher (1.3 GB for MPNet-base)
    )
    identity = {**(run or {}), "train_sentences": len(sentences), "config": settings(cfg)}
    return training.run(plan, Path(out_dir), cfg, identity, device=device, log=log)
