"""Stage two's data path: loader against student, cache against memory, memory against cache size.

    .venv/bin/python benchmarks/stream_throughput.py --cache .data/demo/cache [--scale 10]

Needs a cache with a CRF teacher layer (`make demo` leaves one in .data/demo/cache). Three
figures, each measured side by side in this process (peak memory in child processes):

1. loader throughput: batches/s of `CacheStream` + MGKD collate alone, against batches/s the
   BiLSTM-CRF student consumes (forward + backward + step on the same batches, in memory);
2. one epoch streamed from the cache against the same epoch from batches held in memory;
3. peak RSS of streaming one epoch of the cache, and of a copy made `--scale` times larger
   (the same rows repeated under new example ids, written with `CacheWriter`).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.cache_schema import CacheReader, CacheWriter, TeacherInfo  # noqa: E402
from seqdistill.students.recipes.mgkd import MGKDConfig as TrainConfig  # noqa: E402


def make_stream(cache: str, cfg: TrainConfig):
    """The stream and a fresh student exactly as the mgkd recipe builds them."""
    from seqdistill.students.archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
    from seqdistill.students.base import init_embeddings
    from seqdistill.students.common import default_splits, teacher_exports
    from seqdistill.students.data import CacheStream, StreamConfig, parse_selection
    from seqdistill.students.recipes.mgkd import Collate

    reader = CacheReader(cache)
    teacher = next(n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher")
    exports = teacher_exports(reader, teacher)
    tok, weight = exports.tokenizer, exports.student_weight()
    train, _ = default_splits(reader, cfg)
    fields = {"examples": ["words", "tags"], teacher: ["kbest_paths", "kbest_log_probs"]}
    stream = CacheStream(
        reader,
        fields,
        parse_selection(train, reader),
        Collate(tok, reader.manifest.label_schema, teacher, cfg, "crf"),
        StreamConfig(cfg.batch_size, cfg.buffer_size, cfg.seed),
    )
    schema = reader.manifest.label_schema.to_json()
    model = BiLSTMCRF(BiLSTMCRFConfig(schema, weight.shape[0], weight.shape[1], teacher_vocab_size=exports.rows))
    init_embeddings(model, exports)
    return stream, model


def train_steps(model, batches, cfg) -> float:
    from seqdistill.students.recipes.mgkd import loss_parts

    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=1e-3)
    model.train()
    t0 = time.perf_counter()
    for batch in batches:
        parts = loss_parts(model, batch, cfg, torch.device("cpu"))
        loss = sum(parts.values())
        optim.zero_grad()
        loss.backward()
        optim.step()
    return time.perf_counter() - t0


def peak_rss_of_epoch(cache: str) -> float:
    """MiB of peak RSS of a child process that streams one epoch of ``cache``."""
    code = (
        f"import sys, resource; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r});"
        "from stream_throughput import make_stream; from seqdistill.students.recipes.mgkd import MGKDConfig as TrainConfig;"
        f"s, _ = make_stream({cache!r}, TrainConfig(k=5)); n = sum(1 for _ in s);"
        "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1])


def scaled_copy(cache: str, out: str, scale: int) -> None:
    """The cache's rows repeated ``scale`` times under new example ids (teacher fields included)."""
    reader = CacheReader(cache)
    m = reader.manifest
    teacher = next(n for n, layer in m.layers.items() if layer.kind == "teacher")
    layer = m.layers[teacher]
    fields = {"examples": m.examples.field_names(), teacher: layer.field_names()}
    corpora = []
    for c in m.corpora:
        c2 = type(c)(**{**c.to_json(), "examples": c.examples * scale, "words": c.words * scale})
        corpora.append(c2)
    w = CacheWriter(out)
    n = m.num_shards * scale
    ex = w.examples_layer(m.label_schema, corpora, n)
    tl = w.teacher_layer(TeacherInfo.from_json(m.teachers[teacher].to_json()), layer.fields)
    tl.write_exports(lambda d: shutil.copytree(reader.export_dir(teacher), d, dirs_exist_ok=True))
    for copy in range(scale):
        for i in range(m.num_shards):
            data = reader.read_shard(i, fields)
            index = copy * m.num_shards + i
            ids = [f"{e}#{copy}" for e in data.example_ids]
            cols = {"example_id": ids, **{f: data.get("examples", f).to_pylist() for f in fields["examples"]}}
            ex.write_shard(index, cols)
            tcols = {"example_id": ids}
            for f in layer.fields:
                col = data.get(teacher, f.name)
                tcols[f.name] = [col[j] for j in range(len(col))] if f.storage == "zarr" else col.to_pylist()
            tl.write_shard(index, tcols)
    w.commit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(ROOT / ".data" / "demo" / "cache"))
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader workers for the streamed epoch")
    ap.add_argument("--skip-rss", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = TrainConfig(k=5)
    stream, model = make_stream(args.cache, cfg)

    from seqdistill.students.data import Prefetch

    load_t, mem_t, cache_t, pre_t = [], [], [], []
    batches = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        batches = list(stream)
        load_t.append(time.perf_counter() - t0)
        mem_t.append(train_steps(model, batches, cfg))
        t0 = time.perf_counter()
        train_steps(model, DataLoader(stream, batch_size=None, num_workers=args.num_workers), cfg)
        cache_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        train_steps(model, Prefetch(DataLoader(stream, batch_size=None), 2), cfg)
        pre_t.append(time.perf_counter() - t0)
    n = len(batches)
    lo, me, ca, pr = (statistics.median(x) for x in (load_t, mem_t, cache_t, pre_t))
    words = sum(int(b.words.mask.sum()) for b in batches)
    print(
        f"cache: {args.cache}; {n} batches of {cfg.batch_size} sentences, {words:,} words per epoch; "
        f"BiLSTM-CRF student (TE, hidden 300), losses hard+seq-ce+fuzzy, K=5; CPU, "
        f"{torch.get_num_threads()} threads; median of {args.repeats}\n"
    )
    print("| what | seconds/epoch | batches/s |")
    print("|---|---:|---:|")
    print(f"| loader alone (read shards, collate) | {lo:.2f} | {n / lo:,.1f} |")
    print(f"| student on in-memory batches (fwd+bwd+step) | {me:.2f} | {n / me:,.1f} |")
    print(f"| student streaming from the cache ({args.num_workers} loader workers) | {ca:.2f} | {n / ca:,.1f} |")
    print(f"| the same with a prefetch thread (2 batches ahead) | {pr:.2f} | {n / pr:,.1f} |")
    print(
        f"\nloader / student consumption: {me / lo:.1f}x faster; epoch from cache / in memory: {ca / me:.2f}x; "
        f"with the prefetch thread: {pr / me:.2f}x\n"
    )

    if args.skip_rss:
        return
    with tempfile.TemporaryDirectory() as tmp:
        big = str(Path(tmp) / "big")
        scaled_copy(args.cache, big, args.scale)
        (n1, rss1), (n2, rss2) = peak_rss_of_epoch(args.cache), peak_rss_of_epoch(big)
        size = lambda c: sum(s.bytes for layer in CacheReader(c).manifest.layers.values() for s in layer.shards)  # noqa: E731
        print("| cache | batches | bytes on disk | peak RSS (MiB) |")
        print("|---|---:|---:|---:|")
        print(f"| as built | {n1} | {size(args.cache):,} | {rss1:.0f} |")
        print(f"| {args.scale}x larger | {n2} | {size(big):,} | {rss2:.0f} |")
        print(f"\npeak RSS {args.scale}x cache / 1x cache: {rss2 / rss1:.3f}")


if __name__ == "__main__":
    main()
