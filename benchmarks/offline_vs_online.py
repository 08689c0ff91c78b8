"""The cache's headline figure: the same student trained offline (from a cache) and online (the
teacher run at every step), total wall time for 1, 8 and 16 student runs.

    .venv/bin/python benchmarks/offline_vs_online.py --teacher .data/demo/teacher --epochs 8
    .venv/bin/python benchmarks/offline_vs_online.py --teacher .data/teachers/mpnet-crf-conll-e1 --epochs 8

Data: the first ``--train`` sentences of DATA/train.txt (gold) and ``--wiki`` sentences of
DATA/wiki.txt (unlabelled; the teacher's paths), ``--dev`` of DATA/dev.txt for early-stopping
records; `make demo` leaves these files in .data/demo. Student: the MGKD BiLSTM-CRF (teacher
embeddings, hidden 300), losses hard + Seq-CE + fuzzy with K=5, ``--epochs`` epochs exactly
(patience = epochs), seed 13, scored on the dev subset.

* offline: ``distill-cache build`` of those sentences (k=5, no marginals), timed, then one run of
  ``distill-train mgkd`` from the cache, timed;
* online: the same run of the same recipe, but each batch's k-best paths come from the teacher,
  run on that batch at that step (inference mode, the same ``Teacher.outputs`` the build calls),
  instead of from the cache: the stream reads only words and gold tags from the cache, so the
  rows, their order, the collate and the student steps are the same, and only where the teacher's
  outputs come from differs (as in online distillation tools, which keep the teacher in memory).

Decision: N runs are not all trained; the totals for N = 1, 8, 16 are ``build + N x offline run``
and ``N x online run`` from the measured single runs (a sweep's runs differ only in their
settings, so each costs what one costs). The F1 of both single runs is reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.cache_schema import EXAMPLES_LAYER, CacheReader  # noqa: E402
from seqdistill.students.recipes import recipes  # noqa: E402
from seqdistill.teachers import LayerOptions, load_teacher, teacher_kind, to_host  # noqa: E402

K = 5


class OnlineCollate:
    """The recipe's collate, with the teacher's fields computed from the batch's words at the step."""

    def __init__(self, collate, teacher, teacher_name: str, names: list[str], schema):
        self.collate, self.teacher, self.name, self.names, self.schema = collate, teacher, teacher_name, names, schema
        self.kind = teacher_kind(teacher.kind)
        self.options = LayerOptions(K, marginals="marginals" in names)
        specs = self.kind.fields(teacher.schema, 1, self.options)
        self.tabular = {f.name for f in specs if f.storage == "parquet"}  # the cache gives these as lists
        self.seconds = 0.0

    def __call__(self, rows: list[dict]):
        t0 = time.perf_counter()
        words = [r[EXAMPLES_LAYER]["words"] for r in rows]
        out = self.teacher.outputs(words, None, k=K, marginals=self.options.marginals, precision="fp32")
        host = to_host(out)
        example_rows = [
            {"example_id": r["example_id"], "n_words": len(w), "tags": r[EXAMPLES_LAYER].get("tags")}
            for r, w in zip(rows, words)
        ]
        cols = self.kind.shard_columns(example_rows, [(host, j) for j in range(len(rows))], self.options)
        for j, r in enumerate(rows):
            r[self.name] = {
                n: (cols[n][j].tolist() if n in self.tabular and hasattr(cols[n][j], "tolist") else cols[n][j])
                for n in self.names
            }
        self.seconds += time.perf_counter() - t0
        return self.collate(rows)


def train(cache: str, out: Path, epochs: int, online_teacher=None) -> tuple[float, float, float]:
    """One MGKD run; returns (wall seconds, dev F1 of the last epoch, seconds spent in the teacher)."""
    recipe = recipes()["mgkd"]
    cfg = recipe.config(losses=("hard", "seq-ce", "fuzzy"), k=K, epochs=epochs, patience=epochs, device="cpu", seed=13)
    plan_fn = recipe.plan
    spent = []
    if online_teacher is not None:

        def plan_fn(ctx, _plan=recipe.plan):
            cached = ctx.stream

            def stream(fields, names, collate, **kw):
                teacher_name = next(k for k in fields if k != EXAMPLES_LAYER)
                online = OnlineCollate(collate, online_teacher, teacher_name, fields[teacher_name], None)
                spent.append(online)
                return cached({EXAMPLES_LAYER: fields[EXAMPLES_LAYER]}, names, online, **kw)

            ctx.stream = stream
            return _plan(ctx)

    if out.exists():
        shutil.rmtree(out)
    from seqdistill.students import engine

    t0 = time.perf_counter()
    summary = engine.train("mgkd", plan_fn, CacheReader(cache), out, cfg, log=lambda *a: None)
    wall = time.perf_counter() - t0
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == epochs, (len(records), summary)
    return wall, 100 * records[-1]["dev_f1"], sum(o.seconds for o in spent)


def subset(src: Path, dst: Path, n: int, conll: bool) -> None:
    if conll:
        blocks = src.read_text().split("\n\n")
        dst.write_text("\n\n".join(b for b in blocks[:n] if b.strip()) + "\n\n")
    else:
        dst.write_text("\n".join(src.read_text().splitlines()[:n]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--data", default=str(ROOT / ".data/demo"))
    ap.add_argument("--train", type=int, default=500)
    ap.add_argument("--wiki", type=int, default=500)
    ap.add_argument("--dev", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = Path(args.data)
    with tempfile.TemporaryDirectory(prefix="offline-online-") as tmp:
        tmp = Path(tmp)
        subset(data / "train.txt", tmp / "train.txt", args.train, True)
        subset(data / "dev.txt", tmp / "dev.txt", args.dev, True)
        subset(data / "wiki.txt", tmp / "wiki.txt", args.wiki, False)
        cache = tmp / "cache"
        cmd = [str(ROOT / ".venv/bin/distill-cache"), "build", "--out", str(cache), "--teacher", args.teacher]
        cmd += ["--teacher-id", "t", "--labelled", f"c={tmp / 'train.txt'}@train", "--labelled"]
        cmd += [f"c={tmp / 'dev.txt'}@dev", "--unlabelled", f"wiki={tmp / 'wiki.txt'}", "--kbest", str(K)]
        cmd += ["--no-marginals", "--device", "cpu"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        build = time.perf_counter() - t0
        off_s, off_f1, _ = train(str(cache), tmp / "offline", args.epochs)
        teacher = load_teacher(args.teacher, device="cpu")
        on_s, on_f1, in_teacher = train(str(cache), tmp / "online", args.epochs, online_teacher=teacher)
    print(
        f"teacher {args.teacher}; {args.train} gold + {args.wiki} unlabelled sentences, dev {args.dev}; "
        f"MGKD student (TE, hidden 300, hard+seq-ce+fuzzy, K={K}), {args.epochs} epochs; CPU, "
        f"{torch.get_num_threads()} threads\n"
    )
    print(
        f"build {build:.1f} s; offline run {off_s:.1f} s (dev F1 {off_f1:.2f}); online run {on_s:.1f} s "
        f"(dev F1 {on_f1:.2f}; the teacher's calls took {in_teacher:.1f} s, in the thread that prefetches "
        "batches beside the student's steps)\n"
    )
    print("| student runs | offline: build + runs (s) | online (s) | online / offline |")
    print("|---:|---:|---:|---:|")
    for n in (1, 8, 16):
        off, on = build + n * off_s, n * on_s
        print(f"| {n} | {off:,.0f} | {on:,.0f} | {on / off:.1f}x |")


if __name__ == "__main__":
    main()
