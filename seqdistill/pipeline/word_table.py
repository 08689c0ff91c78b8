"""A static word table made by the teacher itself (``distill-cache word-table``, issue 83 item 2).

Word vectors close most of the default student's gap on names it never saw in training (issue 72),
but GloVe is a file the user must find. Model2Vec (MinishLab) makes a static table from a
transformer alone: each word of a vocabulary through the model on its own, its output vector,
reduced by PCA. This module does that with the cache's teacher, so that a student gets word
knowledge from the model it distils and from nothing else: ``distill-train mgkd --word-vectors DIR``
reads the table as it reads GloVe's (with ``--hash-rows N`` it becomes a hashed table with no word
list, and a word outside the vocabulary gets its character n-grams' vector).

It is stage one's: it needs the teacher's weights, which stage two never loads. It writes a
directory beside the cache, not a field inside it, because a cache's teacher layer is written once
(DESIGN.md: adding to a cache adds a layer and never rewrites one), and the table is not per example.

Decisions:
* **Vocabulary**: the words of the cache's corpora, every split but those of ``exclude_splits``
  (``test`` by default: a table read from the test set's own words would see the test set), commonest
  first, at most ``rows``; then the words of ``extra_words`` (a user's word list, such as GloVe's,
  one word a line or a word vector file's first column) in their order, up to the same ``rows``.
* **Keys**: for an uncased teacher (its tokenizer gives ``Ab`` and ``ab`` the same pieces) one row per
  lowercased word, its count the sum of its spellings'; otherwise one row per word as written. The
  student looks a word up as written, else lowercased (``students/word_vectors.py``), so both work.
* **The vector**: the word alone, as a one-word sentence, through the teacher (in the precision the
  build uses); its word-level state at ``layer`` (the last by default: a fine-tuned tagger's last
  layer holds what the teacher thinks the word is when it has no context), pooled over the word's
  pieces as the teacher pools them.
* **PCA** to ``dim`` dimensions (``cache_schema.encodings.fit_pca``: at most 20,000 words drawn with
  seed 0), then **one scale** for the whole table, so that its coefficients have a root mean square of
  1: the student's layers see inputs of the size they are initialised for, and the words' relative
  positions are kept.
* **Files**: ``vectors.npy`` (float32 ``[N, dim]``), ``words.txt`` (a word a line, in the rows'
  order) and ``word_table.json`` (what made it: the teacher's fingerprints, the layer, the variance the
  PCA kept, the vocabulary's sources and counts). Written into a temporary directory and renamed, so a
  killed run leaves the previous table or none.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..cache_schema import CacheReader
from ..cache_schema.encodings import fit_pca, project
from ..teachers.base import teacher_fingerprints
from ..teachers.kind import to_host
from ..teachers.loading import load_teacher

VECTORS_FILE, WORDS_FILE, META_FILE = "vectors.npy", "words.txt", "word_table.json"


class WordTableError(ValueError):
    """Options or inputs a word table cannot be made from, naming which and what to do."""


@dataclass
class WordTableConfig:
    rows: int = 100_000  # words kept, commonest first
    dim: int = 50  # PCA dimensions (GloVe 6B 50d's width, which the student measured best with)
    layer: int | None = None  # the teacher's hidden layer (0 = its input embeddings); None: the last
    exclude_splits: list[str] = field(default_factory=lambda: ["test"])
    extra_words: str | None = None  # a word list appended after the corpora's words
    precision: str = "auto"
    batch_words: int = 512  # one-word sentences a teacher batch
    device: str | None = None


@dataclass
class WordTableReport:
    words: int
    from_corpora: int
    from_extra: int
    variance_kept: float
    out: str


def cache_vocabulary(reader: CacheReader, exclude_splits=("test",)) -> Counter:
    """Word counts over the examples of ``reader`` whose split is not in ``exclude_splits``."""
    counts: Counter = Counter()
    for shard in reader.iter_shards({"examples": ["split", "words"]}):
        columns = shard.columns["examples"]
        splits, words = columns["split"].to_pylist(), columns["words"].to_pylist()
        for split, sentence in zip(splits, words):
            if split not in exclude_splits:
                counts.update(sentence)
    return counts


def is_uncased(tokenizer) -> bool:
    """Whether ``tokenizer`` lowercases: it gives ``Ab`` and ``ab`` the same pieces."""
    return tokenizer is not None and tokenizer.tokenize("Paris London") == tokenizer.tokenize("paris london")


def choose_words(counts: Counter, rows: int, lowercase: bool, extra: list[str] = ()) -> tuple[list[str], int]:
    """The table's words (module docstring, "Vocabulary" and "Keys") and how many came from ``counts``:
    the counted words commonest first (ties in first-seen order), keyed lowercased when ``lowercase``,
    then the words of ``extra`` not yet in, up to ``rows`` in all."""
    if lowercase:
        merged: Counter = Counter()
        for w, n in counts.items():
            merged[w.lower()] += n
        counts = merged
    usable = Counter({w: n for w, n in counts.items() if w.strip() and "\n" not in w})
    words = [w for w, _ in usable.most_common(rows)]
    n_corpora = len(words)
    seen = set(words)
    for w in extra:
        if len(words) >= rows:
            break
        key = w.lower() if lowercase else w
        if key and key.strip() and "\n" not in key and key not in seen:
            seen.add(key)
            words.append(key)
    return words, n_corpora


def read_word_list(path) -> list[str]:
    """The words of a word list: one word a line, or a word vector text file's first column; or
    the first column of a ``.parquet`` file (GloVe's index in DATA.md's package)."""
    p = Path(path)
    if not p.is_file():
        raise WordTableError(
            f"{p}: no such word list (--words: a file of one word a line, or a .parquet file whose first column holds the words)"
        )
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [str(w) for w in pq.read_table(p).column(0).to_pylist()]
    with open(p, encoding="utf-8") as lines:
        return [line.rstrip("\n").split(" ", 1)[0] for line in lines if line.strip()]


def teacher_word_states(teacher, words: list[str], layers: list[int], cfg: WordTableConfig, log=print) -> dict:
    """Each word alone through ``teacher``: its word-level state at each of ``layers``, by layer,
    ``[N, D]`` float32."""
    out: dict[int, np.ndarray] = {}
    for start in range(0, len(words), cfg.batch_words):
        batch = slice(start, min(start + cfg.batch_words, len(words)))
        host = to_host(
            teacher.outputs(
                [[w] for w in words[batch]],
                None,
                k=1,
                marginals=False,
                hidden_layers=list(layers),
                subwords=False,
                precision=cfg.precision,
            )
        )
        for layer in layers:
            states = host["hidden"][layer][:, 0]
            if layer not in out:
                out[layer] = np.zeros((len(words), states.shape[1]), np.float32)
            out[layer][batch] = states
        if (start // cfg.batch_words) % 40 == 39:
            log(f"  {batch.stop:,} of {len(words):,} words")
    return out


def table_from_states(states: np.ndarray, dim: int) -> tuple[np.ndarray, float]:
    """The states' PCA to ``dim`` dimensions, scaled by one number to a root mean square of 1
    (module docstring), and the share of variance the PCA kept."""
    components, mean, kept = fit_pca(states, dim, seed=0)
    table = project(states, components, mean)
    rms = float(np.sqrt(np.mean(np.square(table, dtype=np.float64))))
    return (table / max(rms, 1e-12)).astype(np.float32), kept


def build_word_table(
    cache: str,
    teacher_dir: str,
    out: str,
    cfg: WordTableConfig | None = None,
    storage_options: dict | None = None,
    log=print,
) -> WordTableReport:
    """Write the teacher's word table of the cache's vocabulary into directory ``out`` (module
    docstring)."""
    cfg = cfg or WordTableConfig()
    if cfg.rows <= 0 or cfg.dim <= 0:
        raise WordTableError(f"--rows {cfg.rows} and --dim {cfg.dim}: both take a positive number")
    extra = read_word_list(cfg.extra_words) if cfg.extra_words else []
    reader = CacheReader(cache, storage_options)
    counts = cache_vocabulary(reader, tuple(cfg.exclude_splits))
    if not counts:
        raise WordTableError(
            f"{cache}: no words outside the splits {', '.join(cfg.exclude_splits)}; the table needs training text"
        )
    import torch

    teacher = load_teacher(teacher_dir, device=cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    layer = teacher.num_layers if cfg.layer is None else cfg.layer
    if not 0 <= layer <= teacher.num_layers:
        raise WordTableError(f"--layer {layer}: the teacher has layers 0..{teacher.num_layers} (0 = its embeddings)")
    words, n_corpora = choose_words(counts, cfg.rows, is_uncased(getattr(teacher, "tokenizer", None)), extra)
    if len(words) < cfg.dim:
        raise WordTableError(f"--dim {cfg.dim}: the vocabulary holds {len(words)} words; give fewer dimensions")
    log(
        f"word table: {len(words):,} words ({n_corpora:,} from {cache}, {len(words) - n_corpora:,} from --words), "
        f"layer {layer} of {teacher.num_layers}"
    )
    states = teacher_word_states(teacher, words, [layer], cfg, log)[layer]
    table, kept = table_from_states(states, cfg.dim)
    log(f"word table: PCA to {cfg.dim} dimensions keeps {100 * kept:.1f}% of the variance")
    meta = {
        "what": "a static word table from the teacher (seqdistill/pipeline/word_table.py)",
        "teacher": {"path": str(teacher_dir), "fingerprints": teacher_fingerprints(teacher_dir)},
        "layer": layer,
        "variance_kept": kept,
        "words": len(words),
        "from_corpora": n_corpora,
        "cache": str(cache),
        "config": asdict(cfg),
        "corpus_words": int(sum(counts.values())),
    }
    _publish(out, table, words, meta)
    return WordTableReport(len(words), n_corpora, len(words) - n_corpora, kept, out)


def _publish(out: str, table: np.ndarray, words: list[str], meta: dict) -> None:
    """Write the three files into a temporary directory beside ``out`` and rename it into place."""
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        np.save(tmp / VECTORS_FILE, table, allow_pickle=False)
        (tmp / WORDS_FILE).write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        target.chmod(0o755)  # mkdtemp's 0700 would hide the table from the other users of a shared cache
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
