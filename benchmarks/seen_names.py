"""F1 on the names a model saw in training against those it did not (issue 72).

    .venv/bin/python benchmarks/seen_names.py --train $D/train.txt --data $D/test.txt \
        --model "teacher, int8=.data/peers/conll-mpnet/teacher-onnx-int8" --model "student=DIR" ...

A test entity is **seen** when its words, joined by one space, are the words of some entity of the
training file (of any type; case kept), and **unseen** otherwise (Augenstein et al., 2017, "Generalisation
in named entity recognition"). Gold and predicted entities are split by that one rule, so the seen
row's precision counts a predicted entity whose text is a training name, its recall a gold entity
whose text is; the two rows' counts add up to the whole file's. Scores: exact spans
(``metrics.span_set_scores``), micro over types, and per type for the unseen names. Every model
(any directory ``Tagger.load`` reads: a student, a teacher, an ONNX export) tags the same
pre-split sentences, one thread.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")


def entity_text(words: list[str], span: tuple[int, int, str]) -> str:
    return " ".join(words[span[0] : span[1]])


def split_scores(sentences, gold, pred, names: set[str]) -> dict:
    """``span_set_scores`` on the seen and on the unseen entities of ``gold`` and ``pred`` (lists
    of ``(start, end, type)`` spans per sentence), a span being seen when its text is in ``names``."""
    from seqdistill.metrics import span_set_scores

    out = {"all": span_set_scores(gold, pred)}
    for part, keep in (("seen", True), ("unseen", False)):
        g = [[s for s in ss if (entity_text(w, s) in names) == keep] for w, ss in zip(sentences, gold)]
        p = [[s for s in ss if (entity_text(w, s) in names) == keep] for w, ss in zip(sentences, pred)]
        out[part] = span_set_scores(g, p)
        out[part]["gold"], out[part]["predicted"] = sum(map(len, g)), sum(map(len, p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="the training file whose entities count as seen")
    ap.add_argument("--data", required=True, help="the file scored (test)")
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR, repeatable")
    ap.add_argument("--json", help="write the scores here too")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from seqdistill.cache_schema.labels import tags_to_spans
    from seqdistill.corpora import read_corpus
    from seqdistill.inference import Tagger

    train, test = read_corpus(args.train, "train"), read_corpus(args.data, "test", "test")
    names = {entity_text(s.words, e) for s in train.sentences for e in tags_to_spans(s.tags, train.scheme)}
    sentences = [s.words for s in test.sentences]
    gold = [tags_to_spans(s.tags, test.scheme) for s in test.sentences]
    rows = {}
    for spec in args.model:
        name, _, path = spec.rpartition("=")
        tagger = Tagger.load(path, threads=1)
        rows[name] = split_scores(sentences, gold, tagger.predict_spans(sentences, batch_size=32), names)
    seen = rows[next(iter(rows))]["seen"]
    unseen = rows[next(iter(rows))]["unseen"]
    print(
        f"{len(names):,} entity names in {args.train}; in {args.data}: {seen['gold']:,} gold entities seen, "
        f"{unseen['gold']:,} unseen ({100 * unseen['gold'] / (seen['gold'] + unseen['gold']):.1f}%)\n"
    )
    types = sorted(unseen["per_type"])
    print("| model | F1 | seen F1 (P / R) | unseen F1 (P / R) | " + " | ".join(f"unseen {t}" for t in types) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(types))
    for name, r in rows.items():
        s, u = r["seen"], r["unseen"]
        per = " | ".join(f"{100 * u['per_type'].get(t, {}).get('f1', 0):.1f}" for t in types)
        print(
            f"| {name} | {100 * r['all']['f1']:.2f} | {100 * s['f1']:.2f} ({100 * s['precision']:.1f} / "
            f"{100 * s['recall']:.1f}) | {100 * u['f1']:.2f} ({100 * u['precision']:.1f} / "
            f"{100 * u['recall']:.1f}) | {per} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
