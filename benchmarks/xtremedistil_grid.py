"""XtremeDistil's compression table (paper 001, Table 16 / Fig. 1): for a grid of student sizes
(E = embedding dimension, H = LSTM units per direction), parameters, compression against the
teacher, ms/sentence at batch 32 and batch 1 on this machine, the speedups, and test F1.

    .venv/bin/python benchmarks/xtremedistil_grid.py --cache .data/conll/cache \
        --teacher .data/teachers/minilm-crf-conll --test $D/test.txt --grid 50x100,100x200,300x600 \
        --schedule d1 --epochs-per-step 3 --out .data/xd-grid

Each grid point is trained from the cache with ``distill-train xtremedistil`` (skipped when OUT/eE-hH
already holds a finished student), then every model is scored and timed in this one process, one
after the other (``distill-eval``'s measurement: median over batches of test sentences, after a
warm-up). ``--latency-only`` saves untrained students instead (parameters and latency do not
depend on the weights; F1 is then not reported). ``--student DIR`` adds trained students of any
size. Prints Markdown rows for docs/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.deploy.evaluate import evaluate_taggers  # noqa: E402
from seqdistill.students.base import save_student  # noqa: E402
from seqdistill.students.recipes import train  # noqa: E402
from seqdistill.students.recipes.xtremedistil import XtremeDistilConfig  # noqa: E402


def untrained(cache: str, d: Path, e: int, h: int) -> None:
    """A randomly initialised XtremeDistil student of size (E, H) over the cache's teacher vocabulary."""
    from seqdistill.cache_schema import CacheReader
    from seqdistill.students.common import new_tagger

    reader = CacheReader(cache)
    teacher = next(n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher")
    model, tok = new_tagger(
        reader, teacher, XtremeDistilConfig(embedding_dim=e, hidden_size=h), "cpu", projection_dim="teacher"
    )
    save_student(model, tok, d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--teacher", required=True, help="the teacher directory, to time and score beside the students")
    ap.add_argument("--test", required=True, help="labelled test corpus (CoNLL)")
    ap.add_argument("--grid", default="50x100,100x200,300x600", help="ExH points, comma-separated")
    ap.add_argument("--schedule", default="d1")
    ap.add_argument("--teacher-layer", type=int, default=None)
    ap.add_argument("--epochs-per-step", type=int, default=3)
    ap.add_argument("--patience", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--latency-only", action="store_true", help="untrained students: parameters and latency only")
    ap.add_argument("--student", action="append", default=[], help="a trained XtremeDistil student (repeatable)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    points = [tuple(int(v) for v in p.split("x")) for p in args.grid.split(",")]
    dirs = []
    for e, h in points:
        d = Path(args.out) / f"e{e}-h{h}"
        if args.latency_only:
            untrained(args.cache, d, e, h)
        elif not (d / "training.json").exists():
            print(f"training E={e} H={h} ({args.schedule})", flush=True)
            train(
                args.cache,
                d,
                XtremeDistilConfig(
                    schedule=args.schedule,
                    embedding_dim=e,
                    hidden_size=h,
                    teacher_layer=args.teacher_layer,
                    epochs_per_step=args.epochs_per_step,
                    patience=args.patience,
                    device="cpu",
                ),
                log=lambda *a: None,
            )
        dirs.append(str(d))
    for d in args.student:
        cfg = json.loads((Path(d) / "config.json").read_text())
        points.append((cfg["embedding_dim"], cfg["hidden_size"]))
        dirs.append(d)
    rows = evaluate_taggers([args.teacher, *dirs], args.test, threads=args.threads)
    teacher = rows[0]
    print(
        f"\nthreads: {torch.get_num_threads()}; schedule {args.schedule}, at most {args.epochs_per_step} epochs per step\n"
    )
    print(
        "| E | H | params | compression | ms/sent b32 | speedup b32 | ms/sent b1 | speedup b1 | test F1 | % of teacher | model |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| teacher | | {teacher['params']:,} | 1x | {teacher['ms_per_sentence_batch32']:.2f} | 1x | "
        f"{teacher['ms_per_sentence_batch1']:.2f} | 1x | {100 * teacher['f1']:.2f} | 100% | {args.teacher} |"
    )
    for (e, h), d, r in zip(points, dirs, rows[1:]):
        f1 = "—" if args.latency_only and d not in args.student else f"{100 * r['f1']:.2f}"
        share = "—" if f1 == "—" else f"{100 * r['f1'] / teacher['f1']:.1f}%"
        print(
            f"| {e} | {h} | {r['params']:,} | {teacher['params'] / r['params']:.1f}x | "
            f"{r['ms_per_sentence_batch32']:.3f} | {teacher['ms_per_sentence_batch32'] / r['ms_per_sentence_batch32']:.1f}x | "
            f"{r['ms_per_sentence_batch1']:.2f} | {teacher['ms_per_sentence_batch1'] / r['ms_per_sentence_batch1']:.1f}x | "
            f"{f1} | {share} | {d} |"
        )


if __name__ == "__main__":
    main()
