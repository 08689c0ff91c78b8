"""A teacher's F1 on a labelled split of a cache, from its cached 1-best paths (no model run), and
how peaked its k-best distributions are on every split.

    .venv/bin/python benchmarks/teacher_from_cache.py --cache .data/mpnet/cache --split conll/test

The first of the k-best paths a CRF teacher's layer holds is its Viterbi path, which is what
`distill-eval --model TEACHER` decodes; scoring it against the split's gold tags gives the same
micro F1 without running a base-size teacher over the test set again on a CPU.

The second table is the evidence for what sequence-level losses can add over 1-best labels: when
the top path holds nearly all of a sentence's probability, Seq-CE's target is the 1-best path
(issue 22). Per split: the median and mean probability of the top path, the share of sentences
whose top path holds more than 0.9 and 0.99, and the mean mass of the K paths kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from seqdistill.cache_schema import CacheReader  # noqa: E402
from seqdistill.metrics import span_scores  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--split", default="conll/test", help="CORPUS/SPLIT")
    ap.add_argument("--teacher", default=None, help="layer (default: the only teacher)")
    args = ap.parse_args()
    reader = CacheReader(args.cache)
    teachers = [n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher"]
    teacher = args.teacher or teachers[0]
    corpus, _, split = args.split.partition("/")
    tags = reader.manifest.label_schema.tags
    gold, pred, peaks = [], [], {}
    fields = {"examples": ["corpus", "split", "tags"], teacher: ["kbest_paths", "kbest_log_probs"]}
    for shard in reader.iter_shards(fields):
        for row in shard.rows():
            key = f"{row['examples']['corpus']}/{row['examples']['split']}"
            p = np.exp(np.asarray(row[teacher]["kbest_log_probs"], dtype=np.float64))
            peaks.setdefault(key, []).append((p[0], p.sum()))
            if (row["examples"]["corpus"], row["examples"]["split"]) == (corpus, split):
                gold.append(row["examples"]["tags"])
                pred.append([tags[t] for t in row[teacher]["kbest_paths"][0]])
    if not gold:
        sys.exit(f"no rows of {args.split} in {args.cache}")
    scores = span_scores(gold, pred, reader.manifest.label_schema.scheme)
    print(json.dumps({"teacher": teacher, "split": args.split, "sentences": len(gold), **scores}, indent=1))
    print("\n| split | sentences | top path p: median | mean | share > 0.9 | share > 0.99 | mass of the K paths |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, values in sorted(peaks.items()):
        top, mass = np.array(values).T
        print(
            f"| {key} | {len(top):,} | {np.median(top):.3f} | {top.mean():.3f} | {(top > 0.9).mean():.3f} | "
            f"{(top > 0.99).mean():.3f} | {mass.mean():.3f} |"
        )


if __name__ == "__main__":
    main()
