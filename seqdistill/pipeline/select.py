"""``distill-cache select``: the unlabelled rows of a cache most worth annotating next, read from what
the cache already holds (issue 37). It never loads a teacher.

Each strategy gives every candidate row a score, higher meaning more worth a human's time:

* ``uncertainty`` — least confidence of the sequence: ``1 - p(y*)``, ``p(y*)`` the probability of
  the teacher's best path (a CRF teacher's k-best log-probabilities are global, normalised by log Z;
  a SenTScore teacher's are its beam's sequence scores). A token-level teacher (softmax logits)
  gives ``p(y*) = prod_i max_t p_i(t)``, its words being independent.
* ``margin`` — ``1 - (p(y1) - p(y2))``, the two best paths. For a token-level teacher the second
  best path changes the one word whose best/second-best ratio is smallest (exact, the words being
  independent). Needs k >= 2 paths for a CRF or SenTScore layer.
* ``disagreement`` — the fraction of words on which the cache's teachers' best tags are not all the
  same (vote disagreement; needs two teacher layers or more, all of them or those named).
* ``random`` — a uniform draw, seeded: the baseline every strategy is measured against.

Diversity (decision, named here): rows are taken in score order, and a row is skipped when its
set of lowercased words has a Jaccard similarity of more than ``diversity`` (default 0.7) with a
row already picked, so that N near-duplicates (a wire story's repeated headline, a template
sentence) are not all picked; ``--diversity 1`` turns it off, ``--diversity 0`` keeps only rows
that share no word with an earlier pick. Ties in score are broken by example
id, so a selection is reproducible.

Candidates are the rows of the cache's unlabelled corpora, or of the corpora named (``--corpus
NAME[/SPLIT]``, labelled ones included: to re-check gold). The output is JSONL, one row a line with
``example_id``, ``corpus``, ``split``, ``index``, ``words``, ``score`` and the ``strategy``: the
corpus reader reads it back as unlabelled text (``{"words": [...]}``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..cache_schema import EXAMPLES_LAYER, CacheError, CacheReader

STRATEGIES = ("uncertainty", "margin", "disagreement", "random")
SEQUENCE_FIELDS = ("kbest_log_probs", "kbest_paths")  # CRF and SenTScore layers
TOKEN_FIELDS = ("logits",)  # softmax layers


@dataclass
class Pick:
    example_id: str
    corpus: str
    split: str
    index: int
    words: list[str]
    score: float
    strategy: str


def select_rows(
    reader: CacheReader,
    strategy: str,
    n: int,
    *,
    teachers: list[str] | None = None,
    corpora: list[str] | None = None,
    diversity: float = 0.7,
    seed: int = 13,
) -> list[Pick]:
    """The ``n`` candidate rows to annotate next by ``strategy`` (module docstring), best first."""
    if strategy not in STRATEGIES:
        raise CacheError(f"--strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if n < 1:
        raise CacheError(f"--n {n}: choose at least one row")
    if not 0.0 <= diversity <= 1.0:
        raise CacheError(f"--diversity {diversity}: a Jaccard similarity, between 0 and 1")
    wanted = _candidate_corpora(reader, corpora)
    layers = _teacher_layers(reader, teachers, strategy)
    rows: list[Pick] = []
    rng = np.random.default_rng(seed)
    fields = {EXAMPLES_LAYER: ["corpus", "split", "index", "words"], **{t: f for t, f in layers.items()}}
    for shard in reader.iter_shards(fields):
        corpus = shard.get(EXAMPLES_LAYER, "corpus").to_pylist()
        split = shard.get(EXAMPLES_LAYER, "split").to_pylist()
        index = shard.get(EXAMPLES_LAYER, "index").to_pylist()
        words = shard.get(EXAMPLES_LAYER, "words").to_pylist()
        for i in range(len(shard)):
            if (corpus[i], split[i]) not in wanted:
                continue
            if strategy == "random":
                score = float(rng.random())
            elif strategy == "disagreement":
                score = disagreement([_best_tags(shard, t, f, i) for t, f in layers.items()])
            else:
                ((t, f),) = layers.items()
                p1, p2 = two_best(shard, t, f, i)
                score = 1.0 - p1 if strategy == "uncertainty" else 1.0 - (p1 - p2)
            rows.append(Pick(shard.example_ids[i], corpus[i], split[i], index[i], words[i], score, strategy))
    if not rows:
        raise CacheError("no candidate rows: the cache has no unlabelled corpus; name corpora with --corpus")
    rows.sort(key=lambda p: (-p.score, p.example_id))
    return diverse(rows, n, diversity)


def disagreement(paths: list[np.ndarray]) -> float:
    """The fraction of words whose best tags are not the same in every path."""
    stacked = np.stack(paths)
    return float((stacked != stacked[0]).any(0).mean()) if stacked.shape[1] else 0.0


def diverse(rows: list[Pick], n: int, threshold: float) -> list[Pick]:
    """The first ``n`` rows, skipping any whose lowercased word set has a Jaccard similarity of more
    than ``threshold`` with one already taken."""
    picked: list[Pick] = []
    sets: list[set[str]] = []
    for row in rows:
        words = {w.lower() for w in row.words}
        if any(len(words & s) > threshold * len(words | s) for s in sets):
            continue
        picked.append(row)
        sets.append(words)
        if len(picked) == n:
            break
    return picked


def write_selection(picks: list[Pick], path) -> None:
    """JSONL, one picked row a line (written whole, then renamed: never half a file)."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for p in picks:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")
    tmp.replace(out)


def _teacher_layers(reader: CacheReader, names: list[str] | None, strategy: str) -> dict[str, list[str]]:
    """The teacher layers a strategy reads, with the fields it reads from each."""
    layers = {n: layer for n, layer in reader.manifest.layers.items() if layer.kind == "teacher"}
    if names:
        unknown = [n for n in names if n not in layers]
        if unknown:
            raise CacheError(f"the cache has no teacher {unknown[0]!r}; it holds: {', '.join(layers) or 'none'}")
        layers = {n: layers[n] for n in names}
    if strategy == "random":
        return {}
    out = {}
    for name, layer in layers.items():
        fields = scoring_fields({f.name for f in layer.fields})
        if fields:
            out[name] = fields
        elif names:
            raise CacheError(f"teacher {name!r} stores neither k-best paths nor logits: it cannot score rows")
    if strategy == "disagreement":
        if len(out) < 2:
            raise CacheError(
                f"--strategy disagreement compares teachers: the cache has {len(out)} teacher layer(s) with "
                "paths or logits; add another with `distill-cache build --teacher ...`"
            )
        return out
    if len(out) != 1:
        raise CacheError(
            f"--strategy {strategy} reads one teacher: the cache holds {', '.join(out) or 'none'}; "
            "choose one with --teacher"
        )
    if strategy == "margin":
        (name,) = out
        info = reader.manifest.teachers.get(layers[name].teacher or name)
        k = (info.decoding or {}).get("k") if info else None
        if "kbest_paths" in out[name] and k is not None and k < 2:
            raise CacheError(f"--strategy margin needs two paths a row; teacher {name!r} stores k = {k}")
    return out


def _candidate_corpora(reader: CacheReader, names: list[str] | None) -> set[tuple[str, str]]:
    have = [(c.name, c.split, c.labelled) for c in reader.manifest.corpora]
    if not names:
        return {(c, s) for c, s, labelled in have if not labelled}
    out = set()
    for name in names:
        corpus, _, split = name.partition("/")
        match = {(c, s) for c, s, _ in have if c == corpus and (not split or s == split)}
        if not match:
            listed = ", ".join(f"{c}/{s}" for c, s, _ in have)
            raise CacheError(f"--corpus {name!r}: the cache has no such corpus; it holds: {listed}")
        out |= match
    return out


def scoring_fields(have: set[str]) -> list[str] | None:
    """The fields a teacher layer holding ``have`` is scored by: its logits (a softmax layer, though
    it also holds scheme paths since issue 65: the scores it was scored by before those paths
    existed), else its k-best paths, else None."""
    if set(TOKEN_FIELDS) <= have:
        return list(TOKEN_FIELDS)
    if set(SEQUENCE_FIELDS) <= have:
        return list(SEQUENCE_FIELDS)
    return None


def two_best(shard, teacher: str, fields: list[str], i: int) -> tuple[float, float]:
    """The probabilities of the teacher's two best paths for row ``i`` (module docstring)."""
    if fields == list(SEQUENCE_FIELDS):
        lp = np.asarray(shard.get(teacher, "kbest_log_probs")[i].as_py(), dtype=np.float64)
        lp = lp[np.isfinite(lp)]
        return (math.exp(lp[0]) if len(lp) else 0.0), (math.exp(lp[1]) if len(lp) > 1 else 0.0)
    logits = np.asarray(shard.get(teacher, "logits")[i], dtype=np.float64)
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    top = np.sort(logp, axis=1)[:, ::-1]
    best = top[:, 0].sum()
    second = best + (top[:, 1] - top[:, 0]).max() if logp.shape[1] > 1 else -np.inf
    return math.exp(best), math.exp(second)


def _best_tags(shard, teacher: str, fields: list[str], i: int) -> np.ndarray:
    if fields == list(SEQUENCE_FIELDS):
        return np.asarray(shard.get(teacher, "kbest_paths")[i].as_py()[0])
    return np.asarray(shard.get(teacher, "logits")[i]).argmax(1)
