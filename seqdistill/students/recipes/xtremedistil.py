"""The XtremeDistil recipe (paper 001): representation and logit distillation into a BiLSTM tagger,
joint (eq. 7) or stage-wise with gradual unfreezing (§5.2-5.3, Algorithm 1), from a cache alone.

Schedules, the rows of the paper's Table 3:

    d0    joint: CE on labels only
    d1    joint: CE + LL (labels and logits)
    d2    joint: CE + LL + RL (labels, logits and representations)
    d3.1  stage 1 RL, stage 2 LL + CE, each stage trained end to end
    d3.2  d3.1 with gradual unfreezing            (d3 = d3.2)
    d4.1  stage 1 RL, stage 2 LL, stage 3 CE, each end to end
    d4.2  d4.1 with gradual unfreezing            (d4 = d4.2, the paper's best)
    joint the losses of ``--losses`` with the weights alpha (CE), beta (RL), gamma (LL) of eq. 7

Every stage is cut into *steps*. Without unfreezing a stage is one step that trains every group on
the path to its output. With gradual unfreezing all groups are frozen at the start of the stage and
unfrozen one at a time from the top (the stage's head, then the projection, the BiLSTM, the
embeddings); a group once unfrozen stays so. Each step trains until its validation loss (the
stage's loss on the dev rows) has not improved for ``patience`` epochs or ``epochs_per_step`` have
run, then restores the weights of its best epoch. Each step has its own Adam, its learning rate
falling on a cosine from 1e-3 to 1e-8 over the step's epoch budget (§5.2, Table 12).

Decisions where the paper is silent or not about our setting, named here:

* RL and LL are computed on every training row, labelled ones included (the paper sums them over
  the unlabelled set D_u; the teacher's outputs on D_l's sentences are in the cache too, and with
  ``--no-unlabelled`` they are the only transfer data). CE uses labelled rows only.
* Losses are sums over the words of a sentence averaged over the sentences of a batch; in a joint
  batch the CE mean is over the batch's labelled sentences (eq. 7's 1/|D_l| and 1/|D_u|).
* A CRF teacher's "logits" are its emissions (the scores before the CRF).
* Each unfreezing step is a stage of the engine that restores its best epoch's weights when it
  ends (``keep="restore"``), scored by the validation loss each epoch; the dev F1 of each epoch is
  recorded beside it. A run killed mid-step resumes mid-step.
* ``--select dev-f1`` (not the paper's; its default is ``val-loss``): a step whose losses include
  CE keeps and stops on its dev F1 instead. On full CoNLL-2003 (docs/RESULTS.md) the last step of
  d4.2 stopped on a rising validation CE while its dev F1 still rose: CE on dev grows with the
  softmax's confidence on the words it gets wrong, which F1 does not count. Steps of RL or LL
  alone keep the validation loss: the softmax head is not trained there, so dev F1 says nothing.
* ``--max-steps`` caps the optimiser updates of the whole run, as in every recipe.
* ``--hidden-norm standardize`` (not the paper's; its default is ``none``) standardises each dimension
  of the teacher's states by its mean and standard deviation over the cache's first shard before
  eq. 6's softmax. Eq. 6's softmax over the hidden dimensions depends on the states' scale, which
  teachers do not share: MPNet-base's layer 7 (RMS 0.28) gives a softmax of entropy 6.60 nats, near
  the uniform 6.64 over 768 dimensions, and EmbeddingGemma-300M's layer 12 (RMS 97, one dimension at
  1,731 on average) a one-hot one (entropy 0.0006, its largest probability 0.9997 on the same
  dimension for every word): RL would teach the student nothing about the word. Standardised, each
  dimension has unit variance over the words, whatever the teacher's scale or its outliers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ...cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ...cache_schema.encodings import reconstruct
from ...tokenization import SubwordBatch, words_to_subwords
from .. import losses as L
from ..archs.bilstm_tagger import GROUPS, BiLSTMTagger
from ..base import EMBEDDINGS
from ..common import dev_f1, new_tagger, open_cache, read_split, splits_with_dev
from ..config import RunConfig, option
from ..data import CacheStream, batches, gold_tags, pad_stack, parse_selection
from ..engine import Context, Plan, Stage
from . import Recipe

XD_LOSSES = ("ce", "ll", "rl")
SCHEDULES: dict[str, tuple[tuple[tuple[str, ...], ...], bool]] = {  # stages (their losses), gradual unfreezing
    "d0": ((("ce",),), False),
    "d1": ((("ce", "ll"),), False),
    "d2": ((("ce", "ll", "rl"),), False),
    "d3.1": ((("rl",), ("ll", "ce")), False),
    "d3.2": ((("rl",), ("ll", "ce")), True),
    "d4.1": ((("rl",), ("ll",), ("ce",)), False),
    "d4.2": ((("rl",), ("ll",), ("ce",)), True),
}
ALIASES = {"d3": "d3.2", "d4": "d4.2"}
SELECT = ("val-loss", "dev-f1")  # what a CE step keeps and stops on (--select)


@dataclass
class XtremeDistilConfig(RunConfig):
    """Defaults from the paper's Table 12 (E = 300, H = 600, dropout 0.2, batch 512, Adam with a
    cosine schedule 1e-3 -> 1e-8), except the teacher layer, which depends on the teacher: the
    default is the cache's only stored hidden layer."""

    teacher: str | None = option(None, "Teacher layer to learn from (default: the cache's only one).")
    schedule: str = option(
        "d4.2",
        "d0, d1, d2 (joint), d3.1, d3.2, d4.1, d4.2 (stage-wise; .2 = gradual "
        "unfreezing; d3 = d3.2, d4 = d4.2), or joint with --losses.",
        choices=("joint", *SCHEDULES, *ALIASES),
    )
    losses: tuple[str, ...] = option(
        ("ce", "ll"), "Schedule joint only: its losses, comma-separated.", choices=XD_LOSSES
    )
    alpha: float = option(1.0, "CE weight (eq. 7).")
    beta: float = option(1.0, "RL weight (eq. 7).")
    gamma: float = option(1.0, "LL weight (eq. 7).")
    teacher_layer: int | None = option(
        None, "Teacher hidden layer of the representation loss (default: the only one stored)."
    )
    embedding: str = option(
        "svd", "Input embeddings: the teacher's, their SVD reduction, or random (Table 7).", choices=EMBEDDINGS
    )
    embedding_dim: int = option(300, "E for svd and random (svd: at most the teacher's width).")
    hidden_size: int = option(600, "LSTM units per direction.")
    dropout: float = option(0.2, "On the embeddings and the LSTM output.")
    batch_size: int = option(512, "Sentences per batch.")
    lr: float = option(1e-3, "Adam's rate at the start of each step's cosine.")
    lr_min: float = option(1e-8, "Adam's rate at the end of each step's cosine.")
    epochs_per_step: int = option(10, "Most epochs of one stage or unfreezing step.")
    patience: int = option(2, "Epochs without a better validation loss that end a step.")
    select: str = option(
        "val-loss",
        "What a step that trains on labels (CE) keeps and stops on: its validation loss (the paper's) "
        "or dev F1. Steps of RL or LL alone always use the validation loss.",
        choices=SELECT,
    )
    buffer_size: int = option(8192, "Examples shuffled and bucketed by length together.")
    hidden_norm: str = option(
        "none",
        "RL's teacher states as stored (none, the paper's) or each dimension standardised over the cache's "
        "first shard (standardize: for a teacher whose few huge dimensions make eq. 6's softmax one-hot).",
        choices=("none", "standardize"),
    )


def resolve_schedule(cfg: XtremeDistilConfig) -> tuple[tuple[tuple[str, ...], ...], bool]:
    name = ALIASES.get(cfg.schedule, cfg.schedule)
    if name == "joint":
        bad = set(cfg.losses) - set(XD_LOSSES)
        if bad or not cfg.losses:
            raise ValueError(f"unknown losses {sorted(bad)}; choose from {', '.join(XD_LOSSES)}")
        return (tuple(cfg.losses),), False
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {cfg.schedule!r}; choose from joint, {', '.join(SCHEDULES)}, d3, d4")
    return SCHEDULES[name]


def metric(losses: tuple[str, ...], cfg: XtremeDistilConfig) -> str:
    """The record field a step with ``losses`` keeps and stops on (``--select``; module docstring)."""
    return "dev_f1" if cfg.select == "dev-f1" and "ce" in losses else "val_loss"


def unfreezing_steps(losses: tuple[str, ...], gradual: bool) -> list[tuple[str, ...]]:
    """The groups trainable in each step of a stage whose loss is ``losses`` (Algorithm 1): the
    stage's heads (softmax for CE, regressor for LL, none for RL) and everything below them;
    with gradual unfreezing, one more group per step from the top."""
    heads = tuple(g for g, loss in (("softmax", "ce"), ("regressor", "ll")) if loss in losses)
    below = ("projection", "bilstm", "embeddings")
    if not gradual:
        return [heads + below]
    layers = ([heads] if heads else []) + [(g,) for g in below]
    return [tuple(g for layer in layers[: i + 1] for g in layer) for i in range(len(layers))]


def set_trainable(model: BiLSTMTagger, groups: tuple[str, ...]) -> list[torch.nn.Parameter]:
    """Freeze every group, unfreeze ``groups``; return the trainable parameters."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown parameter groups {sorted(unknown)}; the student has {', '.join(GROUPS)}")
    trainable = []
    for name, params in model.groups().items():
        for p in params:
            p.requires_grad_(name in groups)
            if name in groups:
                trainable.append(p)
    return trainable


def cosine_lr(step: int, total: int, high: float, low: float) -> float:
    """Cosine decay from ``high`` to ``low`` over ``total`` updates, then ``low``."""
    t = min(step / max(total, 1), 1.0)
    return low + 0.5 * (high - low) * (1 + math.cos(math.pi * t))


@dataclass
class Batch:
    inputs: SubwordBatch
    tags: torch.Tensor  # [B, L], -1 past the words and on unlabelled rows
    labelled: torch.Tensor  # [B]
    teacher_logits: torch.Tensor | None = None
    teacher_hidden: torch.Tensor | None = None
    origin: tuple[int, int] | None = None


class Collate:
    def __init__(
        self,
        tokenizer,
        schema: LabelSchema,
        teacher: str,
        logits_field: str | None,
        hidden_field: str | None,
        pca: tuple[np.ndarray, np.ndarray] | None = None,
        standardize: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        self.tokenizer, self.schema, self.teacher = tokenizer, schema, teacher
        self.logits_field, self.hidden_field, self.pca = logits_field, hidden_field, pca
        self.standardize = standardize  # each dimension's (mean, std), --hidden-norm standardize

    def __call__(self, rows: list[dict]) -> Batch:
        words, tags, labelled = gold_tags(rows, self.schema)
        Lmax = tags.shape[1]
        batch = Batch(words_to_subwords(self.tokenizer, words), tags, labelled)
        if self.logits_field:
            batch.teacher_logits = pad_stack([r[self.teacher][self.logits_field] for r in rows], Lmax)
        if self.hidden_field:
            states = [r[self.teacher][self.hidden_field] for r in rows]
            if self.pca is not None:  # PCA coefficients back to the teacher's space (see plan)
                states = [reconstruct(c, *self.pca) for c in states]
            if self.standardize is not None:
                mean, std = self.standardize
                states = [(x - mean) / std for x in states]
            batch.teacher_hidden = pad_stack(states, Lmax)
        return batch


def dimension_stats(reader, teacher: str, field: str, pca) -> tuple[np.ndarray, np.ndarray]:
    """Each dimension's mean and standard deviation (at least 1e-6) of the teacher's states over the
    cache's first shard, reconstructed from PCA coefficients when stored so (``--hidden-norm
    standardize``; the module docstring says why)."""
    values = reader.read_shard(0, {teacher: [field]}).get(teacher, field).values
    states = np.asarray(reconstruct(values, *pca) if pca is not None else values, dtype=np.float64)
    return states.mean(0).astype(np.float32), np.maximum(states.std(0), 1e-6).astype(np.float32)


def loss_parts(model: BiLSTMTagger, batch: Batch, losses: tuple[str, ...], device) -> dict[str, torch.Tensor]:
    """The parts of eq. 7 restricted to ``losses`` (batch means)."""
    x = batch.inputs.to(device)
    out = model(x)
    mask = x.word_mask
    parts: dict[str, torch.Tensor] = {}
    if "ce" in losses:
        lab = batch.labelled.to(device)
        ce = L.cross_entropy_loss(out.logits, batch.tags.to(device), mask)
        parts["ce"] = ce[lab].mean() if lab.any() else ce.sum() * 0
    if "ll" in losses:
        parts["ll"] = L.logit_loss(out.regression, batch.teacher_logits.to(device), mask).mean()
    if "rl" in losses:
        parts["rl"] = L.representation_loss(out.projection, batch.teacher_hidden.to(device), mask).mean()
    return parts


def weighted(parts: dict[str, torch.Tensor], cfg: XtremeDistilConfig) -> torch.Tensor:
    """Eq. 7: alpha CE + beta RL + gamma LL."""
    weight = {"ce": cfg.alpha, "rl": cfg.beta, "ll": cfg.gamma}
    return sum(weight[k] * v for k, v in parts.items())


@torch.no_grad()
def validation_loss(
    model: BiLSTMTagger, dev_stream: CacheStream, losses: tuple[str, ...], cfg: XtremeDistilConfig, device
) -> float:
    """The step's loss on the dev rows, averaged over batches weighted by their sentences."""
    model.eval()
    total, n = 0.0, 0
    dev_stream.set_epoch(0)
    for batch in batches(dev_stream):
        total += weighted(loss_parts(model, batch, losses, device), cfg).item() * len(batch.tags)
        n += len(batch.tags)
    return total / max(n, 1)


def plan(ctx: Context) -> Plan:
    """One engine stage per unfreezing step of the schedule (Algorithm 1)."""
    cfg: XtremeDistilConfig = ctx.cfg
    stages, gradual = resolve_schedule(cfg)
    used = {loss for stage in stages for loss in stage}
    reader, teacher = open_cache(ctx.reader, cfg.teacher, cfg.embedding)
    schema = reader.manifest.label_schema
    info = reader.manifest.teachers[teacher]
    logits_field = ("emissions" if info.kind == "crf" else "logits") if "ll" in used else None
    hidden_field, hidden_size, pca = None, None, None
    stored = sorted(info.hidden_layers)
    if "rl" in used:
        if cfg.teacher_layer is None and len(stored) != 1:
            raise CacheError(
                f"choose the teacher layer for the representation loss with --teacher-layer; "
                f"teacher {teacher!r} has hidden layers stored: {stored or 'none'}"
                + ("" if stored else " (build with --hidden-layers)")
            )
        wanted = stored[0] if cfg.teacher_layer is None else cfg.teacher_layer
        if wanted not in stored:
            raise CacheError(
                f"teacher {teacher!r} has no hidden layer {wanted} in the cache; stored layers: "
                f"{', '.join(map(str, stored)) or 'none'} (add one with distill-cache build --hidden-layers)"
            )
        hidden_field = f"hidden_{wanted}"
        spec = reader.manifest.layers[teacher].field(hidden_field)
        hidden_size = spec.shape[0]
        if "project_from" in spec.encoding:
            # Decision: eq. 6 compares softmaxes over the hidden dimensions, which a rotation onto
            # PCA axes changes (the leading coefficients dominate: a peakier softmax, a 2.7x larger
            # loss and -10 dev F1 in benchmarks/compact_cache.py). So this loss reconstructs the
            # teacher's states (x = c C + mu, a fixed linear map per batch) and the projection
            # maps onto the teacher's width; MT's hidden loss, an MSE after a learned linear map,
            # learns against the stored coefficients directly.
            pca = reader.projection(teacher, hidden_field)
            hidden_size = spec.encoding["project_from"]
    train_names, dev_names = splits_with_dev(
        reader, cfg, "XtremeDistil restores each step's best weights by validation loss"
    )
    model, tokenizer = new_tagger(
        reader,
        teacher,
        cfg,
        ctx.device,
        projection_dim=hidden_size or "teacher",
        pooling=info.pooling,
        extra={"cache": reader.store.url, "recipe": "xtremedistil", "schedule": cfg.schedule},
    )
    selected = parse_selection(train_names, reader)
    labelled_sel = {(c.name, c.split) for c in reader.manifest.corpora if c.labelled and (c.name, c.split) in selected}
    fields = {EXAMPLES_LAYER: ["words", "tags"], teacher: [f for f in (logits_field, hidden_field) if f]}
    standardize = None
    if hidden_field and cfg.hidden_norm == "standardize":
        standardize = dimension_stats(reader, teacher, hidden_field, pca)
    collate = Collate(tokenizer, schema, teacher, logits_field, hidden_field, pca, standardize)
    dev_stream = ctx.stream(
        fields, parse_selection(dev_names, reader), collate, shuffle=False, sample=False, whole=True
    )
    dev_words, dev_tags = read_split(reader, dev_names)
    counts = {(c.name, c.split): c.examples for c in reader.manifest.corpora}
    steps = []
    for s, losses in enumerate(stages, 1):
        rows = labelled_sel if losses == ("ce",) else selected
        if not rows:
            raise CacheError(
                f"stage {s} trains on labels, and the training set {', '.join(train_names)} has no "
                "labelled corpus: add one with --train"
            )
        sampled = cfg.unlabelled_sentences is not None and rows is selected
        per_epoch = sum(math.ceil(counts[k] / cfg.batch_size) for k in rows if not sampled or k in labelled_sel)
        if sampled:  # --unlabelled-sentences applies to the distillation stages' rows only
            per_epoch += math.ceil(cfg.unlabelled_sentences / cfg.batch_size)
        total = cfg.epochs_per_step * math.ceil(per_epoch / ctx.world)
        for groups in unfreezing_steps(losses, gradual):
            steps.append(
                Stage(
                    name=f"stage {s} [{'+'.join(losses)}] unfrozen {groups[-1]}",
                    batches=ctx.stream(fields, rows, collate, sample=sampled),
                    loss=lambda batch, losses=losses: loss_parts(model, batch, losses, ctx.device),
                    params=lambda groups=groups: set_trainable(model, groups),
                    optimizer=lambda ps: torch.optim.Adam(ps, lr=cfg.lr),
                    evaluate=lambda losses=losses: {
                        "val_loss": validation_loss(model, dev_stream, losses, cfg, ctx.device),
                        "dev_f1": dev_f1(model, tokenizer, dev_words, dev_tags, schema.scheme),
                    },
                    metric=metric(losses, cfg),
                    mode="max" if metric(losses, cfg) == "dev_f1" else "min",
                    epochs=cfg.epochs_per_step,
                    patience=cfg.patience,
                    keep="restore",
                    combine=lambda parts: weighted(parts, cfg),
                    lr_at=lambda u, total=total: cosine_lr(u, total, cfg.lr, cfg.lr_min),
                    info={
                        "stage": s,
                        "losses": list(losses),
                        "groups": list(groups),
                        "selected_on": metric(losses, cfg),
                    },
                )
            )
    n_params = sum(p.numel() for p in model.parameters())
    return Plan(
        model,
        tokenizer,
        steps,
        train=train_names,
        dev=dev_names,
        summary={"parameters": n_params},
        describe=f"training bilstm-tagger ({n_params:,} parameters) with schedule {cfg.schedule} on "
        f"{', '.join(train_names)}"
        + (f"; teacher layer {hidden_field}" if hidden_field else "")
        + (" (each dimension standardised)" if standardize is not None else ""),
    )


RECIPE = Recipe(
    "xtremedistil",
    XtremeDistilConfig,
    plan,
    "XtremeDistil (paper 001): a BiLSTM tagger over subwords, with logit and representation "
    "distillation, joint or stage-wise with gradual unfreezing.",
)
