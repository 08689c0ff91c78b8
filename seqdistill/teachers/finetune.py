"""Fine-tuning a teacher on a labelled corpus (paper 000's recipe by default).

AdamW; the encoder's top block learns at ``lr`` and each block below at ``layer_decay`` times the
rate of the one above (embeddings lowest), "discriminative fine-tuning" (paper 000, §3.1 and
Table 6); the linear head and the CRF learn at ``head_lr`` (1e-3); dropout 0.5 on the encoder
output; linear warm-up then linear decay; early stopping on dev F1 (seqeval, CoNLL micro), the
best epoch's weights written to the output directory.

Resumable: every ``checkpoint_every`` optimiser steps and at every epoch end the run writes
``OUT/checkpoint`` (``seqdistill.checkpoint``: weights, AdamW moments, the schedule's position and
the torch RNG, no pickle). Killed at any point, the same command continues from the last checkpoint
and ends with the same weights as an uninterrupted run: the batch order is a pure function of
``(seed, epoch)``, so the batches a checkpoint had done are skipped. A checkpoint of a different
run (another encoder, corpus size or setting) is refused by name, never silently mixed. The
checkpoint is deleted when the run ends (for MPNet-base it is about 1.3 GB).
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..cache_schema import LabelSchema
from ..cache_schema.storage import failpoint
from ..checkpoint import (
    CHECKPOINT,
    changed_setting,
    config_defaults,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from ..metrics import span_scores, span_set_scores
from .kinds import teacher_kind
from .loading import build_teacher
from .models import Teacher


@dataclass
class FinetuneConfig:
    head: str = "crf"  # crf | softmax | sentscore (an encoder-decoder on SenT' targets, paper 004)
    epochs: int = 10
    batch_size: int = 32  # paper 000, Table 6
    lr: float = 1e-5  # encoder top block (paper 000, Table 6: "BERT initial 1e-5")
    head_lr: float = 1e-3  # linear head and CRF (paper 000, Table 6: "CRF 1e-3")
    layer_decay: float = 0.9  # per block towards the input (paper 000, §3.1)
    dropout: float = 0.5  # on the encoder output (paper 000, Table 6)
    weight_decay: float = 0.01
    warmup: float = 0.1  # fraction of steps
    patience: int = 3  # epochs without dev F1 gain before stopping
    pooling: str = "first"
    max_length: int | None = None
    max_train_sentences: int | None = None  # a subset, for demos and quick runs
    seed: int = 13
    checkpoint_every: int = 100  # optimiser steps between checkpoints (and at every epoch end); 0: epoch ends only

    @classmethod
    def for_head(cls, head: str, **overrides) -> "FinetuneConfig":
        """The defaults of the paper behind ``head``: paper 000's for crf and softmax; paper 004's
        for sentscore (§5: AdamW at 1e-3 for the whole model, 20 epochs, patience 5, batch 32)."""
        base = {"epochs": 20, "lr": 1e-3, "patience": 5} if head == "sentscore" else {}
        return cls(head=head, **{**base, **overrides})


def layerwise_groups(teacher: Teacher, cfg: FinetuneConfig) -> list[dict]:
    """Parameter groups: block i of N at lr * decay^(N-1-i), embeddings at lr * decay^N."""
    n = teacher.num_layers
    groups: dict[float, list] = {}
    for name, p in teacher.encoder.named_parameters():
        m = re.search(r"\.layers?\.(\d+)\.", f".{name}")
        if m:
            depth = int(m.group(1))
        elif "embed" in name:
            depth = -1
        else:  # pooler, final norms: the top
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
    groups = (
        [{"params": list(teacher.parameters()), "lr": cfg.lr, "weight_decay": cfg.weight_decay}]
        if cfg.head == "sentscore"
        else layerwise_groups(teacher, cfg)
    )  # paper 004: one AdamW rate
    out_dir = Path(out_dir)
    summary = fit(
        teacher.loss,
        [teacher],
        groups,
        train,
        dev,
        schema,
        cfg,
        lambda: teacher.save(out_dir),
        log,
        out_dir=out_dir,
        run={"encoder": str(encoder)},
    )
    summary["encoder"] = str(encoder)
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def warmup_linear_decay(optim, steps: int, warmup: float) -> torch.optim.lr_scheduler.LambdaLR:
    """The rate rises linearly over the first ``warmup`` fraction of ``steps``, then falls linearly to 0."""
    warm = max(1, int(warmup * steps))
    return torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )


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
    out_dir=None,
    run: dict | None = None,
) -> dict:
    """The training loop shared by :func:`finetune` and co-fine-tuning: AdamW over ``groups``,
    linear warm-up and decay, ``loss_fn(words, tags)`` per batch, early stopping on the mean dev F1
    of ``teachers``; ``save()`` is called at every new best epoch. With ``out_dir`` the run is
    checkpointed there and resumed from it (module docstring); ``run`` names what else the
    checkpoint must match (the encoders)."""
    sentences = list(train)
    if cfg.max_train_sentences:
        sentences = random.Random(cfg.seed).sample(sentences, min(cfg.max_train_sentences, len(sentences)))
    per_epoch = (len(sentences) + cfg.batch_size - 1) // cfg.batch_size
    steps = cfg.epochs * per_epoch
    optim = torch.optim.AdamW(groups)
    params = [p for g in groups for p in g["params"]]
    sched = warmup_linear_decay(optim, steps, cfg.warmup)
    modules = {f"teacher{i}": t for i, t in enumerate(teachers)}
    identity = {"config": asdict(cfg), "train_sentences": len(sentences), **(run or {})}
    pos = {"epoch": 0, "done": 0, "total": 0.0, "best": -1.0, "best_epoch": -1, "history": [], "seconds": 0.0}
    if out_dir is not None:
        resumed = load_checkpoint(out_dir, modules, optim)
        if resumed is not None:
            _same_run(Path(out_dir), resumed["identity"], identity)
            sched.load_state_dict(resumed["schedule"])
            pos.update(resumed["position"])
            log(
                f"resuming from {Path(out_dir) / CHECKPOINT}: epoch {pos['epoch'] + 1}, batch {pos['done']} of {per_epoch}"
            )

    def checkpoint(**position) -> None:
        if out_dir is not None:
            save_checkpoint(
                out_dir,
                modules,
                optim,
                {"identity": identity, "schedule": sched.state_dict(), "position": {**pos, **position}},
            )

    best, best_epoch, history = pos["best"], pos["best_epoch"], pos["history"]
    for epoch in range(pos["epoch"], cfg.epochs):
        for t in teachers:
            t.train()
        order = list(sentences)
        random.Random(cfg.seed + epoch).shuffle(order)
        skip = pos["done"] if epoch == pos["epoch"] else 0
        total = pos["total"] if skip else 0.0
        spent = pos["seconds"] if skip else 0.0
        bar = tqdm(
            range(skip * cfg.batch_size, len(order), cfg.batch_size),
            desc=f"epoch {epoch + 1}/{cfg.epochs}",
            unit="batch",
            leave=False,
            initial=skip,
            total=per_epoch,
        )
        t0, n = time.time(), skip
        for n, i in enumerate(bar, skip + 1):
            batch = order[i : i + cfg.batch_size]
            tags = _gold_targets(batch, schema, teachers[0].kind)
            loss = loss_fn([s.words for s in batch], tags)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            sched.step()
            total += loss.item()
            bar.set_postfix(loss=f"{total / n:.3f}")
            failpoint(f"finetune-step:{epoch * per_epoch + n}")
            if cfg.checkpoint_every and n % cfg.checkpoint_every == 0 and n < per_epoch:
                checkpoint(epoch=epoch, done=n, total=total, seconds=spent + time.time() - t0)
        f1s = [evaluate(t, dev)["f1"] for t in teachers]
        f1 = sum(f1s) / len(f1s)
        record = {
            "epoch": epoch + 1,
            "loss": total / max(1, n),
            "dev_f1": f1,
            "seconds": round(spent + time.time() - t0, 1),
        }
        if len(teachers) > 1:
            record["dev_f1_each"] = f1s
        history.append(record)
        improved = f1 > best
        log(
            f"epoch {epoch + 1}: loss {record['loss']:.4f}  dev F1 {100 * f1:.2f}"
            + (" (" + ", ".join(f"{100 * x:.2f}" for x in f1s) + ")" if len(teachers) > 1 else "")
            + f"{'  (best, saved)' if improved else ''}  [{record['seconds']} s]"
        )
        if improved:
            best, best_epoch = f1, epoch + 1
            save()
        stop = not improved and best > 0 and epoch + 1 - best_epoch >= cfg.patience
        # patience counts once something is learnt (a SenTScore teacher tags every word O for its
        # first epochs: dev F1 0 is no plateau)
        pos.update(best=best, best_epoch=best_epoch, history=history)
        checkpoint(epoch=cfg.epochs if stop else epoch + 1, done=0, total=0.0, seconds=0.0)
        if stop:
            log(f"no dev F1 gain for {cfg.patience} epochs: stopping")
            break
    if out_dir is not None:
        remove_checkpoint(out_dir)
    return {
        "config": asdict(cfg),
        "best_epoch": best_epoch,
        "best_dev_f1": best,
        "history": history,
        "train_sentences": len(sentences),
    }


def _same_run(out_dir: Path, saved: dict, now: dict) -> None:
    """Refuse to resume a checkpoint of another run, naming the first setting that differs."""
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if key == "config" and isinstance(a, dict) and isinstance(b, dict):
            k = changed_setting(a, b, config_defaults(FinetuneConfig()), ignore=("checkpoint_every",))
            if k is not None:
                raise ValueError(
                    f"{out_dir / CHECKPOINT} is the checkpoint of another run ({k} was {a.get(k)!r}, "
                    f"now {b.get(k)!r}): run the same command to resume it, or remove it (or use "
                    "another --out) to start afresh"
                )
        elif a != b:
            raise ValueError(
                f"{out_dir / CHECKPOINT} is the checkpoint of another run ({key} was {a!r}, now {b!r}): "
                "run the same command to resume it, or remove it (or use another --out) to start afresh"
            )


def _gold_targets(batch, schema: LabelSchema, kind: str) -> torch.Tensor:
    """A batch's gold targets as the teacher's kind builds them for the cache's gold NLL
    (``TeacherKind.gold_targets`` over each sentence's ``gold_fields()``): flat tag ids ``[B, W]``,
    or, for a bilou-per-type teacher, per-type BILOU layers ``[B, W, E]`` from every entity of a
    nested sentence (else its tags)."""
    return teacher_kind(kind).gold_targets([s.gold_fields() for s in batch], schema)
