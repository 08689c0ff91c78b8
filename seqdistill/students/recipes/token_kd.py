"""Token-level KD (Hinton et al., 2015): the baseline every sequence-KD paper compares against.

A BiLSTM softmax tagger (:class:`~seqdistill.students.archs.bilstm_tagger.BiLSTMTagger`) learns each word's tag
distribution from the teacher at temperature T, and the gold tags:

    L = alpha T^2 sum_j KL(P^t_T(y_j) || P^s_T(y_j)) + (1 - alpha) sum_j CE(y_j, P^s(y_j))

summed over a sentence's words and averaged over the batch's sentences (the KD term over every
row, the CE term over the labelled rows only, both divided by the batch size).

Decisions, named here:

* The teacher's distribution: a softmax teacher's ``logits``, or a CRF teacher's ``marginals``
  (the exact per-word posterior, paper 000's token-pos). At temperature T the logits are divided
  by T; the marginals are raised to 1/T and renormalised, which is the same thing for a softmax
  (softmax(z)^(1/T) ∝ softmax(z / T)).
* T = 2 and alpha = 0.5, the common choice for Hinton KD; the student is sized like MGKD's
  (the teacher's embeddings frozen, 300 LSTM units, dropout 0.5, AdamW 1e-3, batch 32, early
  stopping on dev F1 with patience 5), so that the two compare on their losses alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...cache_schema import EXAMPLES_LAYER, CacheError
from ...tokenization import words_to_subwords
from .. import losses as L
from ..base import EMBEDDINGS
from ..common import default_splits, dev_f1, new_tagger, open_cache, read_split
from ..config import RunConfig, option
from ..data import gold_tags, pad_stack
from ..engine import Context, Plan, Stage
from . import Recipe


@dataclass
class TokenKDConfig(RunConfig):
    teacher: str | None = option(None, "Teacher layer to learn from (default: the cache's only one).")
    temperature: float = option(2.0, "T of both distributions in the KD term.")
    alpha: float = option(0.5, "Weight of the KD term; 1 - alpha weighs CE on the gold tags.")
    embedding: str = option(
        "teacher", "Input embeddings: the teacher's, their SVD reduction, or random.", choices=EMBEDDINGS
    )
    embedding_dim: int = option(100, "E for svd and random (svd: at most the teacher's width).")
    train_embeddings: bool = option(False, "Fine-tune the teacher's embeddings instead of freezing them.")
    hidden_size: int = option(300, "LSTM units per direction.")
    dropout: float = option(0.5, "On the embeddings and the LSTM output.")
    lr: float = option(1e-3, "AdamW learning rate.")
    batch_size: int = option(32, "Sentences per batch.")
    epochs: int = option(50, "Most epochs.")
    patience: int = option(5, "Epochs without a better dev F1 that stop.")


@dataclass
class Batch:
    inputs: object
    tags: torch.Tensor  # [B, L], -1 past the words and on unlabelled rows
    teacher: torch.Tensor  # [B, L, T]: logits or marginals
    origin: tuple[int, int] | None = None


def plan(ctx: Context) -> Plan:
    cfg: TokenKDConfig = ctx.cfg
    reader, teacher = open_cache(ctx.reader, cfg.teacher, cfg.embedding)
    kind = reader.manifest.teachers[teacher].kind
    if kind not in ("crf", "softmax"):
        raise CacheError(
            f"token-kd learns a crf teacher's marginals or a softmax teacher's logits; teacher "
            f"{teacher!r} is a {kind} teacher"
        )
    scores = "marginals" if kind == "crf" else "logits"
    if scores not in reader.manifest.layers[teacher].field_names():
        raise CacheError(f"teacher {teacher!r} has no {scores} in the cache: build it with --marginals")
    schema = reader.manifest.label_schema
    train_names, dev_names = default_splits(reader, cfg)
    if not dev_names:
        raise CacheError("early stopping on dev F1: the cache needs a dev split (or name one with --dev)")
    model, tokenizer = new_tagger(
        reader, teacher, cfg, ctx.device, extra={"cache": reader.store.url, "recipe": "token-kd"}
    )
    if cfg.embedding == "teacher" and not cfg.train_embeddings:
        model.embed.weight.requires_grad_(False)

    def collate(rows: list[dict]) -> Batch:
        words, tags, _ = gold_tags(rows, schema)
        return Batch(
            words_to_subwords(tokenizer, words), tags, pad_stack([r[teacher][scores] for r in rows], tags.shape[1])
        )

    def loss(batch: Batch) -> dict[str, torch.Tensor]:
        x = batch.inputs.to(ctx.device)
        p_t = L.teacher_probs(
            batch.teacher.to(ctx.device), "logits" if scores == "logits" else "marginals", cfg.temperature
        )
        return {
            "token-kd": L.token_kd_loss(
                model(x).logits, p_t, batch.tags.to(ctx.device), x.word_mask, cfg.alpha, cfg.temperature
            )
        }

    dev_words, dev_tags = read_split(reader, dev_names)
    stream = ctx.stream({EXAMPLES_LAYER: ["words", "tags"], teacher: [scores]}, train_names, collate)
    stage = Stage(
        name="train",
        batches=stream,
        loss=loss,
        params=lambda: [p for p in model.parameters() if p.requires_grad],
        optimizer=lambda ps: torch.optim.AdamW(ps, lr=cfg.lr),
        evaluate=lambda: {"dev_f1": dev_f1(model, tokenizer, dev_words, dev_tags, schema.scheme)},
        epochs=cfg.epochs,
        patience=cfg.patience,
    )
    return Plan(
        model,
        tokenizer,
        [stage],
        train=train_names,
        dev=dev_names,
        describe=f"training bilstm-tagger ({sum(p.numel() for p in model.parameters()):,} parameters) on "
        f"{', '.join(train_names)}; token KD from the teacher's {scores} at T {cfg.temperature}, "
        f"alpha {cfg.alpha}",
    )


RECIPE = Recipe(
    "token-kd",
    TokenKDConfig,
    plan,
    "Token-level KD (Hinton): a BiLSTM softmax tagger on the teacher's per-word distributions "
    "(logits or CRF marginals) at temperature T, plus CE on gold.",
)
