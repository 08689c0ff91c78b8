"""What every recipe does the same way: open the cache and pick its teacher, load the exports a
student starts from, choose the training and dev splits, read a labelled split, predict tags,
keep the epoch records."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors

from ..cache_schema import EXAMPLES_LAYER, CacheError, CacheReader
from .data import parse_selection
from .models import EMBEDDINGS


@dataclass
class RunConfig:
    """What every recipe's config holds besides its own settings: the training and dev
    selections (``distill-train --train/--dev``, ``--unlabelled``, ``--unlabelled-sentences``),
    the stream buffer, the step cap, resuming (mgkd and xtremedistil continue from
    ``OUT/checkpoint``; mt and rnn refuse it; sentscore restarts), the seed and the device."""

    train: tuple[str, ...] = ()  # corpora[/split]; default: every */train, plus unlabelled ones
    unlabelled: bool = True  # DA: add the unlabelled corpora to the default training set
    unlabelled_sentences: int | None = None  # a seeded sample of the unlabelled rows (None: all)
    dev: tuple[str, ...] = ()  # default: every */dev, */valid
    buffer_size: int = 4096  # examples shuffled and bucketed together
    max_steps: int | None = None  # most optimiser updates (xtremedistil: per unfreezing step)
    resume: bool = False
    seed: int = 13
    device: str | None = None
    extra: dict = field(default_factory=dict)


def open_cache(cache: "str | CacheReader", storage_options: dict | None, teacher: str | None, embedding: str,
               seed: int) -> tuple[CacheReader, str]:
    """The cache's reader and the teacher layer to learn from (checked), with torch seeded."""
    if embedding not in EMBEDDINGS:
        raise ValueError(f"embedding {embedding!r} is not one of {EMBEDDINGS}")
    torch.manual_seed(seed)
    # a damaged file is refused by name; a caller may pass its own reader (e.g. with a local_cache)
    reader = cache if isinstance(cache, CacheReader) else CacheReader(cache, storage_options, verify=True)
    name = _pick_teacher(reader, teacher)
    if name is None:
        raise CacheError("the cache holds no teacher layer: build one with `distill-cache build`")
    return reader, name


def teacher_exports(reader: CacheReader, teacher: str):
    """The teacher's tokenizer and input embedding matrix, from the cache's exports."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="seqdistill-exports-") as tmp:  # used only for a remote cache
        export_dir = Path(reader.export_dir(teacher, tmp))
        tokenizer = AutoTokenizer.from_pretrained(export_dir / "tokenizer")
        weight = load_safetensors((export_dir / "embeddings.safetensors").read_bytes())["weight"]
    return tokenizer, weight


def device_for(name: str | None) -> torch.device:
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def new_tagger(reader: CacheReader, teacher: str, cfg, *, projection_dim: int | str = "lstm",
               pooling: str = "first", extra: dict | None = None):
    """A BiLSTM tagger (``tagger.py``) sized by ``cfg`` (embedding, embedding_dim, hidden_size,
    dropout, device), its embeddings filled from the teacher's exports, on its device; with the
    teacher's tokenizer. ``projection_dim``: a width, ``"lstm"`` (twice the LSTM's units) or
    ``"teacher"`` (the teacher's embedding width)."""
    from .models import StudentConfig, init_embeddings
    from .tagger import BiLSTMTagger

    tokenizer, weight = teacher_exports(reader, teacher)
    dim = weight.shape[1] if cfg.embedding == "teacher" else cfg.embedding_dim
    scfg = StudentConfig(reader.manifest.label_schema.to_json(), weight.shape[0], dim, cfg.embedding, False,
                         cfg.hidden_size, 1, cfg.dropout, arch="bilstm-tagger",
                         projection_dim={"lstm": 2 * cfg.hidden_size, "teacher": weight.shape[1]}.get(
                             projection_dim, projection_dim), pooling=pooling,
                         extra={"teacher": teacher, **(extra or {})})
    model = BiLSTMTagger(scfg)
    init_embeddings(model, weight)
    device = device_for(cfg.device)
    return model.to(device), tokenizer, device


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
    train = list(cfg.train) or [f"{c.name}/{c.split}" for c in corpora
                                if (c.labelled and c.split == "train") or (not c.labelled and cfg.unlabelled)]
    dev = list(cfg.dev) or [f"{c.name}/{c.split}" for c in corpora if c.labelled and c.split in ("dev", "valid")]
    if not train:
        raise CacheError("nothing to train on: no */train corpus in the cache; name one with --train")
    return train, dev


@torch.no_grad()
def predict_tags(model: torch.nn.Module, tokenizer, sentences: list[list[str]], batch_size: int = 128) -> list[list[str]]:
    model.eval()
    schema = model.config.schema
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    preds: dict[int, list[str]] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
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


def read_spans(reader: CacheReader, names: list[str], *, skip_unlabelled: bool = False
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


class EpochRecords:
    """The end-of-epoch bookkeeping the single-stage recipes share: each record appended to
    ``history`` and to ``OUT/metrics.jsonl`` (started afresh), the best dev F1 and its epoch, the
    student saved at each new best, and the stop rule (``patience`` epochs without a new best, or
    ``max_steps`` reached)."""

    def __init__(self, out_dir: Path, patience: int, max_steps: int | None, log=print):
        self.out_dir, self.patience, self.max_steps, self.log = Path(out_dir), patience, max_steps, log
        self.metrics = open(self.out_dir / "metrics.jsonl", "w")
        self.history: list[dict] = []
        self.best, self.best_epoch = -1.0, 0

    def end_epoch(self, record: dict, save, losses: dict[str, float]) -> bool:
        """Record epoch ``record["epoch"]`` (with ``dev_f1`` and ``step``); ``save()`` at a new best.
        Returns whether training stops here."""
        epoch, f1 = record["epoch"], record["dev_f1"]
        self.history.append(record)
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        if f1 > self.best:
            self.best, self.best_epoch = f1, epoch
            save()
        self.log(f"epoch {epoch}: " + "  ".join(f"{k} {v:.4f}" for k, v in losses.items())
                 + f"  dev F1 {100 * f1:.2f}" + ("  (best, saved)" if self.best_epoch == epoch else ""))
        return bool(self.max_steps and record["step"] >= self.max_steps) or epoch - self.best_epoch >= self.patience

    def close(self) -> None:
        self.metrics.close()
