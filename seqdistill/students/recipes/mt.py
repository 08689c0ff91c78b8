"""MT-BERT's recipe (paper 002) over a cache holding several teacher layers (issue 8).

A K-layer transformer student (``transformer.py``) learns from N teachers at once:

    L = L_MT-Hid + L_MT-Dis + L_Task                                            (eq. 3)

L_MT-Hid matches student layer j to layer T·j of every teacher through a learnable W_ij (eq. 1);
L_MT-Dis is each teacher's soft-label cross-entropy weighted by 1 / (1 + the teacher's CE against
the gold tags) (eq. 2); L_Task is the student's own loss on the gold tags (CRF NLL or token CE).
Baselines: ``soft_labels="ensemble"`` (the uniform average of the teachers' soft labels) and a
single teacher (``teachers=("A",)``).

Decisions, named here:

* Teacher i with L_i layers teaches student layer j (1..K) with its layer ``round(j * L_i / K)``:
  the paper's T·j when L_i = T·K, and the same proportional depth when it is not (MiniLM-L6 and
  MPNet-base have 6 and 12 layers). The cache must hold those layers (``--hidden-layers`` at build).
* The teacher's CE of eq. 2 is its gold NLL in the cache divided by the sentence's words (a CRF
  teacher stores a sequence NLL); unlabelled rows have weight 1 and no task loss.
* Each epoch's record (``metrics.jsonl``) holds ``teacher_weights``: the mean of eq. 2's weight
  per teacher over the rows trained on, whatever the soft labels; near-equal weights mean MT-Dis is
  close to the uniform ensemble.
* The student's "soft labels" are its word scores: emissions with a CRF head, logits without.
* Adam(W) at 5e-5, batch 32: the paper's 5e-6 and batch 64 are for GPU-sized budgets of many
  epochs; early stopping on dev F1 (patience 3) as the other recipes.
* Gradients are clipped to norm 1.0, the usual setting for fine-tuning a transformer (BERT's),
  where the BiLSTM recipes use 5.0.
* MT-Hid divides each teacher layer's stored states by their root mean square over the cache's first
  shard (``--hidden-scale rms``, the default; ``none`` is eq. 1 as written). Eq. 1 compares raw states,
  which the paper's teachers (all of BERT's family) keep at one scale. EmbeddingGemma-300M's are not
  at MPNet-base's: its stored layers 6, 12 and 18 have an RMS of 33-396 against MPNet's 0.25-0.6
  (PCA-128 coefficients, issue 81's cache), so unscaled its MT-Hid term starts near 57,000 against a
  task loss of 16 and takes the whole clipped gradient. The scales are measured at every start, not
  learned or saved: the same cache gives the same scales.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from ...cache_schema import EXAMPLES_LAYER, CacheError, LabelSchema
from ...tokenization import words_to_subwords
from ..archs.transformer import TransformerTagger, init_from_teacher, transformer_config
from ..common import dev_f1, read_split, splits_with_dev
from ..config import RunConfig, option
from ..data import gold_tags, pad_stack
from ..engine import Context, Plan, Stage
from ..losses import MTHiddenLoss, ensemble_distillation_loss, mt_distillation_loss, teacher_weight
from . import Recipe

SOFT_LABELS = ("mt", "ensemble", "none")


@dataclass
class MTConfig(RunConfig):
    teachers: tuple[str, ...] = option(
        (), "Teacher layers to learn from, comma-separated (default: every teacher in the cache)."
    )
    soft_labels: str = option(
        "mt",
        "Teachers' soft labels weighted by 1/(1 + gold CE) (eq. 2), their uniform average, or none.",
        choices=SOFT_LABELS,
    )
    hidden_loss: bool = option(
        True, "The multi-teacher hidden loss (eq. 1; the cache must hold the matching teacher layers)."
    )
    hidden_scale: str = option(
        "rms",
        "MT-Hid: divide each teacher layer by its RMS over the cache's first shard (rms) or not (none, eq. 1).",
        choices=("rms", "none"),
    )
    temperature: float = option(1.0, "t of the soft labels (paper 002, §3.1).")
    student_layers: int = option(4, "K transformer layers (paper 002: 4 or 6).")
    init: str = option(
        "teacher",
        "Start from the first K layers and embeddings a teacher exported (build --export-layers K) or from scratch.",
        choices=("teacher", "scratch"),
    )
    init_from: str | None = option(None, "The teacher whose layers start the student (default: the first).")
    head: str = option("crf", "The transformer student's head.", choices=("crf", "softmax"))
    dropout: float = option(0.1, "Dropout of the transformer and before the head.")
    lr: float = option(5e-5, "AdamW learning rate.")
    batch_size: int = option(32, "Sentences per batch.")
    epochs: int = option(10, "Most epochs.")
    patience: int = option(3, "Epochs without a better dev F1 that stop.")


def hidden_scales(reader, teachers: list[str], hidden_fields: list[list[str]]) -> list[list[float]]:
    """Each stored teacher layer's root mean square over the cache's first shard (``--hidden-scale
    rms``; the module docstring says why), per teacher and student layer."""
    shard = reader.read_shard(0, {t: fields for t, fields in zip(teachers, hidden_fields)})
    return [
        [float(np.sqrt(np.mean(np.square(shard.get(t, f).values, dtype=np.float64)))) or 1.0 for f in fields]
        for t, fields in zip(teachers, hidden_fields)
    ]


def teacher_layer_for(j: int, teacher_layers: int, student_layers: int) -> int:
    """The teacher layer that student layer ``j`` (1..K) learns from: T·j, proportionally."""
    return int(j * teacher_layers / student_layers + 0.5)  # half up (Python's round() goes to even)


@dataclass
class Batch:
    inputs: object
    tags: torch.Tensor  # [B, L], -1 on padding and on unlabelled rows
    labelled: torch.Tensor  # [B]
    logits: list[torch.Tensor]  # per teacher [B, L, C]
    gold_ce: list[torch.Tensor]  # per teacher [B], per word
    hidden: list[list[torch.Tensor]]  # per teacher, per student layer [B, L, H_i]
    origin: tuple[int, int] | None = None


class Collate:
    def __init__(
        self,
        tokenizer,
        schema: LabelSchema,
        teachers: list[str],
        score_fields: list[str],
        hidden_fields: list[list[str]],
    ):
        self.tokenizer, self.schema, self.teachers = tokenizer, schema, teachers
        self.score_fields, self.hidden_fields = score_fields, hidden_fields

    def __call__(self, rows: list[dict]) -> Batch:
        words, tags, labelled = gold_tags(rows, self.schema)
        L = tags.shape[1]
        n_words = torch.tensor([max(1, len(w)) for w in words], dtype=torch.float32)
        logits, gold_ce, hidden = [], [], []
        for t, score, layers in zip(self.teachers, self.score_fields, self.hidden_fields):
            logits.append(pad_stack([r[t][score] for r in rows], L))
            nll = torch.tensor([r[t]["gold_nll"] if r[t]["gold_nll"] is not None else 0.0 for r in rows])
            gold_ce.append(nll / n_words)
            hidden.append([pad_stack([r[t][h] for r in rows], L) for h in layers])
        return Batch(words_to_subwords(self.tokenizer, words), tags, labelled, logits, gold_ce, hidden)


def plan(ctx: Context) -> Plan:
    """A transformer student from several teacher layers of the cache (eq. 3)."""
    cfg: MTConfig = ctx.cfg
    reader = ctx.reader
    held = [n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher"]
    teachers = list(cfg.teachers) or held
    missing = [t for t in teachers if t not in held]
    if missing or not teachers:
        raise CacheError(
            f"the cache has no teacher {', '.join(map(repr, missing)) or 'layer'}; it holds: "
            f"{', '.join(held) or 'none'}"
        )
    kinds = {t: reader.manifest.teachers[t].kind for t in teachers}
    if any(k not in ("crf", "softmax") for k in kinds.values()):
        raise CacheError(f"the mt recipe learns from crf or softmax teachers; these are {kinds}")
    schema = reader.manifest.label_schema
    init_from = cfg.init_from or teachers[0]
    if init_from not in held:
        raise CacheError(f"--init-from {init_from!r}: the cache holds {', '.join(held)}")
    K = cfg.student_layers
    configs = {t: json.loads(reader.read_export(t, "encoder_config.json")) for t in teachers}
    teacher_layers = {t: int(c["num_hidden_layers"]) for t, c in configs.items()}
    teacher_dims: dict[str, int] = {}  # the stored width (PCA coefficients when built with --hidden-project)
    hidden_fields: list[list[str]] = []
    for t in teachers:
        need = [teacher_layer_for(j, teacher_layers[t], K) for j in range(1, K + 1)]
        stored = reader.manifest.teachers[t].hidden_layers
        if cfg.hidden_loss and not set(need) <= set(stored):
            raise CacheError(
                f"MT-Hid for a {K}-layer student needs layers {need} of teacher {t!r} "
                f"({teacher_layers[t]} layers); the cache stores {stored or 'none'}: build with "
                f"--hidden-layers {','.join(map(str, need))}, or train with --no-hidden-loss"
            )
        hidden_fields.append([f"hidden_{layer}" for layer in need] if cfg.hidden_loss else [])
        teacher_dims[t] = (
            reader.manifest.layers[t].field(hidden_fields[-1][0]).shape[0]
            if hidden_fields[-1]
            else int(configs[t]["hidden_size"])
        )
    train_names, dev_names = splits_with_dev(reader, cfg, "early stopping on dev F1")

    with tempfile.TemporaryDirectory(prefix="seqdistill-exports-") as tmp:
        export = Path(reader.export_dir(init_from, Path(tmp) / init_from))
        tokenizer = AutoTokenizer.from_pretrained(export / "tokenizer")
        scfg = transformer_config(
            schema.to_json(),
            export,
            K,
            tokenizer,
            head=cfg.head,
            dropout=cfg.dropout,
            extra={
                "cache": reader.store.url,
                "recipe": "mt",
                "teachers": teachers,
                "init": cfg.init,
                "init_from": init_from,
            },
        )
        model = TransformerTagger(scfg, export)
        if cfg.init == "teacher":
            init_from_teacher(model, export)
    score_fields = ["emissions" if kinds[t] == "crf" else "logits" for t in teachers]
    model.to(ctx.device)
    scales = hidden_scales(reader, teachers, hidden_fields) if cfg.hidden_loss and cfg.hidden_scale == "rms" else None
    hid = MTHiddenLoss(model.encoder.config.hidden_size, [teacher_dims[t] for t in teachers], K, scales)
    hid.to(ctx.device)
    fields = {
        EXAMPLES_LAYER: ["words", "tags"],
        **{t: [s, "gold_nll", *h] for t, s, h in zip(teachers, score_fields, hidden_fields)},
    }
    stream = ctx.stream(fields, train_names, Collate(tokenizer, schema, teachers, score_fields, hidden_fields))
    dev_words, dev_tags = read_split(reader, dev_names)
    weight_sums = [0.0] * len(teachers)  # eq. 2's weights over the epoch's rows, to show how they split
    rows = [0]

    def loss(batch: Batch) -> dict[str, torch.Tensor]:
        weights = [teacher_weight(ce, batch.labelled) for ce in batch.gold_ce]
        for i, w in enumerate(weights):
            weight_sums[i] += w.sum().item()
        rows[0] += len(batch.labelled)
        return mt_loss_parts(model, hid, batch, weights, cfg, ctx.device)

    def evaluate() -> dict:
        record = {
            "teacher_weights": {t: w / max(rows[0], 1) for t, w in zip(teachers, weight_sums)},
            "dev_f1": dev_f1(model, tokenizer, dev_words, dev_tags, schema.scheme),
        }
        weight_sums[:], rows[0] = [0.0] * len(teachers), 0
        return record

    params = list(model.parameters()) + (list(hid.parameters()) if cfg.hidden_loss else [])
    stage = Stage(
        name="train",
        batches=stream,
        loss=loss,
        params=lambda: params,
        optimizer=lambda ps: torch.optim.AdamW(ps, lr=cfg.lr),
        evaluate=evaluate,
        epochs=cfg.epochs,
        patience=cfg.patience,
        clip=1.0,
    )
    hidden_text = "on" if cfg.hidden_loss else "off"
    if scales:
        hidden_text += ", each teacher layer / its RMS" + "".join(
            f"; {t} RMS {', '.join(f'{x:.3g}' for x in row)}" for t, row in zip(teachers, scales)
        )
    return Plan(
        model,
        tokenizer,
        [stage],
        modules={"hidden_loss": hid},
        train=train_names,
        dev=dev_names,
        summary={"teachers": teachers},
        describe=f"training a {K}-layer transformer ({sum(p.numel() for p in model.parameters()):,} "
        f"parameters, init {cfg.init}) from {', '.join(teachers)}; soft labels {cfg.soft_labels}, "
        f"hidden loss {hidden_text}",
    )


def mt_loss_parts(
    model: TransformerTagger, hid: MTHiddenLoss, batch: Batch, weights: list[torch.Tensor], cfg: MTConfig, device
) -> dict:
    """The three terms of eq. 3, each averaged over the batch's sentences; ``weights`` are eq. 2's
    per teacher and sentence (``teacher_weight``), used by MT-Dis."""
    x = batch.inputs.to(device)
    layers = model.encode(x)
    scores = model.out(model.dropout(layers[-1]))
    mask = x.word_mask
    parts = {}
    labelled = batch.labelled.to(device)
    if labelled.any():
        tags = batch.tags.to(device)
        if model.crf is not None:
            task = model.crf.nll(scores[labelled], mask[labelled], tags[labelled])
        else:
            ce = F.cross_entropy(scores.transpose(1, 2), tags.clamp(min=0), reduction="none")
            m = mask & (tags >= 0)
            task = (ce * m).sum(1)[labelled] / m.sum(1)[labelled].clamp(min=1)
        parts["task"] = task.sum() / len(labelled)
    logits = [z.to(device) for z in batch.logits]
    if cfg.soft_labels == "mt":
        parts["mt_dis"] = mt_distillation_loss(
            scores, logits, [w.to(device) for w in weights], mask, cfg.temperature
        ).mean()
    elif cfg.soft_labels == "ensemble":
        parts["ensemble"] = ensemble_distillation_loss(scores, logits, mask, cfg.temperature).mean()
    if cfg.hidden_loss:
        teacher_hidden = [[h.to(device) for h in per_teacher] for per_teacher in batch.hidden]
        parts["mt_hid"] = hid(layers[1:], teacher_hidden, mask).mean()
    return parts


RECIPE = Recipe(
    "mt",
    MTConfig,
    plan,
    "MT-BERT (paper 002): a K-layer transformer taught by several teachers at once (hidden loss, "
    "soft labels weighted by each teacher's gold CE, task loss).",
)
