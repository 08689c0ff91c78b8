"""What each vocabulary option keeps, and what a student over it reads through its UNK row (issue 53):
for a teacher's tokenizer and input embedding matrix, the corpora a cache is built over (``--cache``)
and a labelled corpus it never saw (``--target``, the test set), each option of
``seqdistill.vocabulary.choose_rows`` — the corpora's subwords alone (the default before issue 53),
those and the N most frequent subwords of their scripts for each ``--frequent`` N, every row — with
the rows it keeps, the bytes those rows take in the cache (a trimmed set in fp16 with its int64 ids,
the build's default ``--dtype``; every row in fp32) and in an int8 export, and the
share of the target's words and gold spans that read the UNK row. No training: coverage is what
the options differ in; docs/RESULTS.md has the students trained over them.

    .venv/bin/python benchmarks/vocabulary_coverage.py --encoder DIR --cache train.txt,dev.txt \
        --target test.txt --frequent 2048,8192,32768 --name NAME --write docs/RESULTS.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def matrix_shape(encoder: Path) -> tuple[int, int]:
    """The input embedding matrix's shape, read from the safetensors header alone."""
    from safetensors import safe_open

    with safe_open(str(encoder / "model.safetensors"), "pt") as f:
        name = next(k for k in f.keys() if k.endswith(("embed_tokens.weight", "word_embeddings.weight")))
        return tuple(f.get_slice(name).get_shape())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", required=True, help="the teacher's encoder (a Hugging Face model directory)")
    ap.add_argument("--cache", required=True, help="comma-separated corpora the cache is built over")
    ap.add_argument("--target", required=True, help="a labelled corpus the cache does not hold (the test set)")
    ap.add_argument("--frequent", default="2048,8192,32768", help="comma-separated N of frequent subwords")
    ap.add_argument("--name", default="coverage", help="the section's name in --write")
    ap.add_argument("--write", default=None, help="Markdown file whose section gets the table")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from seqdistill.cache_schema.labels import tags_to_spans
    from seqdistill.corpora import read_corpus
    from seqdistill.vocabulary import choose_rows, unseen_share, unseen_span_share, unseen_words

    encoder = Path(args.encoder)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    rows, dim = matrix_shape(encoder)
    cache = [s.words for f in args.cache.split(",") for s in read_corpus(f, "cache", "x", labelled=False).sentences]
    target = read_corpus(args.target, "target", "test")
    words = [s.words for s in target.sentences]
    gold = [tags_to_spans(s.tags, target.scheme) for s in target.sentences]
    options = [("corpus subwords alone (before issue 53)", "trimmed", 0)]
    options += [(f"corpus + {n:,} frequent of its scripts", "trimmed", n) for n in map(int, args.frequent.split(","))]
    options += [("every row", "full", 0)]
    mb = lambda b: f"{b / 2**20:,.1f}"  # noqa: E731
    lines = [
        f"<!-- vocabulary_coverage:{args.name}:begin -->",
        f"`.venv/bin/python benchmarks/vocabulary_coverage.py --encoder {args.encoder} --cache {args.cache} "
        f"--target {args.target} --frequent {args.frequent} --name {args.name}` — {encoder.name} ({rows:,} x {dim}); "
        f"the cache's corpora: {len(cache):,} sentences, {sum(map(len, cache)):,} words; the target: "
        f"{len(words):,} sentences, {sum(map(len, words)):,} words, {sum(map(len, gold)):,} gold spans; "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| rows kept | option | of the matrix | cache export | int8 rows | unseen target words | gold spans with one |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for label, mode, n in options:
        t = time.time()
        kept = choose_rows(tokenizer, cache, rows, mode, n)
        ids = np.arange(rows) if kept.ids is None else kept.ids
        row_of_id = np.full(rows, len(ids), dtype=np.int64)
        row_of_id[ids] = np.arange(len(ids))
        flags = unseen_words(tokenizer, words, row_of_id, len(ids))
        scripts = f" ({', '.join(kept.scripts)})" if kept.scripts and n else ""
        cache_bytes = rows * dim * 4 if kept.ids is None else len(ids) * (dim * 2 + 8)
        lines.append(
            f"| {len(ids):,} | {label}{scripts} | {100 * len(ids) / rows:.1f}% | {mb(cache_bytes)} MB | "
            f"{mb(len(ids) * dim)} MB | {100 * unseen_share(flags):.2f}% | {100 * unseen_span_share(flags, gold):.2f}% |"
        )
        print(lines[-1], f"[{time.time() - t:.1f} s]", flush=True)
    lines.append(f"<!-- vocabulary_coverage:{args.name}:end -->")
    text = "\n".join(lines)
    print(text)
    if args.write:
        from doc_section import write_section

        write_section(
            args.write,
            lines[0],
            lines[-1],
            "## Vocabulary trimming that never costs accuracy (issue 53), 2026-11-27",
            text,
        )


if __name__ == "__main__":
    main()
