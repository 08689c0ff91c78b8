"""The SenTScore distillation recipe (paper 004 §4.2 and §5.2) from a cache alone.

The cache comes from a SenTScore teacher (``distill-cache build`` with a ``sentscore`` teacher):
gold rows (the few-shot gold split) keep their labels; silver rows (the rest of the training data,
labels hidden, built as unlabelled corpora) are labelled by the teacher's SenTScore path and carry
its per-word tag scores. The student is a BiLSTM tagger with a softmax over the sBIO tags
(:class:`~seqdistill.students.tagger.BiLSTMTagger`, the teacher's tokenizer and SVD-reduced
embeddings), trained on eq. 2: cross entropy on the hard labels plus lambda_KL times the KL from
the teacher's tag distribution at temperature tau = 10; lambda_KL = 0 is the pseudo-label baseline.

AdamW at 1e-3, batch 16, early stopping on dev F1 with patience 25 over at most 100 epochs (the
paper's BiLSTM settings, §5); the best epoch's student is saved.
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
from ..metrics import span_scores
from . import losses as L
from .data import CacheStream, batches, gold_tags, pad_stack, parse_selection, stream_config
from .models import save_student
from .tagger import words_to_subwords
from .common import EpochRecords, RunConfig, new_tagger, open_cache, predict_tags, read_split, splits_with_dev


@dataclass
class SentScoreKDConfig(RunConfig):
    lambda_kl: float = 1.0  # paper 004, Table 4 (0 = pseudo-labels only)
    temperature: float = 10.0  # tau, §5.2
    teacher: str | None = None
    embedding: str = "svd"
    embedding_dim: int = 100
    hidden_size: int = 200  # the paper's BiLSTM (§5)
    dropout: float = 0.5
    lr: float = 1e-3
    batch_size: int = 16
    epochs: int = 100
    patience: int = 25


class KDCollate:
    def __init__(self, tokenizer, schema: LabelSchema, teacher: str):
        self.tokenizer, self.schema, self.teacher = tokenizer, schema, teacher

    def __call__(self, rows: list[dict]):
        words, tags, labelled = gold_tags(rows, self.schema)
        Lmax = tags.shape[1]
        silver = ~labelled
        for b, r in enumerate(rows):
            if silver[b]:  # the teacher's SenTScore path is the pseudo-label
                path = r[self.teacher]["kbest_paths"]
                if len(path):
                    tags[b, : len(words[b])] = torch.tensor(path[0])
        scores = pad_stack([r[self.teacher]["tag_scores"] for r in rows], Lmax, fill=0.0)
        return _KDBatch(words_to_subwords(self.tokenizer, words), tags, silver, scores)


@dataclass
class _KDBatch:
    inputs: object
    tags: torch.Tensor
    silver: torch.Tensor
    scores: torch.Tensor
    origin: tuple[int, int] | None = None


def train_sentscore_student(cache: str, out_dir, cfg: SentScoreKDConfig | None = None, *,
                            storage_options: dict | None = None, log=print) -> dict:
    cfg = cfg or SentScoreKDConfig()
    distributed.require_one_process("the sentscore recipe")
    reader, teacher = open_cache(cache, storage_options, cfg.teacher, cfg.embedding, cfg.seed)
    schema = reader.manifest.label_schema
    if reader.manifest.teachers[teacher].kind != "sentscore":
        kinds = {n: t.kind for n, t in reader.manifest.teachers.items()}
        raise CacheError(f"the sentscore recipe needs a SenTScore teacher layer; the cache holds {kinds or 'none'}")
    model, tokenizer, device = new_tagger(
        reader, teacher, cfg, extra={"cache": reader.store.url, "recipe": "sentscore", "lambda_kl": cfg.lambda_kl,
                                     "temperature": cfg.temperature})
    train_names, dev_names = splits_with_dev(reader, cfg, "early stopping on dev F1")
    stream = CacheStream(reader, {EXAMPLES_LAYER: ["words", "tags"], teacher: ["kbest_paths", "tag_scores"]},
                         parse_selection(train_names, reader), KDCollate(tokenizer, schema, teacher),
                         stream_config(cfg))
    dev_words, dev_tags = read_split(reader, dev_names)
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = EpochRecords(out_dir, cfg.patience, cfg.max_steps, log)  # this recipe always starts afresh
    log(f"training bilstm-tagger ({sum(p.numel() for p in model.parameters()):,} parameters) on "
        f"{', '.join(train_names)}; lambda_KL {cfg.lambda_kl}, tau {cfg.temperature}")
    step, t0 = 0, time.time()
    for epoch in range(cfg.epochs):
        stream.set_epoch(epoch)
        model.train()
        total, n = 0.0, 0
        bar = tqdm(batches(stream), desc=f"epoch {epoch + 1}", unit="batch", leave=False)
        for batch in bar:
            x = batch.inputs.to(device)
            out = model(x)
            loss = L.sentscore_kd_loss(out.logits, batch.tags.to(device), batch.scores.to(device), x.word_mask,
                                       batch.silver.to(device), cfg.lambda_kl, cfg.temperature).mean()
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optim.step()
            total, n, step = total + loss.item(), n + 1, step + 1
            bar.set_postfix(loss=f"{total / n:.3f}", best_f1=f"{100 * max(records.best, 0):.2f}")
            if cfg.max_steps and step >= cfg.max_steps:
                break
        f1 = span_scores(dev_tags, predict_tags(model, tokenizer, dev_words), schema.scheme)["f1"]
        record = {"epoch": epoch + 1, "step": step, "loss": total / max(n, 1), "dev_f1": f1,
                  "seconds": round(time.time() - t0, 1)}
        if records.end_epoch(record, lambda: save_student(model, tokenizer, out_dir), {"loss": record["loss"]}):
            break
    records.close()
    summary = {"config": asdict(cfg), "recipe": "sentscore", "best_epoch": records.best_epoch,
               "best_dev_f1": records.best, "history": records.history, "steps": step, "train": train_names,
               "dev": dev_names}
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


__all__ = ["SentScoreKDConfig", "train_sentscore_student"]
