"""Test F1 of a student trained with all of its word vectors when it keeps only the first N at
inference (issue 72): can a student trained with a large table ship a small one?

    .venv/bin/python benchmarks/word_vector_rows.py --data $D/test.txt --model .data/screen/glove50-s13 \
        --rows 50000,100000,200000,0

For each N (0: every row) the student's rows past the N-th are zeroed, which is what a word missing
from the table reads (row 0, a zero vector): the student then sees the words of rows past N as it
saw unknown words in training. The vector files are sorted by frequency, so the first N are the
commonest, as ``--word-vectors-rows N`` keeps them at training. One thread, in torch.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the labelled file scored (test)")
    ap.add_argument("--model", required=True, help="a student directory trained with --word-vectors")
    ap.add_argument("--rows", default="50000,100000,200000,0", help="N, comma-separated (0: all rows)")
    ap.add_argument("--json", help="write the scores here too")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from seqdistill.corpora import read_corpus
    from seqdistill.deploy.evaluate import score_tagger
    from seqdistill.inference import Tagger

    corpus = read_corpus(args.data, "test", "test")
    tagger = Tagger.load(args.model)
    table = getattr(tagger.backend.module, "word_vectors", None)
    if table is None:
        raise SystemExit(f"{args.model}: a student without word vectors (train it with --word-vectors)")
    full = table.embed.weight.detach().clone()
    total = full.shape[0] - 1
    rows = []
    for n in (int(x) for x in args.rows.split(",")):
        kept = total if n <= 0 or n >= total else n
        with torch.no_grad():
            table.embed.weight.copy_(full)
            table.embed.weight[kept + 1 :] = 0.0  # row 0 is the unknown word; rows 1..kept stay
        f1 = 100 * score_tagger(tagger, corpus)["f1"]
        rows.append({"rows": kept, "f1": round(f1, 2)})
        print(f"{kept:>9,} rows: test F1 {f1:.2f}", flush=True)
    print(f"\n{args.model} ({total:,} rows trained), {args.data}\n")
    print("| rows kept at inference | test F1 |\n|---:|---:|")
    for r in rows:
        print(f"| {r['rows']:,} | {r['f1']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "data": args.data, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
