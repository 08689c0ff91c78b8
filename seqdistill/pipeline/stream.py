"""The teacher phase of a build as a pipeline, so that the device never waits on the host:

    tokenization workers ──► device loop (this thread) ──────► shard writers
    words to segments and     forward, k-best, marginals;      wait for the copies, project,
    gold targets, in pinned   outputs copied back into         turn outputs into columns,
    memory, batches ahead     pinned memory on a side stream   compress and publish shards

* **Ahead of the device.** ``workers`` threads run ``teacher.prepare`` (the fast tokenizer, in
  Rust, releases the GIL) and the kind's gold targets for the next ``ahead`` batches, while this
  thread runs the device on the current one.
* **Back without blocking.** On a GPU the outputs of a batch are copied into page-locked buffers
  on a side stream, behind one event; this thread goes on to the next batch and the shard writer
  waits for the event. k-best, marginals and pooling run on the device (``crf.py``,
  ``tokenization.SegmentBatch.pool``) with no host synchronisation inside a batch. On the CPU the
  "copy" is the arrays themselves. (k-best and marginals stay in the device loop on a CPU too:
  moved to the writers, to fill the cores the forward leaves idle, they made the host's ceiling
  worse, 30-35k words/s against 40k, and the real build no faster, docs/BENCHMARKS.md.)
* **Written in parallel.** ``writers`` threads each take a whole shard: they turn its outputs
  into columns and write it (zstd and the sha256 run in C, outside the GIL). At most ``queued``
  shards wait for a writer; beyond that the device loop waits, which bounds memory.

Decisions. Threads rather than processes: every stage's heavy work runs in native code that
releases the GIL, and processes would have to copy batches and outputs between them. Batches
are the plan's batches in the plan's order whatever the worker counts, and each shard is written
from the same arrays as the one-thread loop's, so the shards are byte-identical at any worker
count (tests/test_build_pipeline.py; benchmarks/behaviour_fingerprint.py for the refactor).
Failures: a worker's exception stops the build, re-raised with a note naming the stage and shard;
queued work is cancelled and a shard being written finishes or leaves nothing (its staging
directory is removed), so the same command resumes.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from ..teachers import to_host


@dataclass(frozen=True)
class PipelineSizes:
    """How many threads and how much work in flight (``sizes`` gives the defaults)."""

    workers: int  # tokenization threads
    ahead: int  # prepared batches waiting for the device
    writers: int  # shard writer threads
    queued: int  # finished shards waiting for a writer

    def describe(self) -> str:
        return (
            f"pipeline: {self.workers} tokenization worker(s), {self.ahead} batches ahead, "
            f"{self.writers} shard writer(s), {self.queued} shard(s) queued"
        )


def sizes(workers: int = 0, writers: int = 0, queued: int = 2, cpus: int | None = None) -> PipelineSizes:
    """Worker counts (0: chosen from the CPUs this process may use). A quarter of the CPUs each
    for tokenization and writing, at least 1 and at most 4: 1 and 1 on a 2-core machine, whose
    cores the CPU teacher's forward needs; 4 and 4 on a 16-core GPU host, where 4 tokenizer
    threads outrun MiniLM's bf16 forward (docs/BENCHMARKS.md). Two batches ahead per worker."""
    cpus = cpus or len(os.sched_getaffinity(0))
    auto = max(1, min(4, cpus // 4))
    w = workers or auto
    return PipelineSizes(w, 2 * w + 2, writers or auto, max(0, queued))


@dataclass
class StageTimes:
    """Seconds spent by each stage of the teacher phase (summed over threads, so stages that
    overlap add up to more than the phase's wall time)."""

    prepare: float = 0.0  # tokenization workers: words to segments and gold targets
    wait_prepare: float = 0.0  # device loop waiting for a prepared batch (the device idle)
    device: float = 0.0  # device loop: forward, k-best, marginals, starting the copies
    wait_writers: float = 0.0  # device loop waiting for a free writer (the device idle)
    wait_copies: float = 0.0  # writers waiting for a batch's copies to land (GPU)
    columns: float = 0.0  # writers: outputs to columns (and PCA projection)
    write: float = 0.0  # writers: checks, Parquet and Zarr compression, checksums, publish
    wall: float = 0.0  # the phase, first batch to last shard published

    def device_idle(self) -> float:
        """Share of the phase the device loop spent waiting on the host."""
        return (self.wait_prepare + self.wait_writers) / self.wall if self.wall else 0.0

    def to_json(self) -> dict:
        out = {k: round(v, 4) for k, v in self.__dict__.items() if isinstance(v, float)}
        out["device_idle"] = round(self.device_idle(), 4)
        return out


class HostCopy:
    """A batch's outputs on their way to the host as numpy (float32 for floats), by
    ``TeacherOutput`` field, as ``teachers.to_host`` gives them. On a GPU the copies are queued on
    ``stream`` into pinned buffers behind one event; :meth:`wait` waits for it."""

    def __init__(self, out, stream: torch.cuda.Stream | None):
        self.event = None
        if stream is None:
            self.host = to_host(out)
            return
        stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):

            def copy(v: Tensor):
                v.record_stream(stream)  # the allocator must not reuse it before the copy ran
                src = v.float() if v.is_floating_point() else v
                buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
                buf.copy_(src, non_blocking=True)
                return buf

            self.host = _map_tensors(out, copy)
            self.event = torch.cuda.Event()
            self.event.record(stream)

    def wait(self) -> dict:
        if self.event is None:
            return self.host
        self.event.synchronize()
        return _map_tensors(self.host, lambda t: t.numpy(), dicts=True)


def _map_tensors(out, fn, dicts: bool = False) -> dict:
    """``fn`` over the tensors of a ``TeacherOutput`` (or of a dict of them, ``dicts``), by field;
    dicts of tensors (hidden states by layer) keep their keys. Fields that are None are left out."""
    items = out.items() if dicts else out.__dict__.items()
    host = {}
    for name, value in items:
        if isinstance(value, Tensor):
            host[name] = fn(value)
        elif isinstance(value, dict):
            host[name] = {k: fn(v) for k, v in value.items()}
    return host


def run_pipeline(
    jobs: list[tuple[int, list[int]]],
    rows_of,
    prepare,
    forward,
    columns,
    publish,
    sizes: PipelineSizes,
    device: torch.device,
    bar: tqdm,
) -> StageTimes:
    """Run ``jobs`` — ``(shard index, batch)`` pairs in the plan's order, each shard's batches
    together — through the three stages. ``rows_of(index)``: the shard's example rows;
    ``prepare(rows, batch)``: the host side of a batch (in a worker thread); ``forward(prepared)``:
    the device side, returning a ``TeacherOutput``; ``columns(rows, [(batch, host outputs)])``: the
    shard's columns, and ``publish(index, columns)`` writes them (both in a writer thread)."""
    times = StageTimes()
    lock = threading.Lock()

    def spent(stage: str, since: float) -> float:
        now = time.perf_counter()
        with lock:
            setattr(times, stage, getattr(times, stage) + now - since)
        return now

    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    t0 = time.perf_counter()
    tokenizers = ThreadPoolExecutor(sizes.workers, thread_name_prefix="seqdistill-tokenize")
    writers = ThreadPoolExecutor(sizes.writers, thread_name_prefix="seqdistill-write")
    ahead: deque[tuple[int, Future]] = deque()
    writes: deque[tuple[int, Future]] = deque()
    upcoming = iter(jobs)

    def timed_prepare(index: int, batch: list[int]):
        t = time.perf_counter()
        result = prepare(rows_of(index), batch)
        spent("prepare", t)
        return result

    def timed_write(index: int, rows, parts: list[tuple[list[int], HostCopy]]) -> None:
        t = time.perf_counter()
        landed = [(batch, copy.wait()) for batch, copy in parts]
        t = spent("wait_copies", t)
        cols = columns(rows, landed)
        t = spent("columns", t)
        publish(index, cols)
        spent("write", t)

    def fill() -> None:
        while len(ahead) < sizes.ahead:
            job = next(upcoming, None)
            if job is None:
                return
            ahead.append((job[0], tokenizers.submit(timed_prepare, *job)))

    def check_writes(block_above: int) -> None:
        while writes and (writes[0][1].done() or len(writes) > block_above):
            index, fut = writes.popleft()
            t = time.perf_counter()
            _result(fut, f"shard writer, shard {index}")
            spent("wait_writers", t)

    try:
        parts: list[tuple[list[int], HostCopy]] = []
        for n, (index, batch) in enumerate(jobs):
            fill()
            _, fut = ahead.popleft()
            t = time.perf_counter()
            prepared = _result(fut, f"tokenization worker, shard {index}")
            t = spent("wait_prepare", t)
            parts.append((batch, HostCopy(forward(prepared), stream)))
            spent("device", t)
            rows = rows_of(index)
            bar.update(sum(rows[i]["n_words"] for i in batch))
            if n + 1 == len(jobs) or jobs[n + 1][0] != index:  # the shard's last batch
                check_writes(sizes.writers + sizes.queued - 1)
                writes.append((index, writers.submit(timed_write, index, rows, parts)))
                parts = []
            else:
                check_writes(sizes.writers + sizes.queued)
            times.wall = time.perf_counter() - t0
            bar.set_postfix(device_idle=f"{100 * times.device_idle():.0f}%", refresh=False)
        check_writes(0)
    finally:
        tokenizers.shutdown(wait=True, cancel_futures=True)
        writers.shutdown(wait=True, cancel_futures=True)  # a shard being written finishes or leaves nothing
    times.wall = time.perf_counter() - t0
    return times


def _result(fut: Future, where: str):
    """The future's result; its exception re-raised with a note naming the stage and shard."""
    try:
        return fut.result()
    except BaseException as e:
        if hasattr(e, "add_note") and not isinstance(e, KeyboardInterrupt):
            e.add_note(f"(in the build's {where})")
        raise
