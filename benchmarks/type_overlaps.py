"""How often a per-type (BILOU) student's entities of different types overlap, and how often such an
overlap is an error (issue 82, item 4).

    .venv/bin/python benchmarks/type_overlaps.py --data $D/test.txt --model "SRU++ (seed 13)=DIR" ...

A per-type student (`distill-train rnn`) decodes one BILOU layer per entity type, so two of its
entities may overlap when their types differ (a nested corpus needs that; CoNLL-2003 has no overlap
in its gold). Each pair of predicted entities of different types that share a word is counted once,
and classed by the gold of the same file (flat, or nested when the corpus gives nested entities):
**both right** (each is a gold entity: a true nesting), **one right** (one is gold, the other an
error the flattened output drops or keeps), **neither** (both are errors). Every model (any
directory `Tagger.load` reads) tags the same pre-split sentences, one thread.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")


def overlaps(spans: list[tuple[int, int, str]]) -> list[tuple[tuple, tuple]]:
    """The pairs of ``(start, end, type)`` spans of different types that share at least one word."""
    return [(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :] if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]]


def count_overlaps(gold: list[list[tuple]], pred: list[list[tuple]]) -> dict:
    """The overlapping pairs of every sentence's predictions, by how many of the two are gold."""
    out = {"sentences": 0, "pairs": 0, "both right": 0, "one right": 0, "neither": 0}
    for g, p in zip(gold, pred):
        pairs = overlaps(sorted(p))
        out["sentences"] += bool(pairs)
        out["pairs"] += len(pairs)
        truth = set(map(tuple, g))
        for a, b in pairs:
            right = (tuple(a) in truth) + (tuple(b) in truth)
            out[("neither", "one right", "both right")[right]] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the labelled file scored (test)")
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR, repeatable")
    ap.add_argument("--json", help="write the counts here too")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from seqdistill.cache_schema.labels import tags_to_spans
    from seqdistill.corpora import read_corpus
    from seqdistill.inference import Tagger

    corpus = read_corpus(args.data, "test", "test")
    sentences = [s.words for s in corpus.sentences]
    gold = [s.entities if corpus.nested else tags_to_spans(s.tags, corpus.scheme) for s in corpus.sentences]
    rows = {}
    for spec in args.model:
        name, _, path = spec.rpartition("=")
        rows[name] = count_overlaps(gold, Tagger.load(path, threads=1).predict_spans(sentences, batch_size=32))
    print(f"{len(sentences):,} sentences of {args.data}\n")
    print("| model | sentences with an overlap | overlapping pairs | both right | one right | neither |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['sentences']} | {r['pairs']} | {r['both right']} | {r['one right']} | {r['neither']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
