"""The teacher phase of a build as a pipeline, so that the device never waits on the host:

    corpus reader ──► tokenization workers ──► device loop (this thread) ──► shard writers
    the corpora read  words to segments and    forward, k-best, marginals;   wait for the copies,
    again, a shard    gold targets, in pinned  outputs copied back into      project, turn outputs
    at a time         memory, batches ahead    pinned memory, side stream    into columns, publish

* **Read as it goes.** One thread reads the corpora again and cuts them into the plan's shards
  and batches (``build._shards``, which also writes each examples shard before its batches go
  on), ``ahead`` batches ahead: the build holds the shards in flight, not the corpora.

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
Failures: a worker's exception stops the build, re-raised with a note naming the stage and shard
(a writer's as soon as it is there, whichever shard); queued work is cancelled and writers stop
before their next step, so a shard being published finishes and any other leaves nothing (its
staging directory is removed), and the same command resumes. Ctrl-C does the same.
Known host synchronisation left on a GPU: transformers' own attention-mask code for padded
batches (BERT under SDPA checks whether the mask is all ones); ``build_throughput.py
--sync-debug`` reports every one.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from ..teachers import map_outputs, to_host


@dataclass(frozen=True)
class PipelineSizes:
    """How many threads and how much work in flight (``pipeline_sizes`` gives the defaults)."""

    workers: int  # tokenization threads
    ahead: int  # prepared batches waiting for the device
    writers: int  # shard writer threads
    queued: int  # finished shards waiting for a writer

    def describe(self) -> str:
        return (
            f"pipeline: {self.workers} tokenization worker(s), {self.ahead} batches ahead, "
            f"{self.writers} shard writer(s), {self.queued} shard(s) queued"
        )


def pipeline_sizes(workers: int = 0, writers: int = 0, queued: int = 2, cpus: int | None = None) -> PipelineSizes:
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

    read: float = 0.0  # corpus reader: the corpora read again, the examples' shards written
    prepare: float = 0.0  # tokenization workers: words to segments and gold targets
    wait_prepare: float = 0.0  # device loop waiting for the reader or a prepared batch (the device idle)
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
    ``stream`` into pinned buffers behind one event; :meth:`wait` waits for it (outputs a teacher
    left on the host, as SenTScore's, are taken as they are). ``land(host)`` runs on the host
    outputs as soon as they are there: at once on a CPU, after the event on a GPU."""

    def __init__(self, out, stream: torch.cuda.Stream | None, land: Callable[[dict], None] | None = None):
        self.event, self.land = None, land
        if stream is None:
            self.host = to_host(out)
            if land is not None:
                land(self.host)
                self.land = None
            return
        stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):

            def copy(v: Tensor):
                if not v.is_cuda:  # already on the host
                    return v.float() if v.is_floating_point() else v
                v.record_stream(stream)  # the allocator must not reuse it before the copy ran
                src = v.float() if v.is_floating_point() else v
                buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
                buf.copy_(src, non_blocking=True)
                return buf

            self.host = map_outputs(out, copy)
            self.event = torch.cuda.Event(blocking=True)  # a waiting writer sleeps instead of spinning
            self.event.record(stream)

    def wait(self) -> dict:
        if self.event is not None:
            self.event.synchronize()
            self.host, self.event = map_outputs(self.host, lambda t: t.numpy()), None
        if self.land is not None:
            self.land(self.host)
            self.land = None
        return self.host


@dataclass
class Stages:
    """What each stage does with a batch or a shard (the build's, ``build._run_teacher``).
    ``prepare(rows, batch)``: the host side of a batch (in a tokenization worker);
    ``forward(prepared)``: the device side, returning a ``TeacherOutput``; ``land(host)``: what is
    done to a batch's host outputs as soon as they are there (the PCA projection, so that a shard
    waiting for a writer holds projected states); ``columns(rows, [(batch, host outputs)])``: a
    shard's columns, and ``publish(index, columns)`` writes them (both in a shard writer)."""

    prepare: Callable
    forward: Callable
    columns: Callable
    publish: Callable
    land: Callable[[dict], None] | None = None


def run_pipeline(
    jobs: Iterable[tuple[int, list[dict], list[int]]], stages: Stages, sizes: PipelineSizes, device, bar: tqdm
) -> StageTimes:
    """Run ``jobs`` — ``(shard index, the shard's example rows, batch)`` in the plan's order, each
    shard's batches together — through the three stages, on ``device``; returns the time each
    stage took. ``jobs`` is read as the pipeline goes (the build reads its corpora as it goes), so
    only the shards in flight are held."""
    return _Pipeline(jobs, stages, sizes, device).run(bar)


class _Pipeline:
    """One run of the teacher phase: the device loop in :meth:`run`, the workers' tasks in
    :meth:`_prepare` and :meth:`_write`, and the two queues between them (``ahead``: prepared
    batches, in order; ``writes``: shards being written or waiting for a writer)."""

    def __init__(self, jobs, stages: Stages, sizes: PipelineSizes, device):
        self.stages, self.sizes = stages, sizes
        self.times, self._lock = StageTimes(), threading.Lock()
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.ahead: deque[tuple[int, list[dict], list[int], Future]] = deque()
        self.writes: deque[tuple[int, Future]] = deque()
        self.jobs = jobs
        self.upcoming: queue.Queue = queue.Queue(max(1, sizes.ahead))  # filled by the corpus reader
        self.stop = threading.Event()  # set on a failure or Ctrl-C: writers give up between steps

    def run(self, bar: tqdm) -> StageTimes:
        sizes, t0 = self.sizes, time.perf_counter()
        # on a GPU every thread works on the build's device (under torchrun, not on GPU 0)
        init = {"initializer": torch.cuda.set_device, "initargs": (self.device,)} if self.stream else {}
        self.tokenizers = ThreadPoolExecutor(sizes.workers, thread_name_prefix="seqdistill-tokenize", **init)
        self.writers = ThreadPoolExecutor(sizes.writers, thread_name_prefix="seqdistill-write", **init)
        reader = threading.Thread(target=self._read, name="seqdistill-read", daemon=True)
        reader.start()
        try:
            parts: list[tuple[list[int], HostCopy]] = []
            while self._fill():
                index, rows, batch, fut = self.ahead.popleft()
                t = time.perf_counter()
                prepared = _result(fut, f"tokenization worker, shard {index}")
                t = self._spent("wait_prepare", t)
                parts.append((batch, HostCopy(self.stages.forward(prepared), self.stream, self.stages.land)))
                self._spent("device", t)
                bar.update(sum(rows[i]["n_words"] for i in batch))
                self._fill()
                if not self.ahead or self.ahead[0][0] != index:  # the shard's last batch
                    self._check_writes(sizes.writers + sizes.queued - 1)
                    self.writes.append((index, self.writers.submit(self._write, index, rows, parts)))
                    parts = []
                else:
                    self._check_writes(sizes.writers + sizes.queued)
                self.times.wall = time.perf_counter() - t0
                bar.set_postfix(device_idle=f"{100 * self.times.device_idle():.0f}%", refresh=False)
            self._check_writes(0)
        except BaseException:
            self.stop.set()
            raise
        finally:
            # queued work is dropped; a writer stops before its next step (a shard being published
            # finishes, any other leaves nothing), so the same command resumes
            self.tokenizers.shutdown(wait=False, cancel_futures=True)
            self.writers.shutdown(wait=False, cancel_futures=True)
            self.stop.set()  # the reader stops before its next job (it is done on success)
            self.tokenizers.shutdown(wait=True)
            self.writers.shutdown(wait=True)
            reader.join()
        self.times.wall = time.perf_counter() - t0
        return self.times

    def _spent(self, stage: str, since: float) -> float:
        """Add the time since ``since`` to ``stage`` (from any thread); returns now."""
        now = time.perf_counter()
        with self._lock:
            setattr(self.times, stage, getattr(self.times, stage) + now - since)
        return now

    def _fill(self) -> bool:
        """Keep ``sizes.ahead`` batches (at least one) submitted to the tokenization workers;
        False when no batch is left."""
        while len(self.ahead) < max(1, self.sizes.ahead):
            t = time.perf_counter()
            job = self.upcoming.get()
            self._spent("wait_prepare", t)
            if isinstance(job, BaseException):
                e = job
                if hasattr(e, "add_note") and not isinstance(e, KeyboardInterrupt):
                    e.add_note("(in the build's corpus reader)")
                raise e
            if job is _END:
                self.upcoming.put(_END)  # every later call sees the end too
                break
            self.ahead.append((*job, self.tokenizers.submit(self._prepare, *job)))
        return bool(self.ahead)

    def _read(self) -> None:
        """The corpus reader's thread: the jobs, read ahead (the build reads its corpora and writes
        the examples' shards as it goes), then ``_END``, or the exception that stopped it."""
        try:
            jobs = iter(self.jobs)
            while not self.stop.is_set():
                t = time.perf_counter()
                job = next(jobs, _END)
                self._spent("read", t)
                self._offer(job)
                if job is _END:
                    return
        except BaseException as e:
            self._offer(e)

    def _offer(self, item) -> None:
        """Put ``item`` for the device loop, unless the pipeline stops first."""
        while not self.stop.is_set():
            try:
                self.upcoming.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _prepare(self, index: int, rows: list[dict], batch: list[int]):
        t = time.perf_counter()
        result = self.stages.prepare(rows, batch)
        if self.stream is not None:  # page-locked, so that the copies to the device do not block
            result = _pinned(result)
        self._spent("prepare", t)
        return result

    def _write(self, index: int, rows, parts: list[tuple[list[int], HostCopy]]) -> None:
        t = time.perf_counter()
        landed = [(batch, copy.wait()) for batch, copy in parts]
        t = self._spent("wait_copies", t)
        if self.stop.is_set():
            return
        columns = self.stages.columns(rows, landed)
        t = self._spent("columns", t)
        if self.stop.is_set():
            return
        self.stages.publish(index, columns)
        self._spent("write", t)

    def _check_writes(self, block_above: int) -> None:
        """Raise a writer's error as soon as it is there (whichever shard); wait while more than
        ``block_above`` shards are out."""
        for index, fut in self.writes:
            if fut.done() and fut.exception() is not None:
                _result(fut, f"shard writer, shard {index}")
        while self.writes and (self.writes[0][1].done() or len(self.writes) > block_above):
            index, fut = self.writes.popleft()
            t = time.perf_counter()
            _result(fut, f"shard writer, shard {index}")
            self._spent("wait_writers", t)


_END = object()  # the corpus reader's last item


def _pinned(value):
    """``value`` with every tensor in page-locked memory: a tensor or anything with a
    ``pin_memory()`` (a ``SegmentBatch``), inside tuples; other values as they are."""
    if isinstance(value, tuple):
        return tuple(_pinned(v) for v in value)
    return value.pin_memory() if hasattr(value, "pin_memory") else value


def _result(fut: Future, where: str):
    """The future's result; its exception re-raised with a note naming the stage and shard."""
    try:
        return fut.result()
    except BaseException as e:
        if hasattr(e, "add_note") and not isinstance(e, KeyboardInterrupt):
            e.add_note(f"(in the build's {where})")
        raise
