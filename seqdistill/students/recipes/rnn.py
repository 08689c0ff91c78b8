"""Paper 003's recipe (issue 9): a CNN + LSTM/SRU/SRU++ student with one BILOU head per entity
type, distilled from a ``bilou-per-type`` teacher layer of the cache, or from a ``span`` layer (a
GLiNER, issue 82), whose per-type span marginals are each type's BILOU targets
(``bilou.span_layer_marginals``: each type read alone, so that types may overlap), learnt in stage 1
by the KL divergence to them (``losses.bilou_soft_loss``) in place of the MSE to logits.

    stage 1 (distillation): MSE between the student's and the teacher's BILOU logits on every
             training row, the unlabelled text included (§3.1)
    stage 2 (fine-tuning):  sum_e 0.2 CE_e + DL_e on the labelled rows (eqs. 1-2), drawn by the
             log-proportional entity sampler (§3.2)

Two stages of the engine: AdamW, the learning rate halved when the dev macro F1 stops rising
(ReduceLROnPlateau, patience 1), early stopping on it, a fresh optimiser and schedule for each
stage; stage 1 goes on with its last weights, the best student of stage 2 is kept.
``distill=False`` skips stage 1: the same student trained without distillation (the paper's
non-"dist" rows).

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

from dataclasses import dataclass

import torch

from ...bilou import layers_from_spans, predicted_spans, span_layer_marginals
from ...cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ...metrics import span_set_scores
from ...tokenization import words_to_subwords
from .. import losses as L
from ..archs.rnn_tagger import RNNTagger
from ..base import StudentConfig, init_embeddings
from ..common import open_cache, read_spans, splits_with_dev, teacher_exports
from ..config import RunConfig, option
from ..data import pad_stack
from ..engine import Context, ListBatches, Plan, Stage
from ..sampler import LogProportionalSampler
from . import Recipe


@dataclass
class RNNConfig(RunConfig):
    teacher: str | None = option(
        None, "bilou-per-type or span teacher layer to learn from (default: the cache's only one)."
    )
    cell: str = option("sru++", "The recurrent layers.", choices=("lstm", "sru", "sru++"))
    rnn_layers: int = option(4, "Bidirectional recurrent layers (paper 003, §3.1).")
    distill: bool = option(True, "Stage 1: MSE to the teacher's BILOU logits (off: trained without distillation).")
    hidden_size: int | None = option(None, "Units per direction (default: the embedding width / 4).")
    projection: int = option(
        0,
        "Project the teacher's embeddings to this width before the conv block, which then runs at it (0: no "
        "projection, the paper's conv block at the embedding width); the export folds it into the table.",
    )
    dropout: float = option(0.1, "Dropout between the layers.")
    train_embeddings: bool = option(False, "Fine-tune the teacher's embeddings instead of freezing them.")
    lr: float = option(1e-3, "AdamW learning rate (each stage starts from it).")
    batch_size: int = option(32, "Sentences per batch.")
    distill_epochs: int = option(10, "Most epochs of stage 1.")
    epochs: int = option(20, "Most epochs of stage 2 (fine-tuning).")
    patience: int = option(3, "Epochs without a better dev macro F1 that stop a stage.")
    ce_weight: float = option(0.2, "Weight of CE beside the Dice loss (eq. 1).")
    gamma: float = option(1e-6, "Smoothing of the Dice loss (eq. 2).")
    few_shot_types: tuple[str, ...] = option(
        (), "Entity types reported apart, comma-separated (macro F1 main / few-shot, the paper's Table 2)."
    )


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


class Collate:
    """Rows -> the student's inputs and its stage-1 targets: a bilou-per-type teacher's logits, or
    (``span``: the layer's bias and temperature) a span teacher's per-type BILOU marginals."""

    def __init__(self, tokenizer, teacher: str, span: dict | None = None):
        self.tokenizer, self.teacher, self.span = tokenizer, teacher, span

    def __call__(self, rows):
        words = [r[EXAMPLES_LAYER]["words"] for r in rows]
        L = max(len(w) for w in words)
        if self.span is None:
            target = pad_stack([r[self.teacher]["type_logits"] for r in rows], L)
        else:
            logits = pad_stack([r[self.teacher]["span_logits"] for r in rows], L, fill=float("-inf"))
            phi = (logits.float() + self.span["bias"]) / self.span["temperature"]  # semicrf.py, S1
            target = span_layer_marginals(phi, torch.tensor([len(w) for w in words]))
        return Batch(words_to_subwords(self.tokenizer, words), target)


@dataclass
class Batch:
    inputs: object
    target: torch.Tensor
    origin: tuple[int, int] | None = None


def plan(ctx: Context) -> Plan:
    cfg: RNNConfig = ctx.cfg
    reader, teacher = open_cache(ctx.reader, cfg.teacher, "teacher")
    info = reader.manifest.teachers[teacher]
    if info.kind not in ("bilou-per-type", "span"):
        kinds = {n: t.kind for n, t in reader.manifest.teachers.items()}
        raise CacheError(
            f"the rnn recipe needs a bilou-per-type teacher layer (finetune-teacher --head "
            f"bilou-per-type) or a span one (a GLiNER); the cache holds {kinds}"
        )
    span = span_targets(reader, teacher) if info.kind == "span" and cfg.distill else None
    schema: LabelSchema = reader.manifest.label_schema
    types = list(schema.entity_types)
    unknown = set(cfg.few_shot_types) - set(types)
    if unknown:
        raise ValueError(f"few-shot types {sorted(unknown)} are not entity types of the cache: {', '.join(types)}")
    if cfg.projection and cfg.projection < 6:
        raise ValueError(
            f"--projection {cfg.projection}: the conv block splits the width among three convolutions and halves "
            "it, so it needs 6 or more (or 0: no projection)"
        )
    train_names, dev_names = splits_with_dev(reader, cfg, "early stopping on dev macro F1")
    exports = teacher_exports(reader, teacher)
    tokenizer, weight = exports.tokenizer, exports.student_weight()
    width = weight.shape[1]
    scfg = StudentConfig(
        label_schema=schema.to_json(),
        vocab_size=weight.shape[0],
        embedding_dim=width,
        embedding="teacher",
        freeze_embeddings=not cfg.train_embeddings,
        hidden_size=cfg.hidden_size or max(1, width // 4),
        num_layers=cfg.rnn_layers,
        dropout=cfg.dropout,
        arch="rnn-tagger",
        extra={
            "entity_types": types,
            "cell": cfg.cell,
            "teacher": teacher,
            "recipe": "rnn",
            "cache": reader.store.url,
            "distilled": cfg.distill,
        }
        | ({"projection": cfg.projection} if cfg.projection else {})
        | ({"targets": "span marginals"} if span else {}),
        teacher_vocab_size=exports.rows,
    )
    model = RNNTagger(scfg)
    init_embeddings(model, exports)
    model.to(ctx.device)
    device = ctx.device
    dev_words, dev_spans = read_spans(reader, dev_names)

    def evaluate() -> dict:
        scores = span_set_scores(dev_spans, predict_spans(model, tokenizer, dev_words))
        return {
            "dev_f1": scores["f1"],
            **{f"dev_{k}": v for k, v in macro_split(scores, cfg.few_shot_types).items()},
            "dev_per_type_f1": {k: v["f1"] for k, v in scores["per_type"].items()},
        }

    def distill_loss(batch) -> dict[str, torch.Tensor]:  # MSE over real words, types and the 5 tags
        x = batch.inputs.to(device)
        if span is not None:  # a span teacher's per-type BILOU marginals
            return {"kl": L.bilou_soft_loss(model(x), batch.target.to(device), x.word_mask)}
        m = x.word_mask.unsqueeze(-1).unsqueeze(-1).float()
        sq = (model(x) - batch.target.to(device)).pow(2) * m
        return {"mse": sq.sum() / (m.sum() * sq.shape[2] * sq.shape[3]).clamp(min=1)}

    # stage 2: eq. 1 on the labelled training rows, drawn by the log-proportional sampler
    words, spans = _labelled_rows(reader, train_names)
    layers = [torch.tensor(layers_from_spans(sp, len(w), types)) for sp, w in zip(spans, words)]
    sampler = LogProportionalSampler([[t for _, _, t in sp] for sp in spans], seed=cfg.seed)

    def order(epoch: int) -> list[int]:
        sampler.set_epoch(epoch)
        return list(sampler)

    def collate(idx: list[int]) -> Batch:
        x = words_to_subwords(tokenizer, [words[i] for i in idx])
        return Batch(x, pad_stack([layers[i] for i in idx], x.word_mask.shape[1], fill=-1, dtype=torch.long))

    def finetune_loss(batch) -> dict[str, torch.Tensor]:
        x = batch.inputs.to(device)
        return {"bilou": L.bilou_loss(model(x), batch.target.to(device), x.word_mask, cfg.ce_weight, cfg.gamma).mean()}

    def params():
        return [p for p in model.parameters() if p.requires_grad]

    def adamw(ps):
        return torch.optim.AdamW(ps, lr=cfg.lr)

    plateau = {"factor": 0.5, "patience": 1}
    stages = [
        Stage(
            name="fine-tune",
            batches=ListBatches(order, collate, cfg.batch_size, ctx.rank, ctx.world),
            loss=finetune_loss,
            params=params,
            optimizer=adamw,
            evaluate=evaluate,
            metric="dev_macro_f1",
            epochs=cfg.epochs,
            patience=cfg.patience,
            plateau=plateau,
        )
    ]
    if cfg.distill:  # stage 1: MSE to the teacher's BILOU logits (or KL to a span teacher's) on every training row
        field = "span_logits" if span else "type_logits"
        stream = ctx.stream(
            {EXAMPLES_LAYER: ["words"], teacher: [field]}, train_names, Collate(tokenizer, teacher, span)
        )
        stages.insert(
            0,
            Stage(
                name="distil",
                batches=stream,
                loss=distill_loss,
                params=params,
                optimizer=adamw,
                evaluate=evaluate,
                metric="dev_macro_f1",
                epochs=cfg.distill_epochs,
                patience=cfg.patience,
                plateau=plateau,
                keep="last",
            ),
        )
    counts = model.parameter_counts()
    return Plan(
        model,
        tokenizer,
        stages,
        train=train_names,
        dev=dev_names,
        summary={"parameters": counts},
        describe=f"training a conv + {cfg.rnn_layers} x bi-{cfg.cell} student ({counts['all']:,} parameters, "
        f"{counts['without_embeddings']:,} without the embeddings), {len(types)} BILOU heads; "
        f"{'distillation, then ' if cfg.distill else ''}fine-tuning",
    )


def span_targets(reader, teacher: str) -> dict:
    """What turns a span layer's ``span_logits`` into per-type BILOU targets: its bias and
    temperature (the potentials phi = (l + b) / T of its semi-CRF, semicrf.py S1), checked. Refused
    by name: a layer without span logits, or one whose decoding is not the semi-CRF over the cache's
    IOB2 spans this reading assumes (its scheme, bias or temperature missing or other)."""
    decoding = reader.manifest.teachers[teacher].decoding
    fields = reader.manifest.layers[teacher].field_names()
    schema = reader.manifest.label_schema
    if "span_logits" not in fields:
        raise CacheError(f"span teacher {teacher!r} stores no span_logits, which its per-type BILOU targets read")
    if decoding.get("scheme") != "IOB2" or schema.scheme != "IOB2":
        raise CacheError(
            f"span teacher {teacher!r}: per-type BILOU targets read a span layer over IOB2 tags (the span kind's "
            f"scheme); this layer's scheme is {decoding.get('scheme')!r} and the cache's {schema.scheme!r}"
        )
    missing = [k for k in ("bias", "temperature") if not isinstance(decoding.get(k), (int, float))]
    if missing or decoding["temperature"] <= 0:
        raise CacheError(
            f"span teacher {teacher!r}: its decoding gives no usable {', '.join(missing) or 'temperature > 0'}, "
            "which turn its span logits into potentials; rebuild its layer with `distill-cache build`"
        )
    return {"bias": float(decoding["bias"]), "temperature": float(decoding["temperature"])}


def _labelled_rows(reader, names: list[str]) -> tuple[list[list[str]], list[list[tuple[int, int, str]]]]:
    """Words and gold spans (nested ones included) of the labelled training rows."""
    words, spans = read_spans(reader, names, skip_unlabelled=True)
    if not words:
        raise CacheError("fine-tuning needs labelled training rows; the training selection has none")
    return words, spans


def predict_spans(
    model: RNNTagger, tokenizer, sentences: list[list[str]], batch_size: int = 128
) -> list[list[tuple[int, int, str]]]:
    """Each sentence's spans from the per-type Viterbi layers (nested across types)."""
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out: dict[int, list] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        x = model.inputs(tokenizer, [sentences[i] for i in idx]).to(model.device)
        for i, spans in zip(idx, predicted_spans(model.decode_layers(x).cpu(), x.word_mask.cpu(), model.entity_types)):
            out[i] = spans
    return [out[i] for i in range(len(sentences))]


RECIPE = Recipe(
    "rnn",
    RNNConfig,
    plan,
    "Paper 003: a CNN + LSTM/SRU/SRU++ student with one BILOU head per entity type; MSE to a "
    "bilou-per-type teacher's logits (or KL to a span teacher's per-type BILOU marginals), then CE + Dice "
    "on gold with the log-proportional sampler.",
)
