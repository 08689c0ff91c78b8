"""A hashed word table's graph, fed three ways, side by side (issue 83): each word's rows padded to
``[B, L, K]`` and averaged by a mask (exports before commit c26d2f2), the same rows summed and divided
by their count (c26d2f2), and each distinct word of the batch once, ``[U + 1, K]``, then each word's
row of them (format 5, ``tokenization.WordHashing.distinct_rows``).

    .venv/bin/python benchmarks/hashed_feeds.py --test $D/test.txt --default .data/headlines/default-s13-int8 \
        --hashed .data/headlines/tt-hash-s13-int8 \
        --format4 "masked mean=.data/headlines/tt-hash-s13-int8-fda5394" \
        --format4 "sum / count=.data/headlines/tt-hash-s13-int8-c26d2f2" --write docs/BENCHMARKS.md

The format-4 graphs are the same student exported by those commits; ONNX Runtime reads them directly
(a format-5 runtime refuses them) with the runtime's own session options, fed ``WordHashing.batch_rows``.
Only the graph is timed (``session.run``, one thread), over the first ``--sentences`` of the file in
file order, each batch padded to its longest sentence (``Tagger`` sorts a batch by length before
the graph sees it, so its padding is less than here); the graphs take turns
within each of ``--rounds`` rounds, and each row is the median round, with its ratio to ``--default``
(a student without a word table, the reference every row is set against in this one run).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doc_section import write_section  # noqa: E402

BEGIN, END = "<!-- hashed_feeds:begin -->", "<!-- hashed_feeds:end -->"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", required=True, help="a CoNLL file whose sentences are fed")
    ap.add_argument("--default", required=True, help="an export without a word table: the reference")
    ap.add_argument("--hashed", required=True, help="the hashed student's format-5 export")
    ap.add_argument("--format4", action="append", default=[], help="NAME=DIR, the same student's format-4 export")
    ap.add_argument("--sentences", type=int, default=640)
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--write", default=None, help="replace this benchmark's section of this file")
    args = ap.parse_args()

    import onnxruntime as ort

    from seqdistill.corpora import read_corpus
    from seqdistill.deploy.card import machine
    from seqdistill.inference.onnx_runtime import OnnxModel, bag_inputs, session_options

    sents = [s.words for s in read_corpus(args.test, "conll", "test").sentences[: args.sentences]]
    default, hashed = OnnxModel(Path(args.default), threads=1), OnnxModel(Path(args.hashed), threads=1)
    old = {}
    for spec in args.format4:
        name, _, d = spec.partition("=")
        old[name] = ort.InferenceSession(
            str(Path(d) / "model.onnx"), session_options(1), providers=["CPUExecutionProvider"]
        )
    lines = ["| batch | graph | ms a sentence | against the default |", "|---:|---|---:|---:|"]
    for bs in (int(b) for b in args.batch.split(",")):
        batches = [sents[i : i + bs] for i in range(0, len(sents), bs)]

        def padded(b):
            feed = bag_inputs(hashed.tokenizer, b, chars=bool(hashed.meta.get("chars")))
            feed["word_ids"] = hashed.word_rows.batch_rows(b)
            return feed

        runs = {"default, no word table": (default.session, [runtime_feed(default, b) for b in batches])}
        runs.update({f"hashed, [B, L, K], {name}": (s, [padded(b) for b in batches]) for name, s in old.items()})
        runs["hashed, each distinct word once, [U + 1, K]"] = (
            hashed.session,
            [runtime_feed(hashed, b) for b in batches],
        )
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, (session, feeds) in runs.items():
                t0 = time.perf_counter()
                for f in feeds:
                    session.run(None, f)
                times[name].append(1000 * (time.perf_counter() - t0) / len(sents))
        base = statistics.median(times["default, no word table"])
        for name, ts in times.items():
            lines.append(f"| {bs} | {name} | {statistics.median(ts):.3f} | {statistics.median(ts) / base:.2f}x |")
            print(lines[-1], flush=True)
    m = machine(1)
    text = (
        f"{BEGIN}\n`.venv/bin/python {shlex.join(['benchmarks/hashed_feeds.py', *sys.argv[1:]])}`, "
        f"{time.strftime('%Y-%m-%d')}, {m['cpu']} ({m['cores']} cores), one thread, the first {len(sents)} "
        f"sentences of {args.test}, median of {args.rounds} rounds.\n\n" + "\n".join(lines) + f"\n{END}"
    )
    print("\n" + text)
    if args.write:
        write_section(args.write, BEGIN, END, "## Where an export's time goes (ONNX Runtime's profile)", text)


def runtime_feed(model, batch):
    """The inputs the runtime itself builds for ``model`` (``onnx_runtime.graph_feed``)."""
    from seqdistill.inference.onnx_runtime import graph_feed

    return graph_feed(model.inputs, model.meta, model.tokenizer, batch, None, model.word_rows)[0]


if __name__ == "__main__":
    main()
