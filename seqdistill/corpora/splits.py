"""Few-shot splits (paper 004 §5.2): a small gold train/dev subset, the rest as silver text.

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
