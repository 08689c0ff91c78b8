"""What every recipe does the same way: open the cache and pick its teacher, load the exports a
student starts from, choose the training and dev splits, read a labelled split, predict tags and
score them."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from ..cache_schema import EXAMPLES_LAYER, CacheError, CacheReader
from ..metrics import span_scores
from ..vocabulary import EMBEDDINGS_EXPORT, read_kept, with_unk_row
from .archs.bilstm_tagger import BiLSTMTagger, TaggerConfig
from .base import EMBEDDINGS, init_embeddings
from .data import parse_selection


def open_cache(reader: CacheReader, teacher: str | None, embedding: str) -> tuple[CacheReader, str]:
    """The cache's reader and the teacher layer to learn from (checked)."""
    if embedding not in EMBEDDINGS:
        raise ValueError(f"embedding {embedding!r} is not one of {EMBEDDINGS}")
    name = _pick_teacher(reader, teacher)
    if name is None:
        raise CacheError("the cache holds no teacher layer: build one with `distill-cache build`")
    return reader, name


@dataclass
class TeacherExports:
    """What a student starts from (``export_for_students``): the teacher's tokenizer and the rows
    of its input embedding matrix the cache exported, with their subword ids and the whole
    matrix's row count when the cache trimmed it (``ids is None``: every row, ids are rows)."""

    tokenizer: object
    weight: Tensor
    ids: Tensor | None = None
    rows: int = 0

    def student_weight(self) -> Tensor:
        """The student's embedding matrix: every row, or the kept rows and the UNK row."""
        return self.weight if self.ids is None else with_unk_row(self.weight)


def teacher_exports(reader: CacheReader, teacher: str) -> TeacherExports:
    """The teacher's tokenizer and input embedding matrix, from the cache's exports."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="seqdistill-exports-") as tmp:  # used only for a remote cache
        export_dir = Path(reader.export_dir(teacher, tmp))
        tokenizer = AutoTokenizer.from_pretrained(export_dir / "tokenizer")
        path = export_dir / EMBEDDINGS_EXPORT
        with safe_open(path, "pt") as f:
            weight = f.get_tensor("weight")
        ids, rows = read_kept(path)
    return TeacherExports(tokenizer, weight, ids, rows)


def new_tagger(
    reader: CacheReader,
    teacher: str,
    cfg,
    device,
    *,
    projection_dim: int | str = "lstm",
    pooling: str = "first",
    extra: dict | None = None,
):
    """A BiLSTM tagger (``tagger.py``) sized by ``cfg`` (embedding, embedding_dim, hidden_size,
    dropout), its embeddings filled from the teacher's exports, on its device; with the
    teacher's tokenizer. ``projection_dim``: a width, ``"lstm"`` (twice the LSTM's units) or
    ``"teacher"`` (the teacher's embedding width)."""
    exports = teacher_exports(reader, teacher)
    weight = exports.student_weight()
    dim = weight.shape[1] if cfg.embedding == "teacher" else cfg.embedding_dim
    scfg = TaggerConfig(
        label_schema=reader.manifest.label_schema.to_json(),
        vocab_size=weight.shape[0],
        embedding_dim=dim,
        embedding=cfg.embedding,
        freeze_embeddings=False,
        hidden_size=cfg.hidden_size,
        num_layers=1,
        dropout=cfg.dropout,
        projection_dim={"lstm": 2 * cfg.hidden_size, "teacher": weight.shape[1]}.get(projection_dim, projection_dim),
        pooling=pooling,
        extra={"teacher": teacher, **(extra or {})},
        teacher_vocab_size=exports.rows,
    )
    model = BiLSTMTagger(scfg)
    check_embedding_dim(cfg.embedding, dim, weight)
    init_embeddings(model, exports)
    return model.to(device), exports.tokenizer


def splits_with_dev(reader: CacheReader, cfg, why: str) -> tuple[list[str], list[str]]:
    """``default_splits``, refusing a cache without a dev split (``why`` says what needs one)."""
    train, dev = default_splits(reader, cfg)
    if not dev:
        raise CacheError(f"{why}: the cache needs a dev split (or name one with --dev)")
    return train, dev


def _pick_teacher(reader: CacheReader, name: str | None) -> str | None:
    teachers = [n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher"]
    if name:
        if name not in teachers:
            raise CacheError(f"the cache has no teacher {name!r}; it holds: {', '.join(teachers) or 'none'}")
        return name
    if len(teachers) == 1:
        return teachers[0]
    if not teachers:
        return None
    raise CacheError(f"the cache holds several teachers ({', '.join(teachers)}): choose one with --teacher")


def default_splits(reader: CacheReader, cfg) -> tuple[list[str], list[str]]:
    """Training and dev corpora: ``cfg.train`` and ``cfg.dev`` when named, else every */train (and,
    with ``cfg.unlabelled``, every unlabelled corpus) and every */dev or */valid."""
    corpora = reader.manifest.corpora
    train = list(cfg.train) or [
        f"{c.name}/{c.split}"
        for c in corpora
        if (c.labelled and c.split == "train") or (not c.labelled and cfg.unlabelled)
    ]
    dev = list(cfg.dev) or [f"{c.name}/{c.split}" for c in corpora if c.labelled and c.split in ("dev", "valid")]
    if not train:
        raise CacheError("nothing to train on: no */train corpus in the cache; name one with --train")
    return train, dev


def check_embedding_dim(embedding: str, dim: int, weight) -> None:
    """Refuse, before training, an SVD width the teacher's embedding matrix cannot give."""
    if embedding == "svd" and not 0 < dim <= min(weight.shape):
        raise ValueError(
            f"--embedding-dim {dim}: the teacher's embedding matrix is "
            f"{tuple(weight.shape)} (as the cache kept it: every row, or a trimmed vocabulary's rows and the UNK row), so an SVD reduction can keep 1 to {min(weight.shape)} dimensions; "
            f"choose one of those (or --embedding teacher for all {weight.shape[1]})"
        )


def dev_f1(model, tokenizer, words: list[list[str]], tags: list[list[str]], scheme: str) -> float:
    """Span F1 of the student's tags on a labelled split."""
    return span_scores(tags, predict_tags(model, tokenizer, words), scheme)["f1"]


@torch.no_grad()
def predict_tags(
    model: torch.nn.Module, tokenizer, sentences: list[list[str]], batch_size: int = 128
) -> list[list[str]]:
    model.eval()
    schema = model.config.schema
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    preds: dict[int, list[str]] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        inputs = model.inputs(tokenizer, [sentences[i] for i in idx]).to(model.device)
        ids = model.decode(inputs)
        for j, i in enumerate(idx):
            preds[i] = schema.decode(ids[j, : len(sentences[i])].tolist())
    return [preds[i] for i in range(len(sentences))]


def read_split(reader: CacheReader, names: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Words and gold tags of the selected labelled corpora, in cache order."""
    select = parse_selection(names, reader)
    words, tags = [], []
    for shard in reader.iter_shards({EXAMPLES_LAYER: ["corpus", "split", "words", "tags"]}):
        c, s = shard.get(EXAMPLES_LAYER, "corpus").to_pylist(), shard.get(EXAMPLES_LAYER, "split").to_pylist()
        w, t = shard.get(EXAMPLES_LAYER, "words").to_pylist(), shard.get(EXAMPLES_LAYER, "tags").to_pylist()
        for i in range(len(shard)):
            if (c[i], s[i]) in select:
                if t[i] is None:
                    raise CacheError(f"{c[i]}/{s[i]} is unlabelled: it cannot be used for evaluation")
                words.append(w[i])
                tags.append(t[i])
    return words, tags


def read_spans(
    reader: CacheReader, names: list[str], *, skip_unlabelled: bool = False
) -> tuple[list[list[str]], list[list[tuple[int, int, str]]]]:
    """Words and gold ``(start, end, type)`` spans of the selected corpora, in cache order: a
    nested corpus's every entity (``entity_spans``/``entity_types``), else the spans of the flat
    tags. Unlabelled rows raise, or are left out with ``skip_unlabelled``."""
    from ..cache_schema.labels import tags_to_spans

    scheme = reader.manifest.label_schema.scheme
    select = parse_selection(names, reader)
    nested = "entity_spans" in reader.manifest.examples.field_names()
    fields = ["corpus", "split", "words", "tags"] + (["entity_spans", "entity_types"] if nested else [])
    words, spans = [], []
    for shard in reader.iter_shards({EXAMPLES_LAYER: fields}):
        col = {f: shard.get(EXAMPLES_LAYER, f).to_pylist() for f in fields}
        for i in range(len(shard)):
            if (col["corpus"][i], col["split"][i]) not in select:
                continue
            if col["tags"][i] is None:
                if skip_unlabelled:
                    continue
                raise CacheError(f"{col['corpus'][i]}/{col['split'][i]} is unlabelled: it has no gold entities")
            words.append(col["words"][i])
            if nested and col["entity_spans"][i] is not None:
                spans.append(sorted((a, b, t) for (a, b), t in zip(col["entity_spans"][i], col["entity_types"][i])))
            else:
                spans.append(tags_to_spans(col["tags"][i], scheme))
    return words, spans
