"""The SenTScore distillation recipe (paper 004 §4.2 and §5.2) from a cache alone.

The cache comes from a SenTScore teacher (``distill-cache build`` with a ``sentscore`` teacher):
gold rows (the few-shot gold split) keep their labels; silver rows (the rest of the training data,
labels hidden, built as unlabelled corpora) are labelled by the teacher's SenTScore path and carry
its per-word tag scores. The student is a BiLSTM tagger with a softmax over the sBIO tags
(:class:`~seqdistill.students.archs.bilstm_tagger.BiLSTMTagger`, the teacher's tokenizer and SVD-reduced
embeddings), trained on eq. 2: cross entropy on the hard labels plus lambda_KL times the KL from
the teacher's tag distribution at temperature tau = 10; lambda_KL = 0 is the pseudo-label baseline.
The KL term covers the silver rows (the default, §5.2's words) or every row (``--kd-rows all``, Table
5's reading; see the option's help).

AdamW at 1e-3, batch 16, early stopping on dev F1 with patience 25 over at most 100 epochs (the
paper's BiLSTM settings, §5); the best epoch's student is saved. One departure from the paper,
named: the input embeddings stay fixed unless ``--train-embeddings`` (see its help; random ones
always train).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ...tokenization import words_to_subwords
from .. import losses as L
from ..base import EMBEDDINGS
from ..common import dev_f1, new_tagger, open_cache, read_split, splits_with_dev
from ..config import RunConfig, option
from ..data import gold_tags, pad_stack
from ..engine import Context, Plan, Stage
from . import Recipe


@dataclass
class SentScoreKDConfig(RunConfig):
    teacher: str | None = option(None, "SenTScore teacher layer to learn from (default: the cache's only one).")
    lambda_kl: float = option(
        1.0, "Weight of the KL term (eq. 2; paper 004, Table 4); 0 trains on pseudo-labels alone."
    )
    temperature: float = option(10.0, "tau of the teacher's tag scores (§5.2).")
    kd_softens: str = option(
        "teacher",
        "What tau softens in the KL term: the teacher's scores alone (the paper's words, §5.2), or both "
        "distributions with the KL scaled by tau^2 (Hinton et al.'s KD).",
        choices=("teacher", "both"),
    )
    kd_rows: str = option(
        "silver",
        "Training rows whose words get the KL term: silver rows alone (§5.2: the teacher's scores 'in the "
        "rest of the training data'), or every row, gold included, with the teacher's scores of the gold "
        "sentences, as Table 5's 'No silver' column implies (there lambda_KL = 1 differs from lambda_KL = 0 "
        "with no silver row at all). Gold rows keep their gold labels in the cross-entropy term either way. "
        "On CoNLL-2003 (docs/RESULTS.md, 'Silver 500'): +5.1 F1 to a student with no silver rows, no "
        "gain beside 250 or 500 silver ones.",
        choices=("silver", "all"),
    )
    embedding: str = option(
        "svd", "Input embeddings: the teacher's, their SVD reduction, or random.", choices=EMBEDDINGS
    )
    embedding_dim: int = option(100, "E for svd and random (svd: at most the teacher's width).")
    train_embeddings: bool = option(
        False,
        "Fine-tune the input embeddings, as the paper's BiLSTM fine-tunes its GloVe input (§5), and as this "
        "recipe did by default until 2026-11-26. Fixed by default: over the SVD of a teacher's matrix, "
        "fine-tuning them on a few hundred sentences cost the students 13-24 F1 on CoNLL-2003 "
        "(docs/RESULTS.md, 'Fixed input embeddings'); fixed rows keep a word the training text never "
        "showed in the space of the words it did. Random embeddings (--embedding random) always train.",
    )
    hidden_size: int = option(200, "LSTM units per direction (the paper's BiLSTM, §5).")
    dropout: float = option(0.5, "On the embeddings and the LSTM output.")
    lr: float = option(1e-3, "AdamW learning rate.")
    batch_size: int = option(16, "Sentences per batch.")
    epochs: int = option(100, "Most epochs.")
    patience: int = option(25, "Epochs without a better dev F1 that stop.")


class Collate:
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
        return Batch(words_to_subwords(self.tokenizer, words), tags, silver, scores)


@dataclass
class Batch:
    inputs: object
    tags: torch.Tensor
    silver: torch.Tensor
    scores: torch.Tensor
    origin: tuple[int, int] | None = None


def plan(ctx: Context) -> Plan:
    cfg: SentScoreKDConfig = ctx.cfg
    reader, teacher = open_cache(ctx.reader, cfg.teacher, cfg.embedding)
    schema = reader.manifest.label_schema
    if reader.manifest.teachers[teacher].kind != "sentscore":
        kinds = {n: t.kind for n, t in reader.manifest.teachers.items()}
        raise CacheError(f"the sentscore recipe needs a SenTScore teacher layer; the cache holds {kinds or 'none'}")
    train_names, dev_names = splits_with_dev(reader, cfg, "early stopping on dev F1")
    train_rows = cfg.train_embeddings or cfg.embedding == "random"  # random rows must learn
    model, tokenizer = new_tagger(
        reader,
        teacher,
        cfg,
        ctx.device,
        extra={
            "cache": reader.store.url,
            "recipe": "sentscore",
            "lambda_kl": cfg.lambda_kl,
            "temperature": cfg.temperature,
            "kd_softens": cfg.kd_softens,
            "kd_rows": cfg.kd_rows,
            "train_embeddings": train_rows,
        },
    )
    model.embed.weight.requires_grad_(train_rows)
    stream = ctx.stream(
        {EXAMPLES_LAYER: ["words", "tags"], teacher: ["kbest_paths", "tag_scores"]},
        train_names,
        Collate(tokenizer, schema, teacher),
    )
    dev_words, dev_tags = read_split(reader, dev_names)

    def kd_rows(batch: Batch) -> torch.Tensor:  # the rows of eq. 2's KL term
        return batch.silver if cfg.kd_rows == "silver" else torch.ones_like(batch.silver)

    def loss(batch: Batch) -> dict[str, torch.Tensor]:  # eq. 2
        x = batch.inputs.to(ctx.device)
        return {
            "kd": L.sentscore_kd_loss(
                model(x).logits,
                batch.tags.to(ctx.device),
                batch.scores.to(ctx.device),
                x.word_mask,
                kd_rows(batch).to(ctx.device),
                cfg.lambda_kl,
                cfg.temperature,
                soften_student=cfg.kd_softens == "both",
            ).mean()
        }

    stage = Stage(
        name="train",
        batches=stream,
        loss=loss,
        params=lambda: list(model.parameters()),
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
        f"{', '.join(train_names)}; lambda_KL {cfg.lambda_kl} on {cfg.kd_rows} rows, tau {cfg.temperature} "
        f"softening {cfg.kd_softens}",
    )


RECIPE = Recipe(
    "sentscore",
    SentScoreKDConfig,
    plan,
    "SenTScore KD (paper 004): a BiLSTM tagger on a SenTScore teacher's pseudo-labels and tag scores "
    "(CE + lambda_KL KL at tau 10).",
)
