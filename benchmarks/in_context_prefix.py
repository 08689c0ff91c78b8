"""In-context SenTScore (issue 55): sentences/s with the demonstrations' key/value cache shared, and
with the demonstrations encoded again in front of every prompt, side by side in one process.

    .venv/bin/python benchmarks/in_context_prefix.py --teacher DIR [--sentences 32] [--batch 8] [--repeats 3]

``--teacher``: an in-context teacher directory (``distill-cache in-context-teacher``). Sentences:
the first ``--sentences`` of the CoNLL-2003 test set (real lengths), in batches of ``--batch`` as
the build gives them (sorted by length), greedy (K = 1, the kind's default). Each round runs both
ways, in alternating order, and the medians over ``--repeats`` rounds are printed, with the
ratio. Every round also checks that both ways give the same paths, and the largest difference
between their tag scores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sentscore_throughput import conll_test  # noqa: E402

from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.pipeline.build import batches_by_length  # noqa: E402
from seqdistill.teachers import load_teacher  # noqa: E402
from seqdistill.teachers.sentscore_search import sentscore  # noqa: E402


def run(teacher, sentences, batch_words: int, share: bool):
    """Seconds for every sentence, and each sentence's (path, tag scores)."""
    out = [None] * len(sentences)
    t = time.perf_counter()
    budget = batch_words * max(len(s) for s in sentences)
    for batch in batches_by_length([len(s) for s in sentences], budget):
        res = sentscore(teacher.model, teacher.format, [sentences[i] for i in batch], k=1, share_context=share)
        for j, i in enumerate(batch):
            n = len(sentences[i])
            out[i] = (res.tags[j, 0, :n].tolist(), res.tag_scores[j, 0, :n])
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--sentences", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8, help="sentences a batch (at the longest sentence's length)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    teacher = load_teacher(args.teacher)
    teacher.model.eval()
    spans = teacher._spans  # sentences the teacher takes whole (a longer one would be cut into pieces)
    test = [s.words for s in read_corpus(conll_test(), "test", "test").sentences]
    sentences = [w for w in test if len(spans(w)) == 1][: args.sentences]
    words = sum(len(s) for s in sentences)
    print(
        f"{args.teacher}: {teacher.in_context['demonstrations'] if teacher.in_context else 0} demonstrations, "
        f"{len(teacher.format.context)} context tokens; {len(sentences)} sentences, {words} words, batches of "
        f"{args.batch}, {torch.get_num_threads()} threads"
    )
    times: dict[bool, list[float]] = {True: [], False: []}
    worst, same = 0.0, True
    with torch.inference_mode():
        run(teacher, sentences[:2], args.batch, True)  # warm-up (and the shared cache computed once)
        for r in range(args.repeats):
            results = {}
            for share in (True, False) if r % 2 == 0 else (False, True):
                seconds, results[share] = run(teacher, sentences, args.batch, share)
                times[share].append(seconds)
                print(f"  round {r + 1}: {'shared' if share else 'encoded again'}: {seconds:.1f} s", flush=True)
            for (pa, sa), (pb, sb) in zip(results[True], results[False]):
                same &= pa == pb
                finite = torch.isfinite(sb)
                worst = max(worst, float((sa[finite] - sb[finite]).abs().max()))
    shared, again = statistics.median(times[True]), statistics.median(times[False])
    print(f"shared prefix: {len(sentences) / shared:.2f} sentences/s (median {shared:.1f} s)")
    print(f"encoded again: {len(sentences) / again:.2f} sentences/s (median {again:.1f} s)")
    print(f"speed-up: {again / shared:.2f}x; identical paths: {same}; largest tag-score difference: {worst:.2e}")


if __name__ == "__main__":
    main()
