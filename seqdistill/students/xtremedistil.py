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
* Resuming (``resume=True``) continues after the last finished step: its restored-best weights are
  checkpointed when it ends. A step cut off midway is run again from its start.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .. import distributed
from ..cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ..metrics import span_scores
from . import losses as L
from ..checkpoint import load_checkpoint, save_checkpoint
from .data import CacheStream, batches, gold_tags, pad_stack, parse_selection, stream_config
from .models import save_student
from .tagger import GROUPS, BiLSTMTagger, SubwordBatch, words_to_subwords
from .common import RunConfig, new_tagger, open_cache, predict_tags, read_split, splits_with_dev

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


@dataclass
class XtremeDistilConfig(RunConfig):
    """Defaults from the paper's Table 12 (E = 300, H = 600, dropout 0.2, batch 512, Adam with a
    cosine schedule 1e-3 -> 1e-8), except the teacher layer, which depends on the teacher: the
    default is the cache's only stored hidden layer."""

    schedule: str = "d4.2"
    losses: tuple[str, ...] = ("ce", "ll")  # schedule "joint" only
    alpha: float = 1.0  # CE weight (eq. 7)
    beta: float = 1.0  # RL weight
    gamma: float = 1.0  # LL weight
    teacher: str | None = None
    teacher_layer: int | None = None
    embedding: str = "svd"  # svd | teacher | random (the paper's Table 7)
    embedding_dim: int = 300
    hidden_size: int = 600
    dropout: float = 0.2
    batch_size: int = 512
    lr: float = 1e-3
    lr_min: float = 1e-8
    epochs_per_step: int = 10
    patience: int = 2  # epochs without a better validation loss that end a step
    buffer_size: int = 8192


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
class XDBatch:
    inputs: SubwordBatch
    tags: torch.Tensor  # [B, L], -1 past the words and on unlabelled rows
    labelled: torch.Tensor  # [B]
    teacher_logits: torch.Tensor | None = None
    teacher_hidden: torch.Tensor | None = None
    origin: tuple[int, int] | None = None


class XDCollate:
    def __init__(self, tokenizer, schema: LabelSchema, teacher: str, logits_field: str | None,
                 hidden_field: str | None):
        self.tokenizer, self.schema, self.teacher = tokenizer, schema, teacher
        self.logits_field, self.hidden_field = logits_field, hidden_field

    def __call__(self, rows: list[dict]) -> XDBatch:
        words, tags, labelled = gold_tags(rows, self.schema)
        Lmax = tags.shape[1]
        batch = XDBatch(words_to_subwords(self.tokenizer, words), tags, labelled)
        if self.logits_field:
            batch.teacher_logits = pad_stack([r[self.teacher][self.logits_field] for r in rows], Lmax)
        if self.hidden_field:
            batch.teacher_hidden = pad_stack([r[self.teacher][self.hidden_field] for r in rows], Lmax)
        return batch


def stage_loss(model: BiLSTMTagger, batch: XDBatch, losses: tuple[str, ...], cfg: XtremeDistilConfig,
               device) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of eq. 7 restricted to ``losses``, and its parts (batch means)."""
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
    weight = {"ce": cfg.alpha, "rl": cfg.beta, "ll": cfg.gamma}
    total = sum(weight[k] * v for k, v in parts.items())
    return total, {k: v.item() for k, v in parts.items()}


def train_xtremedistil(cache: str, out_dir, cfg: XtremeDistilConfig | None = None, *,
                       storage_options: dict | None = None, log=print) -> dict:
    """Train an XtremeDistil student from ``cache`` and save it to ``out_dir``."""
    cfg = cfg or XtremeDistilConfig()
    stages, gradual = resolve_schedule(cfg)
    used = {loss for stage in stages for loss in stage}
    distributed.require_one_process("the xtremedistil recipe")
    reader, teacher = open_cache(cache, storage_options, cfg.teacher, cfg.embedding, cfg.seed)
    schema = reader.manifest.label_schema
    info = reader.manifest.teachers[teacher]
    layer = reader.manifest.layers[teacher]
    logits_field = ("emissions" if info.kind == "crf" else "logits") if "ll" in used else None
    hidden_field, hidden_size = None, None
    stored = sorted(info.hidden_layers)
    if "rl" in used:
        if cfg.teacher_layer is None and len(stored) != 1:
            raise CacheError(f"choose the teacher layer for the representation loss with --teacher-layer; "
                             f"teacher {teacher!r} has hidden layers stored: {stored or 'none'}"
                             + ("" if stored else " (build with --hidden-layers)"))
        wanted = stored[0] if cfg.teacher_layer is None else cfg.teacher_layer
        if wanted not in stored:
            raise CacheError(f"teacher {teacher!r} has no hidden layer {wanted} in the cache; stored layers: "
                             f"{', '.join(map(str, stored)) or 'none'} (add one with distill-cache build --hidden-layers)")
        hidden_field = f"hidden_{wanted}"
        hidden_size = layer.field(hidden_field).shape[0]

    model, tokenizer, device = new_tagger(
        reader, teacher, cfg, projection_dim=hidden_size or "teacher", pooling=info.pooling,
        extra={"cache": reader.store.url, "recipe": "xtremedistil", "schedule": cfg.schedule})
    train_names, dev_names = splits_with_dev(reader, cfg, "XtremeDistil restores each step's best weights by "
                                                          "validation loss")
    selected = parse_selection(train_names, reader)
    labelled_sel = {(c.name, c.split) for c in reader.manifest.corpora if c.labelled and (c.name, c.split) in selected}
    dev_sel = parse_selection(dev_names, reader)
    fields = {EXAMPLES_LAYER: ["words", "tags"], teacher: [f for f in (logits_field, hidden_field) if f]}
    collate = XDCollate(tokenizer, schema, teacher, logits_field, hidden_field)
    dev_words, dev_tags = read_split(reader, dev_names)
    counts = {(c.name, c.split): c.examples for c in reader.manifest.corpora}

    def stream(select, shuffle=True, sample=False):  # --unlabelled-sentences applies to the training rows only
        return CacheStream(reader, fields, select, collate, stream_config(cfg, shuffle, sample))

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = open(out_dir / "metrics.jsonl", "a")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"training bilstm-tagger ({n_params:,} parameters) with schedule {cfg.schedule} on {', '.join(train_names)}"
        + (f"; teacher layer {hidden_field}" if hidden_field else ""))
    plan = [(s, losses, groups) for s, losses in enumerate(stages, 1) for groups in unfreezing_steps(losses, gradual)]
    holder = torch.optim.Adam(model.parameters())  # the checkpoint's optimizer slot; each step has its own Adam
    done, history = 0, []
    if cfg.resume:
        state = load_checkpoint(out_dir, {"model": model}, holder)
        if state:
            done, history = state["done"], state["history"]
            log(f"resuming after step {done} of {len(plan)}")
    t0 = time.time()
    for index, (s, losses, groups) in enumerate(plan):
        if index < done:
            continue
        rows = labelled_sel if losses == ("ce",) else selected
        if not rows:
            raise CacheError(f"stage {s} trains on labels, and the training set {', '.join(train_names)} has no "
                             "labelled corpus: add one with --train")
        sampled = cfg.unlabelled_sentences is not None and rows is selected
        train_stream, dev_stream = stream(rows, sample=sampled), stream(dev_sel, shuffle=False)
        per_epoch = sum(math.ceil(counts[k] / cfg.batch_size) for k in rows if not sampled or k in labelled_sel)
        if sampled:
            per_epoch += math.ceil(cfg.unlabelled_sentences / cfg.batch_size)
        record = run_step(model, groups, losses, train_stream, dev_stream, per_epoch, cfg, device,
                          desc=f"stage {s} [{'+'.join(losses)}] unfrozen {groups[-1]}")
        record.update(stage=s, losses=list(losses), groups=list(groups), seconds=round(time.time() - t0, 1))
        record["dev_f1"] = span_scores(dev_tags, predict_tags(model, tokenizer, dev_words), schema.scheme)["f1"]
        history.append(record)
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        log(f"stage {s} ({'+'.join(losses)}), unfrozen {', '.join(groups)}: {record['epochs']} epochs, "
            f"best validation loss {record['val_loss']:.4f} (epoch {record['best_epoch']}), dev F1 {100 * record['dev_f1']:.2f}")
        save_checkpoint(out_dir, {"model": model}, holder, {"done": index + 1, "history": history})
    metrics.close()
    set_trainable(model, GROUPS)
    save_student(model, tokenizer, out_dir)
    summary = {"config": asdict(cfg), "recipe": "xtremedistil", "history": history, "train": train_names,
               "dev": dev_names, "best_dev_f1": history[-1]["dev_f1"] if history else None,
               "parameters": n_params}
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def run_step(model: BiLSTMTagger, groups: tuple[str, ...], losses: tuple[str, ...], train_stream: CacheStream,
             dev_stream: CacheStream, per_epoch: int, cfg: XtremeDistilConfig, device, desc: str = "") -> dict:
    """Train ``groups`` on ``losses`` until the validation loss stops improving, then restore the
    best epoch's weights (§5.3: "restore model to the best configuration based on validation loss")."""
    params = set_trainable(model, groups)
    optim = torch.optim.Adam(params, lr=cfg.lr)
    total = cfg.epochs_per_step * per_epoch
    # the weights the step starts from count as epoch 0: a step that only makes things worse is undone
    best, best_epoch, updates, epoch = validation_loss(model, dev_stream, losses, cfg, device), 0, 0, 0
    best_state = copy.deepcopy(model.state_dict())
    for epoch in range(1, cfg.epochs_per_step + 1):
        train_stream.set_epoch(epoch)
        model.train()
        sums: dict[str, float] = {}
        n = 0
        bar = tqdm(batches(train_stream), desc=f"{desc} epoch {epoch}", unit="batch", leave=False)
        for batch in bar:
            for g in optim.param_groups:
                g["lr"] = cosine_lr(updates, total, cfg.lr, cfg.lr_min)
            loss, parts = stage_loss(model, batch, losses, cfg, device)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 5.0)
            optim.step()
            updates, n = updates + 1, n + 1
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
            bar.set_postfix({k: f"{v / n:.3f}" for k, v in sums.items()} | {"val": f"{best:.3f}"})
            if cfg.max_steps and n >= cfg.max_steps:
                break
        val = validation_loss(model, dev_stream, losses, cfg, device)
        if val < best:
            best, best_epoch = val, epoch
            best_state = copy.deepcopy(model.state_dict())
        if epoch - best_epoch >= cfg.patience:
            break
    model.load_state_dict(best_state)
    return {"epochs": epoch, "best_epoch": best_epoch, "val_loss": best}


@torch.no_grad()
def validation_loss(model: BiLSTMTagger, dev_stream: CacheStream, losses: tuple[str, ...],
                    cfg: XtremeDistilConfig, device) -> float:
    """The step's loss on the dev rows, averaged over batches weighted by their sentences."""
    model.eval()
    total, n = 0.0, 0
    dev_stream.set_epoch(0)
    for batch in batches(dev_stream):
        loss, _ = stage_loss(model, batch, losses, cfg, device)
        total += loss.item() * len(batch.tags)
        n += len(batch.tags)
    return total / max(n, 1)


__all__ = ["XtremeDistilConfig", "train_xtremedistil", "unfreezing_steps", "set_trainable", "run_step",
           "SCHEDULES", "XD_LOSSES"]
