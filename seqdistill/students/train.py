"""Training a student from a cache: the MGKD recipe (paper 000) on the streaming trainer.

The loss is the uncertainty-weighted (eq. 9) or fixed-weight (eq. 8) sum of the chosen parts:
``hard`` (eq. 7), ``seq-ce`` (eq. 4), ``fuzzy`` (eq. 6), ``token-em`` and ``token-pos`` (eq. 10).
Hard labels are the gold tags on labelled rows and the teacher's best path on unlabelled rows;
the sequence losses use the teacher's k-best paths of both (§3.2). AdamW, early stopping on dev F1
with patience 5, the best epoch's student saved; metrics appended to ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .. import distributed
from ..cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ..cache_schema.storage import failpoint
from ..crf import log_partition
from ..metrics import span_scores
from . import losses as L
from ..checkpoint import load_checkpoint, save_checkpoint
from .common import RunConfig, default_splits, device_for, open_cache, predict_tags, read_split, teacher_exports
from .data import CacheStream, batches, pad_stack, parse_selection, stream_config
from ..encoding import WordBatch, words_to_bags
from .models import BiLSTMCRF, StudentConfig, init_embeddings, save_student

LOSSES = ("hard", "seq-ce", "fuzzy", "token-em", "token-pos")


@dataclass
class TrainConfig(RunConfig):
    recipe: str = "mgkd"
    teacher: str | None = None  # teacher layer (default: the cache's only one)
    losses: tuple[str, ...] = ("hard", "seq-ce", "fuzzy")
    k: int = 5  # k-best paths used (at most the K the cache holds)
    weighting: str = "uncertainty"  # uncertainty (eq. 9) | fixed (eq. 8)
    weights: tuple[float, ...] = ()  # fixed weights, one per loss (default 1)
    temperature: float = 1.0  # token-level losses only
    embedding: str = "teacher"  # teacher (TE) | svd | random
    embedding_dim: int | None = None  # svd/random: E (default 100); teacher: the teacher's
    freeze_embeddings: bool = True
    hidden_size: int = 300
    dropout: float = 0.5
    lr: float = 1e-3  # paper 000, Table 6 (student grid 1e-3, 5e-4)
    weight_decay: float = 0.0
    epochs: int = 50
    patience: int = 5  # paper 000 §5.3
    batch_size: int = 32
    num_workers: int = 0
    checkpoint_every: int = 200  # steps; also at every epoch end


class Collate:
    """Example rows -> tensors for the student and the chosen losses."""

    def __init__(self, tokenizer, schema: LabelSchema, teacher: str | None, cfg: TrainConfig, kind: str):
        self.tokenizer, self.schema, self.teacher, self.cfg, self.kind = tokenizer, schema, teacher, cfg, kind

    def __call__(self, rows: list[dict]) -> "Batch":
        words = [r[EXAMPLES_LAYER]["words"] for r in rows]
        lengths = [len(w) for w in words]
        Lmax = max(lengths)
        gold = [r[EXAMPLES_LAYER].get("tags") for r in rows]
        batch = Batch(words_to_bags(self.tokenizer, words), words, gold)
        t = [r[self.teacher] for r in rows] if self.teacher else None
        tags = torch.full((len(rows), Lmax), -1, dtype=torch.long)
        for b, r in enumerate(rows):
            if gold[b] is not None:
                tags[b, : lengths[b]] = torch.tensor(self.schema.encode(gold[b]))
            elif t is not None and "kbest_paths" in t[b]:
                tags[b, : lengths[b]] = torch.tensor(t[b]["kbest_paths"][0])  # teacher top-1 (§3.2)
        batch.tags = tags
        batch.labelled = torch.tensor([g is not None for g in gold])
        if t and "kbest_paths" in t[0]:
            K = self.cfg.k
            paths = torch.full((len(rows), K, Lmax), -1, dtype=torch.long)
            logp = torch.full((len(rows), K), float("-inf"))
            for b in range(len(rows)):
                p, lp = t[b]["kbest_paths"][:K], t[b]["kbest_log_probs"][:K]
                if p:
                    paths[b, : len(p), : lengths[b]] = torch.tensor(p)
                    logp[b, : len(lp)] = torch.tensor(lp)
            batch.kbest_paths, batch.kbest_log_probs = paths, logp
        if t and "token-em" in self.cfg.losses:
            field_name = "emissions" if self.kind == "crf" else "logits"
            batch.teacher_emissions = pad_stack([x[field_name] for x in t], Lmax)
        if t and "token-pos" in self.cfg.losses:
            batch.teacher_marginals = pad_stack([x["marginals"] for x in t], Lmax)
        return batch


@dataclass
class Batch:
    words: WordBatch
    texts: list[list[str]]
    gold: list[list[str] | None]
    tags: torch.Tensor | None = None
    labelled: torch.Tensor | None = None
    kbest_paths: torch.Tensor | None = None
    kbest_log_probs: torch.Tensor | None = None
    teacher_emissions: torch.Tensor | None = None
    teacher_marginals: torch.Tensor | None = None
    origin: tuple[int, int] | None = None


def loss_parts(model: BiLSTMCRF, batch: Batch, cfg: TrainConfig, device) -> dict[str, torch.Tensor]:
    """The chosen losses of one batch, each averaged over its sentences."""
    words = batch.words.to(device)
    emissions = model(words)
    mask = words.mask
    trans, start, end = model.crf.scores()
    log_z = log_partition(emissions, mask, trans, start, end)
    parts = {}
    if "hard" in cfg.losses:
        tags = batch.tags.to(device)
        has = (tags[:, 0] >= 0)
        if has.any():
            parts["hard"] = L.hard_loss(emissions[has], mask[has], tags[has], trans, start, end).mean()
    if {"seq-ce", "fuzzy"} & set(cfg.losses):
        t_lp = batch.kbest_log_probs.to(device)
        s_lp = L.student_path_log_probs(emissions, mask, batch.kbest_paths.to(device), trans, start, end, log_z)
        if "seq-ce" in cfg.losses:
            parts["seq-ce"] = L.seq_ce_loss(t_lp, s_lp).mean()
        if "fuzzy" in cfg.losses:
            parts["fuzzy"] = L.seq_fuzzy_loss(t_lp, s_lp).mean()
    if "token-em" in cfg.losses:
        p_t = L.teacher_softmax(batch.teacher_emissions.to(device), cfg.temperature)
        parts["token-em"] = L.token_kl_loss(emissions, p_t, mask, cfg.temperature).mean()
    if "token-pos" in cfg.losses:
        parts["token-pos"] = L.token_kl_loss(emissions, batch.teacher_marginals.to(device), mask, cfg.temperature).mean()
    return parts


def train_student(cache: str, out_dir, cfg: TrainConfig | None = None, *, storage_options: dict | None = None,
                  log=print) -> dict:
    """Train a student from ``cache`` and save the best one (by dev F1) to ``out_dir``."""
    cfg = cfg or TrainConfig()
    unknown = set(cfg.losses) - set(LOSSES)
    if unknown or not cfg.losses:
        raise ValueError(f"unknown losses {sorted(unknown)}; choose from {', '.join(LOSSES)}")
    rank, world, device_name = distributed.init(cfg.device)
    lead = rank == 0  # the process that writes checkpoints, metrics and the student
    reader, teacher = open_cache(cache, storage_options, cfg.teacher, cfg.embedding, cfg.seed)
    schema = reader.manifest.label_schema
    kind = reader.manifest.teachers[teacher].kind
    stored_k = reader.manifest.teachers[teacher].decoding.get("k")
    if kind != "crf" and ({"seq-ce", "fuzzy", "token-pos"} & set(cfg.losses)):
        raise CacheError(f"teacher {teacher!r} is a {kind} teacher: it has no k-best paths or marginals; "
                         "use the losses hard and token-em")
    if {"seq-ce", "fuzzy"} & set(cfg.losses) and stored_k is not None and cfg.k > stored_k:
        raise CacheError(f"--k {cfg.k} is more than the {stored_k} paths per sentence the cache holds")
    tokenizer, weight = teacher_exports(reader, teacher)
    dim = weight.shape[1] if cfg.embedding == "teacher" else (cfg.embedding_dim or 100)
    scfg = StudentConfig(schema.to_json(), weight.shape[0], dim, cfg.embedding, cfg.freeze_embeddings,
                         cfg.hidden_size, 1, cfg.dropout, extra={"teacher": teacher, "cache": reader.store.url})
    model = BiLSTMCRF(scfg)
    init_embeddings(model, weight)
    device = device_for(device_name)
    model.to(device)
    if world > 1:  # the same initial weights on every rank (seeded above), then each its own dropout masks
        torch.manual_seed(cfg.seed * 1000 + rank)

    train_names, dev_names = default_splits(reader, cfg)
    selected = parse_selection(train_names, reader)
    unlabelled_rows = any(not c.labelled for c in reader.manifest.corpora if (c.name, c.split) in selected)
    if unlabelled_rows and kind != "crf":
        raise CacheError(f"teacher {teacher!r} is a {kind} teacher: it has no paths to use as hard labels for "
                         "the unlabelled corpora; train with --no-unlabelled")
    # the teacher's k-best paths: for the sequence losses, and as hard labels of unlabelled rows (§3.2)
    needs_kbest = bool({"seq-ce", "fuzzy"} & set(cfg.losses)) or unlabelled_rows
    fields = {EXAMPLES_LAYER: ["words", "tags"], teacher: []}
    if needs_kbest and kind == "crf":
        fields[teacher] += ["kbest_paths", "kbest_log_probs"]
    if "token-em" in cfg.losses:
        fields[teacher].append("emissions" if kind == "crf" else "logits")
    if "token-pos" in cfg.losses:
        fields[teacher].append("marginals")
    stream = CacheStream(reader, fields, selected,
                         Collate(tokenizer, schema, teacher, cfg, kind),
                         stream_config(cfg), rank=rank, world_size=world)
    dev_words, dev_tags = read_split(reader, dev_names) if dev_names else ([], [])
    weighting = L.UncertaintyWeighting(len(cfg.losses)).to(device) if cfg.weighting == "uncertainty" else None
    fixed = torch.tensor(cfg.weights or [1.0] * len(cfg.losses), device=device)
    params = [p for p in model.parameters() if p.requires_grad] + (list(weighting.parameters()) if weighting else [])
    optim = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = open(out_dir / "metrics.jsonl", "a") if lead else None
    log = log if lead else (lambda *a: None)
    log(f"training {scfg.arch} ({sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,} trainable) on {', '.join(train_names)}; losses {', '.join(cfg.losses)}")
    modules = {"model": model, **({"weighting": weighting} if weighting else {})}
    pos = {"epoch": 0, "step": 0, "consumed": {}, "best": -1.0, "best_epoch": 0, "history": [], "sums": {}, "n": 0}
    resumed = load_checkpoint(out_dir, modules, optim) if cfg.resume else None
    if resumed:
        pos.update(resumed)
        log(f"resuming from {out_dir / 'checkpoint'}: epoch {pos['epoch'] + 1}, step {pos['step']}")
        if world > 1:  # the checkpoint holds rank 0's RNG: each rank its own dropout masks again
            torch.manual_seed(cfg.seed * 1000 + rank + pos["step"])
    best, best_epoch, step, history = pos["best"], pos["best_epoch"], pos["step"], pos["history"]
    t_start = time.time()
    for epoch in range(pos["epoch"], cfg.epochs):
        stream.set_epoch(epoch)
        consumed = {int(k): v for k, v in pos["consumed"].items()} if epoch == pos["epoch"] else {}
        workers = max(1, cfg.num_workers)
        consumed = {p: c for p, c in consumed.items() if p // workers == rank}  # this rank's stream parts
        stream.skip(consumed)
        model.train()
        loader = batches(stream, cfg.num_workers)
        sums: dict[str, float] = dict(pos["sums"]) if epoch == pos["epoch"] else {}
        n = pos["n"] if epoch == pos["epoch"] else 0

        def checkpoint(next_epoch: int, consumed: dict) -> None:
            if world > 1:  # every rank's position in its parts (a collective: all ranks call it at the same step)
                parts = world * max(1, cfg.num_workers)
                counts = distributed.sum_across([consumed.get(p, 0) for p in range(parts)], world, device)
                consumed = {p: int(c) for p, c in enumerate(counts.tolist()) if c}
            if not lead:
                return
            save_checkpoint(out_dir, modules, optim, {
                "epoch": next_epoch, "step": step, "consumed": {str(k): v for k, v in consumed.items()},
                "best": best, "best_epoch": best_epoch, "history": history,
                "sums": sums if next_epoch == epoch else {}, "n": n if next_epoch == epoch else 0})

        bar = tqdm(loader, desc=f"epoch {epoch + 1}", unit="batch", leave=False, disable=not lead)
        batches_left = iter(bar)
        while True:
            batch = next(batches_left, None)
            # under torchrun a step goes on while any rank has a batch (the parts differ in length)
            active = distributed.count_across(batch is not None, world, device)
            if not active:
                break
            optim.zero_grad(set_to_none=True)
            parts = {}
            if batch is not None:
                consumed[batch.origin[0]] = batch.origin[1] + 1
                parts = loss_parts(model, batch, cfg, device)
                stacked = torch.stack([parts.get(name, torch.zeros((), device=device)) for name in cfg.losses])
                loss = weighting(stacked) if weighting else (fixed * stacked).sum()
                loss.backward()
            distributed.average_gradients(params, active, world)
            torch.nn.utils.clip_grad_norm_(params, 5.0)
            optim.step()
            step, n = step + 1, n + (batch is not None)
            failpoint(f"train-step:{step}")
            for name, v in parts.items():
                sums[name] = sums.get(name, 0.0) + v.item()
            bar.set_postfix({k: f"{v / n:.3f}" for k, v in sums.items()} | ({"best_f1": f"{100 * best:.2f}"} if best >= 0 else {}))
            hit_max = bool(cfg.max_steps and step >= cfg.max_steps)
            if hit_max or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                checkpoint(epoch, consumed)
            if hit_max:
                break
        if world > 1:  # every rank's losses, so that all ranks see the same record and stop together
            totals = distributed.sum_across([sums.get(k, 0.0) for k in cfg.losses] + [n], world, device).tolist()
            sums = {k: v for k, v in zip(cfg.losses, totals) if k in sums or v}
            n = int(totals[-1])
        record = {"epoch": epoch + 1, "step": step, **{f"loss_{k}": v / max(n, 1) for k, v in sums.items()},
                  "seconds": round(time.time() - t_start, 1)}
        if weighting:
            record["weights"] = dict(zip(cfg.losses, weighting.weights.tolist()))
        if dev_words:
            scores = span_scores(dev_tags, predict_tags(model, tokenizer, dev_words), schema.scheme)
            record["dev_f1"] = scores["f1"]
        f1 = record.get("dev_f1", -float(sum(sums.values())))
        improved = f1 > best
        if improved:
            best, best_epoch = f1, epoch + 1
            if lead:
                save_student(model, tokenizer, out_dir)
        history.append(record)
        if lead:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
        log(f"epoch {epoch + 1}: " + "  ".join(f"{k} {v / max(n, 1):.4f}" for k, v in sums.items())
            + (f"  dev F1 {100 * record['dev_f1']:.2f}" if "dev_f1" in record else "")
            + ("  (best, saved)" if improved else ""))
        if cfg.max_steps and step >= cfg.max_steps:
            break  # mid-epoch: the checkpoint above says where to resume
        checkpoint(epoch + 1, {})
        if epoch + 1 - best_epoch >= cfg.patience:
            log(f"no dev F1 gain for {cfg.patience} epochs: stopping")
            break
    summary = {"config": asdict(cfg), "best_epoch": best_epoch, "best_dev_f1": best if dev_words else None,
               "history": history, "steps": step, "train": train_names, "dev": dev_names, "processes": world}
    if lead:
        metrics.close()
        (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    distributed.done(world)
    return summary


__all__ = ["TrainConfig", "train_student", "predict_tags", "read_split", "LOSSES"]
