"""Two teacher layers of one cache against each other on its unlabelled sentences, from their
cached best paths (no model run): how many spans of each type each labels, how many both label
with the same words and type, and the names one gives a type that the other does not (issue 72).

    .venv/bin/python benchmarks/teacher_labels.py --cache .data/table1-gemma/cache \
        --teachers mpnet embeddinggemma [--type MISC] [--top 15]

Students learn the transfer text from these paths, so a type the teachers label differently there
is a type their students learn differently, whatever the teachers score on test.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.cache_schema import EXAMPLES_LAYER, CacheReader  # noqa: E402
from seqdistill.cache_schema.labels import tags_to_spans  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--teachers", nargs=2, required=True, metavar=("A", "B"), help="two teacher layers of the cache")
    ap.add_argument("--type", default="MISC", help="the type whose one-sided names are listed")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    reader = CacheReader(args.cache)
    missing = [t for t in args.teachers if t not in reader.manifest.teachers]
    if missing:
        ap.error(
            f"--teachers: {args.cache} has no layer {missing[0]!r} (it has: {', '.join(reader.manifest.teachers)})"
        )
    a, b = args.teachers
    schema = reader.manifest.label_schema
    count = {a: collections.Counter(), b: collections.Counter()}
    same: collections.Counter = collections.Counter()
    only = {a: collections.Counter(), b: collections.Counter()}
    sentences = 0
    fields = {EXAMPLES_LAYER: ["words", "tags"], a: ["kbest_paths"], b: ["kbest_paths"]}
    for shard in reader.iter_shards(fields):
        rows = zip(
            shard.get(EXAMPLES_LAYER, "words").to_pylist(),
            shard.get(EXAMPLES_LAYER, "tags").to_pylist(),
            shard.get(a, "kbest_paths").to_pylist(),
            shard.get(b, "kbest_paths").to_pylist(),
        )
        for words, gold, path_a, path_b in rows:
            if gold is not None or not path_a or not path_b:  # labelled sentences: the gold teaches them
                continue
            sentences += 1
            spans = {t: set(tags_to_spans(schema.decode(p[0]), schema.scheme)) for t, p in ((a, path_a), (b, path_b))}
            for t in (a, b):
                count[t].update(s[2] for s in spans[t])
            same.update(s[2] for s in spans[a] & spans[b])
            for t, other in ((a, b), (b, a)):
                only[t].update(" ".join(words[s[0] : s[1]]) for s in spans[t] - spans[other] if s[2] == args.type)
    print(f"{args.cache}: {sentences:,} unlabelled sentences, each teacher's best path\n")
    print(f"| type | {a} | {b} | same words and type | share of {a}'s | share of {b}'s |")
    print("|---|---:|---:|---:|---:|---:|")
    for ty in schema.entity_types:
        n_a, n_b, n = count[a][ty], count[b][ty], same[ty]
        print(f"| {ty} | {n_a:,} | {n_b:,} | {n:,} | {n / max(n_a, 1):.1%} | {n / max(n_b, 1):.1%} |")
    for t in (a, b):
        names = ", ".join(f"{w} ({c})" for w, c in only[t].most_common(args.top))
        print(f"\n{args.type} from {t} alone, commonest: {names}")


if __name__ == "__main__":
    main()
