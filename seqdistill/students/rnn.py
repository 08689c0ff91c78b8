"""Paper 003's recipe (issue 9): a CNN + LSTM/SRU/SRU++ student with one BILOU head per entity
type, distilled from a ``bilou-per-type`` teacher layer of the cache.

    stage 1 (distillation): MSE between the student's and the teacher's BILOU logits on every
             training row, the unlabelled text included (§3.1)
    stage 2 (fine-tuning):  sum_e 0.2 CE_e + DL_e on the labelled rows (eqs. 1-2), drawn by the
             log-proportional entity sampler (§3.2)

AdamW, the learning rate halved when the dev macro F1 stops rising (ReduceLROnPlateau, patience 1),
early stopping on it, a fresh optimiser and schedule for each stage; the best student of stage 2
is kept. ``distill=False`` skips stage 1: the
same student trained without distillation (the paper's non-"dist" rows).

Decisions, named here: the embeddings are the teacher's exported matrix, frozen (the paper reuses
BERT's embedding layer; its parameter counts are given with and without it); the recurrent width
is a quarter of the embedding width per direction, so that the bidirectional output equals the
conv block's; MSE is the mean over real words, types and the 5 tags; the metric that steers
training is the macro F1 over entity types (the paper's Table 1 reports macro F1), scored on the
spans of each type's own BILOU layer (``metrics.span_set_scores``): nested entities count, and on a
flat corpus a prediction that overlaps across types is scored per type rather than flattened.
(``distill-eval`` on a flat test set scores the flattened tags instead, like every other model in
its table; on a nested test set it scores these per-type spans.)
A nested corpus (JSONL ``entities``) is read from the cache's ``entity_spans``/``entity_types``.
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
from ..bilou import layers_from_spans, predicted_spans
from ..metrics import span_set_scores
from . import losses as L
from .common import RunConfig, device_for, open_cache, read_spans, splits_with_dev, teacher_exports
from .data import CacheStream, batches, pad_stack, parse_selection, stream_config
from .models import StudentConfig, init_embeddings, save_student
from .rnn_tagger import RNNTagger
from .sampler import LogProportionalSampler
from .tagger import words_to_subwords


@dataclass
class RNNConfig(RunConfig):
    cell: str = "sru++"  # lstm | sru | sru++
    teacher: str | None = None
    distill: bool = True  # stage 1; False: the student trained without distillation
    layers: int = 4  # bidirectional recurrent layers (paper 003, §3.1)
    hidden_size: int | None = None  # per direction; default: embedding width / 4
    dropout: float = 0.1
    freeze_embeddings: bool = True
    lr: float = 1e-3
    batch_size: int = 32
    distill_epochs: int = 10
    epochs: int = 20  # stage 2
    patience: int = 3
    ce_weight: float = 0.2  # eq. 1
    gamma: float = 1e-6  # eq. 2
    few_shot_types: tuple[str, ...] = ()  # reported apart (the paper's Table 2 main / few-shot split)
    embedding: str = "teacher"  # the teacher's matrix (fixed by the paper)


def macro_split(scores: dict, few_shot: tuple[str, ...]) -> dict:
    """Macro F1 over all types, over the main types and over the named few-shot types."""
    per = scores["per_type"]
    out = {"macro_f1": scores["macro_f1"]}
    if few_shot:
        main = [v["f1"] for k, v in per.items() if k not in few_shot]
        few = [v["f1"] for k, v in per.items() if k in few_shot]
        out["main_macro_f1"] = sum(main) / max(len(main), 1)
        out["few_shot_macro_f1"] = sum(few) / max(len(few), 1)
    return out


class _DistillCollate:
    def __init__(self, tokenizer, teacher: str):
        self.tokenizer, self.teacher = tokenizer, teacher

    def __call__(self, rows):
        words = [r[EXAMPLES_LAYER]["words"] for r in rows]
        logits = pad_stack([r[self.teacher]["type_logits"] for r in rows], max(len(w) for w in words))
        return _Batch(words_to_subwords(self.tokenizer, words), logits)


@dataclass
class _Batch:
    inputs: object
    target: torch.Tensor
    origin: tuple[int, int] | None = None


def train_rnn_student(cache, out_dir, cfg: RNNConfig | None = None, *, storage_options: dict | None = None,
                      log=print) -> dict:
    cfg = cfg or RNNConfig()
    distributed.require_one_process("the rnn recipe")
    if cfg.resume:
        raise ValueError("the rnn recipe keeps no checkpoints to resume from; run it again without --resume")
    reader, teacher = open_cache(cache, storage_options, cfg.teacher, cfg.embedding, cfg.seed)
    if reader.manifest.teachers[teacher].kind != "bilou-per-type":
        kinds = {n: t.kind for n, t in reader.manifest.teachers.items()}
        raise CacheError(f"the rnn recipe needs a bilou-per-type teacher layer (finetune-teacher --head "
                         f"bilou-per-type); the cache holds {kinds}")
    schema: LabelSchema = reader.manifest.label_schema
    types = list(schema.entity_types)
    unknown = set(cfg.few_shot_types) - set(types)
    if unknown:
        raise ValueError(f"few-shot types {sorted(unknown)} are not entity types of the cache: {', '.join(types)}")
    tokenizer, weight = teacher_exports(reader, teacher)
    width = weight.shape[1]
    scfg = StudentConfig(schema.to_json(), weight.shape[0], width, "teacher", cfg.freeze_embeddings,
                         cfg.hidden_size or max(1, width // 4), cfg.layers, cfg.dropout, arch="rnn-tagger",
                         extra={"entity_types": types, "cell": cfg.cell, "teacher": teacher, "recipe": "rnn",
                                "cache": reader.store.url, "distilled": cfg.distill})
    model = RNNTagger(scfg)
    init_embeddings(model, weight)
    device = device_for(cfg.device)
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]

    def optimiser():  # each stage starts at cfg.lr with a fresh plateau schedule
        optim = torch.optim.AdamW(params, lr=cfg.lr)
        return optim, torch.optim.lr_scheduler.ReduceLROnPlateau(optim, mode="max", factor=0.5, patience=1)

    optim, plateau = optimiser()
    train_names, dev_names = splits_with_dev(reader, cfg, "early stopping on dev macro F1")
    dev_words, dev_spans = read_spans(reader, dev_names)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = open(out_dir / "metrics.jsonl", "w")  # this recipe always starts afresh
    counts = model.parameter_counts()
    log(f"training a conv + {cfg.layers} x bi-{cfg.cell} student ({counts['all']:,} parameters, "
        f"{counts['without_embeddings']:,} without the embeddings), {len(types)} BILOU heads; "
        f"{'distillation, then ' if cfg.distill else ''}fine-tuning")
    history, step, t0 = [], 0, time.time()

    def evaluate(stage: str, epoch: int, loss: float) -> float:
        scores = span_set_scores(dev_spans, predict_spans(model, tokenizer, dev_words))
        record = {"stage": stage, "epoch": epoch, "step": step, "loss": loss, "dev_f1": scores["f1"],
                  **{f"dev_{k}": v for k, v in macro_split(scores, cfg.few_shot_types).items()},
                  "dev_per_type_f1": {k: v["f1"] for k, v in scores["per_type"].items()},
                  "lr": optim.param_groups[0]["lr"], "seconds": round(time.time() - t0, 1)}
        history.append(record)
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        log(f"{stage} epoch {epoch}: loss {loss:.4f}  dev macro F1 {100 * scores['macro_f1']:.2f}  "
            f"micro F1 {100 * scores['f1']:.2f}")
        return scores["macro_f1"]

    def end_epoch(stage: str, epoch: int, loss: float, best: float, best_epoch: int, save=None):
        """Both stages' epoch end: dev macro F1, the LR halved on a plateau, the best epoch (its
        student saved when ``save`` is given); returns (best, best_epoch, stop)."""
        f1 = evaluate(stage, epoch, loss)
        plateau.step(f1)
        if f1 > best:
            best, best_epoch = f1, epoch
            if save:
                save()
        return best, best_epoch, epoch - best_epoch >= cfg.patience or bool(cfg.max_steps and step >= cfg.max_steps)

    if cfg.distill:  # stage 1: MSE to the teacher's BILOU logits on every training row
        stream = CacheStream(reader, {EXAMPLES_LAYER: ["words"], teacher: ["type_logits"]},
                             parse_selection(train_names, reader), _DistillCollate(tokenizer, teacher),
                             stream_config(cfg))
        best, best_epoch = -1.0, 0
        for epoch in range(cfg.distill_epochs):
            stream.set_epoch(epoch)
            model.train()
            total, n = 0.0, 0
            for batch in tqdm(batches(stream), desc=f"distil {epoch + 1}", unit="batch", leave=False):
                x = batch.inputs.to(device)
                m = x.word_mask.unsqueeze(-1).unsqueeze(-1).float()
                sq = (model(x) - batch.target.to(device)).pow(2) * m
                loss = sq.sum() / (m.sum() * sq.shape[2] * sq.shape[3]).clamp(min=1)
                step, total, n = step + 1, total + _step(optim, params, loss), n + 1
                if cfg.max_steps and step >= cfg.max_steps:
                    break
            best, best_epoch, stop = end_epoch("distil", epoch + 1, total / max(n, 1), best, best_epoch)
            if stop:
                break
        optim, plateau = optimiser()

    # stage 2: eq. 1 on the labelled training rows, drawn by the log-proportional sampler
    words, spans = _labelled_rows(reader, train_names)
    layers = [torch.tensor(layers_from_spans(sp, len(w), types)) for sp, w in zip(spans, words)]
    sampler = LogProportionalSampler([[t for _, _, t in sp] for sp in spans], seed=cfg.seed)
    best, best_epoch = -1.0, 0
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        model.train()
        order = list(sampler)
        total, n = 0.0, 0
        for s in tqdm(range(0, len(order), cfg.batch_size), desc=f"fine-tune {epoch + 1}", unit="batch", leave=False):
            idx = order[s: s + cfg.batch_size]
            x = words_to_subwords(tokenizer, [words[i] for i in idx]).to(device)
            target = pad_stack([layers[i] for i in idx], x.word_mask.shape[1], fill=-1, dtype=torch.long).to(device)
            loss = L.bilou_loss(model(x), target, x.word_mask, cfg.ce_weight, cfg.gamma).mean()
            step, total, n = step + 1, total + _step(optim, params, loss), n + 1
            if cfg.max_steps and step >= cfg.max_steps:
                break
        best, best_epoch, stop = end_epoch("fine-tune", epoch + 1, total / max(n, 1), best, best_epoch,
                                           save=lambda: save_student(model, tokenizer, out_dir))
        if stop:
            break
    metrics.close()
    summary = {"config": asdict(cfg), "recipe": "rnn", "best_epoch": best_epoch, "best_dev_macro_f1": best,
               "best_dev_f1": next((h["dev_f1"] for h in history if h["stage"] == "fine-tune"
                                    and h["epoch"] == best_epoch), None),
               "parameters": counts, "history": history, "steps": step, "train": train_names, "dev": dev_names}
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _step(optim, params, loss) -> float:
    optim.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 5.0)
    optim.step()
    return loss.item()


def _labelled_rows(reader, names: list[str]) -> tuple[list[list[str]], list[list[tuple[int, int, str]]]]:
    """Words and gold spans (nested ones included) of the labelled training rows."""
    words, spans = read_spans(reader, names, skip_unlabelled=True)
    if not words:
        raise CacheError("fine-tuning needs labelled training rows; the training selection has none")
    return words, spans


def predict_spans(model: RNNTagger, tokenizer, sentences: list[list[str]], batch_size: int = 128
                  ) -> list[list[tuple[int, int, str]]]:
    """Each sentence's spans from the per-type Viterbi layers (nested across types)."""
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out: dict[int, list] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
        x = model.inputs(tokenizer, [sentences[i] for i in idx]).to(model.device)
        for i, spans in zip(idx, predicted_spans(model.decode_layers(x).cpu(), x.word_mask.cpu(), model.entity_types)):
            out[i] = spans
    return [out[i] for i in range(len(sentences))]
