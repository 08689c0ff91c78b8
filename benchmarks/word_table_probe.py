"""Which word table knows the types of names a student has not seen: a linear probe (issue 83).

    .venv/bin/python benchmarks/word_table_probe.py --teacher .data/teachers/mpnet-crf-conll \
        --train $D/train.txt --dev $D/valid.txt --layers 0,4,8,12 --glove $(examples/get_glove.sh)

Before a student is trained for an hour on each candidate table, this asks each table one cheap
question: from a word's vector alone, can a linear model tell the entity type of a word of a name it
never saw? Every word of the training file gets the type it has most often there (O outside names);
a logistic regression (scikit-learn, balanced class weights) learns type from vector over the training
words; it is scored on the words of the dev file's **unseen** names (a name is unseen when its words
are not those of a training name: ``seen_names.py``'s rule), as accuracy over their 5 classes (the
4 types and O) and as the share of them given an entity type at all. The test set is never read.

Tables compared, each reduced by PCA to ``--dim`` (``pipeline/word_table.py``'s reduction):
* ``teacher layer L``: the word alone through the teacher, its state at layer L (0: the input
  embeddings, pooled over the word's pieces as the teacher pools them), as ``distill-cache
  word-table`` makes it;
* ``glove``: GloVe's vector of the lowercased word (zero when GloVe lacks it), when ``--glove`` is given.

A probe is not the student: the student also reads the context and the char feature, so only the
ordering of tables is read from it, and a table is then measured by a student.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter, defaultdict

os.environ.setdefault("OMP_NUM_THREADS", "2")


def word_types(sentences, scheme) -> dict[str, str]:
    """Each lowercased word of ``sentences`` and the type it has most often in them (O outside names)."""
    from seqdistill.cache_schema.labels import tags_to_spans

    seen: dict[str, Counter] = defaultdict(Counter)
    for s in sentences:
        label = ["O"] * len(s.words)
        for a, b, t in tags_to_spans(s.tags, scheme):
            label[a:b] = [t] * (b - a)
        for w, t in zip(s.words, label):
            seen[w.lower()][t] += 1
    return {w: c.most_common(1)[0][0] for w, c in seen.items()}


def unseen_name_words(train, dev) -> list[tuple[str, str]]:
    """(lowercased word, type) of every word of the dev file's names unseen in the training file."""
    from seqdistill.cache_schema.labels import tags_to_spans

    names = {" ".join(s.words[a:b]) for s in train.sentences for a, b, _ in tags_to_spans(s.tags, train.scheme)}
    out = []
    for s in dev.sentences:
        for a, b, t in tags_to_spans(s.tags, dev.scheme):
            if " ".join(s.words[a:b]) not in names:
                out += [(w.lower(), t) for w in s.words[a:b]]
    return out


def probe(vectors: dict[str, "object"], train_types: dict[str, str], test: list[tuple[str, str]]) -> dict:
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    words = sorted(train_types)
    x = np.stack([vectors[w] for w in words])
    y = [train_types[w] for w in words]
    model = LogisticRegression(max_iter=2000, class_weight="balanced").fit(x, y)
    guess = model.predict(np.stack([vectors[w] for w, _ in test]))
    gold = [t for _, t in test]
    return {
        "accuracy": float(np.mean([g == p for g, p in zip(gold, guess)])),
        "called_a_name": float(np.mean([p != "O" for p in guess])),
        "words": len(test),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--layers", default="0,4,8,12")
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--glove", help="GloVe's directory or text file (students/word_vectors.py reads it)")
    ap.add_argument("--json", help="write the scores here too")
    args = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from seqdistill.corpora import read_corpus
    from seqdistill.pipeline.word_table import WordTableConfig, table_from_states, teacher_word_states
    from seqdistill.teachers.loading import load_teacher

    train, dev = read_corpus(args.train, "train"), read_corpus(args.dev, "dev", "dev")
    train_types, test = word_types(train.sentences, train.scheme), unseen_name_words(train, dev)
    words = sorted(set(train_types) | {w for w, _ in test})
    print(f"{len(train_types):,} training words, {len(test):,} words of unseen dev names, {len(words):,} to embed")
    results = {}
    layers = [int(x) for x in args.layers.split(",")]
    teacher = load_teacher(args.teacher, device="cpu")
    states = teacher_word_states(teacher, words, layers, WordTableConfig(), log=print)
    for layer in layers:
        table, kept = table_from_states(states[layer], args.dim)
        results[f"teacher layer {layer}"] = {**probe(dict(zip(words, table)), train_types, test), "variance_kept": kept}
        print(f"teacher layer {layer}: {results[f'teacher layer {layer}']}")
    if args.glove:
        from seqdistill.students.word_vectors import read_word_vectors

        g_words, g_vectors = read_word_vectors(args.glove)
        row = {w.lower(): i for i, w in reversed(list(enumerate(g_words)))}
        table = np.stack([g_vectors[row[w]] if w in row else np.zeros(g_vectors.shape[1], np.float32) for w in words])
        results["glove"] = {
            **probe(dict(zip(words, table)), train_types, test),
            "coverage": float(np.mean([w in row for w, _ in test])),
        }
        print(f"glove: {results['glove']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
