"""Splits of one labelled file: train/dev/test by ratios (``split_corpus``, ``distill-cache split``),
and few-shot splits (paper 004 §5.2): a small gold train/dev subset, the rest as silver text.

``few_shot_split`` draws ``n_train`` + ``n_dev`` sentences of a labelled corpus at random (seeded)
as the gold train and dev sets, and writes every other sentence as silver data with its labels
hidden (raw text, one sentence per line), for a teacher fine-tuned on the gold split to label.
With ``n_test``, that many further sentences are held out as ``gold_test.txt`` (for a corpus
that ships as one file, such as WNUT-2016 here) and are neither gold nor silver.
Decision: ``-DOCSTART-`` document markers are dropped (the draw is over sentences, as in the
paper); the files keep the corpus's own tag scheme.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from ..cache_schema.labels import tags_to_spans
from .read import read_corpus
from .sentences import CorpusError


def few_shot_split(
    corpus_path: str,
    out_dir,
    n_train: int,
    n_dev: int,
    seed: int = 13,
    n_test: int = 0,
    tag_names: Sequence[str] | None = None,
) -> dict[str, str]:
    """Write ``gold_train.txt``, ``gold_dev.txt`` (CoNLL, ``word tag`` lines), ``silver.txt``
    (raw text) and, with ``n_test``, ``gold_test.txt`` under ``out_dir``; return their paths.
    ``tag_names`` names integer tag ids of a Parquet or ``hf:`` corpus (``--tag-names``); the
    files written hold the tag strings."""
    corpus = read_corpus(corpus_path, "corpus", "train", tag_names=tag_names)
    if corpus.nested:
        raise CorpusError(
            corpus_path,
            None,
            "a few-shot split writes flat CoNLL files; nested entities (JSONL 'entities') are not supported here",
        )
    if not corpus.labelled:
        raise CorpusError(corpus_path, None, "a few-shot split needs a labelled corpus")
    n = len(corpus.sentences)
    if n_train < 1 or n_dev < 1 or n_test < 0 or n_train + n_dev + n_test >= n:
        raise CorpusError(
            corpus_path,
            None,
            f"cannot draw {n_train} train + {n_dev} dev + {n_test} test sentences "
            f"from {n} and leave silver data: choose smaller sizes",
        )
    order = list(range(n))
    random.Random(seed).shuffle(order)
    test = order[:n_test]  # drawn first, so the test set does not move with the train/dev sizes
    rest = order[n_test:]
    train, dev, silver = rest[:n_train], rest[n_train : n_train + n_dev], sorted(rest[n_train + n_dev :])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"gold_train": out / "gold_train.txt", "gold_dev": out / "gold_dev.txt", "silver": out / "silver.txt"}
    gold = [("gold_train", sorted(train)), ("gold_dev", sorted(dev))]
    if n_test:
        paths["gold_test"] = out / "gold_test.txt"
        gold.append(("gold_test", sorted(test)))
    for key, idx in gold:
        with open(paths[key], "w", encoding="utf-8") as f:
            for i in idx:
                s = corpus.sentences[i]
                f.write("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n")
    with open(paths["silver"], "w", encoding="utf-8") as f:
        for i in silver:
            f.write(" ".join(corpus.sentences[i].words) + "\n")
    return {k: str(v) for k, v in paths.items()}


SPLITS = ("train", "dev", "test")


def split_corpus(
    corpus_path: str,
    out_dir,
    ratios: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 13,
    tag_names: Sequence[str] | None = None,
) -> dict[str, dict]:
    """One labelled file into seeded ``train.txt``, ``dev.txt`` and ``test.txt`` under ``out_dir``
    (CoNLL, ``word tag`` lines, in the corpus's own tag scheme); their counts (sentences, documents,
    words, entities) by split name.

    Decisions (issue 65): where the file marks documents (``-DOCSTART-``), whole documents are
    drawn, so that no document's sentences fall on both sides of a split (a document's sentences
    share names and topics, and splitting them would flatter dev and test), and each file marks
    its documents again; otherwise sentences are drawn. The units are shuffled with ``seed`` and
    dealt in that order: train until it holds ``ratios[0]`` of the sentences, then dev until it
    holds ``ratios[1]``, the rest to test; each file keeps the corpus's order. A file too small
    for every split to get one unit is refused, and so are existing files: nothing is written
    unless all three can be."""
    ratios = tuple(float(r) for r in ratios)
    if len(ratios) != 3 or any(r <= 0 for r in ratios) or abs(sum(ratios) - 1) > 1e-6:
        raise ValueError(f"ratios {ratios}: give three positive fractions for train, dev and test that add up to 1")
    corpus = read_corpus(corpus_path, "corpus", "train", tag_names=tag_names)
    if corpus.nested:
        raise CorpusError(corpus_path, None, "a split writes flat CoNLL files; nested entities cannot be split here")
    if not corpus.labelled:
        raise CorpusError(corpus_path, None, "a split needs a labelled corpus (words with tags)")
    documents = any(s.doc_id is not None for s in corpus.sentences)
    units: list[list[int]] = []  # sentence indices of each document (or each sentence alone)
    for i, s in enumerate(corpus.sentences):
        if documents and units and corpus.sentences[units[-1][0]].doc_id == s.doc_id:
            units[-1].append(i)
        else:
            units.append([i])
    kind = "documents" if documents else "sentences"
    n = len(corpus.sentences)
    order = list(range(len(units)))
    random.Random(seed).shuffle(order)
    chosen: dict[str, list[int]] = {name: [] for name in SPLITS}  # unit indices
    counts = dict.fromkeys(SPLITS, 0)
    goals = {"train": ratios[0] * n, "dev": (ratios[0] + ratios[1]) * n}
    for u in order:
        taken = counts["train"] + counts["dev"]
        name = "train" if counts["train"] < goals["train"] else "dev" if taken < goals["dev"] else "test"
        chosen[name].append(u)
        counts[name] += len(units[u])
    empty = [name for name in SPLITS if not chosen[name]]
    if empty:
        raise CorpusError(
            corpus_path,
            None,
            f"{len(units)} {kind} ({n} sentences) are too few for ratios {','.join(map(str, ratios))}: "
            f"{' and '.join(empty)} would be empty; give a larger file or other --ratios",
        )
    out = Path(out_dir)
    paths = {name: out / f"{name}.txt" for name in SPLITS}
    there = [str(p) for p in paths.values() if p.exists()]
    if there:
        raise CorpusError(corpus_path, None, f"{', '.join(there)} exist; remove them or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    report = {}
    written = []
    try:
        for name in SPLITS:
            sentences = [corpus.sentences[i] for u in sorted(chosen[name]) for i in units[u]]
            tmp = paths[name].with_name(f".{paths[name].name}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                for u in sorted(chosen[name]):
                    if documents:
                        f.write("-DOCSTART- O\n\n")
                    for i in units[u]:
                        s = corpus.sentences[i]
                        f.write("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n")
            written.append(tmp)
            report[name] = {
                "path": str(paths[name]),
                "sentences": len(sentences),
                "documents": len(chosen[name]) if documents else None,
                "words": sum(len(s.words) for s in sentences),
                "entities": sum(len(tags_to_spans(s.tags, corpus.scheme)) for s in sentences),
            }
        for tmp, name in zip(written, SPLITS):  # all three written: publish them
            tmp.replace(paths[name])
    finally:
        for tmp in written:
            tmp.unlink(missing_ok=True)
    return report
