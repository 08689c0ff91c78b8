"""The batching of ``distill-serve`` (``serve.py``): concurrent requests' sentences tagged together
in shared model calls, one call at a time.

Decisions, named here:

* **Dynamic micro-batching with one batching worker and an adaptive wait** (the queue-and-worker
  scheme of Triton's dynamic batcher and TorchServe's batch aggregation): each request puts its
  sentences on a queue and awaits a future; one asyncio task takes queued requests, whole, up to
  ``--max-batch`` sentences, runs one ``Tagger`` call over all of them in a worker thread (the event
  loop keeps accepting and parsing requests meanwhile), and resolves each request's future with its
  slice. Requests that arrive while the model is busy queue up and form the next batch, so under
  load batches fill without any waiting. When the model is idle, the worker waits for company, but
  only as much as the previous batch had (as many requests), and never longer than
  ``--max-wait-ms`` after the oldest request arrived: a lone client's requests never wait (a fixed
  wait cost each of them the whole deadline), and N steady clients form batches of N as soon as the N
  requests are in, instead of idling until the deadline because N is under ``--max-batch``
  (docs/BENCHMARKS.md measures both). After a burst, the first lone request waits the deadline
  once, and the expected company drops to what came. ``--max-wait-ms 0``: never wait, take what
  is queued. A request is not split while it fits one call; one larger than ``--max-batch``
  sentences or ``--max-call-chars`` characters goes in pieces that fit, one piece a call, its
  rest behind the requests queued after it (round robin), so that no request holds the model for
  more than one call at a time however large it is (issue 34: a 1 MB request of long texts held
  it for 14 s). One model
  call runs at a time: torch's thread count is process-wide and ONNX Runtime's session has its own
  threads, so concurrency inside the model comes from ``--threads``, not from parallel calls.
* **A batch is one Tagger call, in forward passes of ``--model-batch`` sentences (8)**: the Tagger
  sorts the batch's sentences by length and runs them 8 at a time. Requests come in any order of
  length, and one forward pass over 32 of them pads every sentence to the longest, which cost the
  int8 student and the teacher more per sentence than passes of 8 on CoNLL-2003 test sentences
  (docs/BENCHMARKS.md, "distill-serve"); passes of similar length cut at a padding bound did no
  better than 8.
* **A failing model call is retried one request at a time**: when a batch of several requests
  fails, each request is run again alone, so that an input that breaks the model fails only its
  own request (500, JSON, naming the exception) and the others are answered. The server keeps
  serving; the traceback goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..inference import TaggedSentence, Tagger

log = logging.getLogger("seqdistill.serve")


class ModelError(Exception):
    """The model call failed for this request."""


class Overloaded(Exception):
    """The queue holds ``--max-queue`` sentences already: the request is shed (503, Retry-After)."""


# -- micro-batching ----------------------------------------------------------------------------------
@dataclass
class _Job:
    items: list  # texts (str) or word lists (list[str])
    future: asyncio.Future
    enqueued: float  # loop time
    taken: int = 0  # items already given to model calls (a large request goes in pieces)
    results: list = field(default_factory=list)

    def __post_init__(self):
        self.costs = [len(x) if isinstance(x, str) else sum(map(len, x)) + len(x) for x in self.items]

    @property
    def left(self) -> int:
        return len(self.items) - self.taken


@dataclass
class Stats:
    requests: int = 0  # answered with tags
    sentences: int = 0
    model_calls: int = 0
    failed_calls: int = 0
    largest_batch: int = 0  # sentences in one model call
    shed: int = 0  # requests answered 503 because the queue was full
    dropped: int = 0  # requests whose client went away or whose deadline passed before an answer
    started: float = field(default_factory=time.time)


class MicroBatcher:
    """Dynamic micro-batching (module docstring): ``await batcher.submit(items)`` returns the
    items' tagged sentences as JSON dicts, tagged in one model call with whatever other requests'
    items were queued with them."""

    def __init__(
        self,
        tagger: Tagger,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        model_batch: int = 8,
        max_queue: int | None = None,
        max_call_chars: int = 20_000,
    ):
        if max_batch < 1 or model_batch < 1:
            raise ValueError(f"max_batch and model_batch must be at least 1, not {max_batch}, {model_batch}")
        if max_queue is not None and max_queue < 1:
            raise ValueError(f"max_queue must be at least 1, not {max_queue}")
        self.max_queue = max_queue  # sentences waiting, past which a request is shed
        self.max_call_chars = max_call_chars  # characters of one model call (a request larger goes in pieces)
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be at least 0, not {max_wait_ms}")
        self.tagger = tagger
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000
        self.model_batch = model_batch
        self.stats = Stats()
        self._pending: deque[_Job] = deque()
        self._queued = 0  # sentences in _pending
        self._company = 1  # requests in the last batch: as many as the worker waits for
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def queued(self) -> int:
        return self._queued

    def start(self) -> None:
        """Start the worker on the running event loop."""
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="seqdistill-model")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="seqdistill-batcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for job in self._pending:
            if not job.future.done():
                job.future.set_exception(ModelError("the server is shutting down"))
        self._pending.clear()
        self._queued = 0
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def full(self, coming: int = 1) -> bool:
        """Whether ``coming`` more sentences would pass ``max_queue`` (never into an empty queue)."""
        return self.max_queue is not None and self._queued > 0 and self._queued + coming > self.max_queue

    def shed(self) -> Overloaded:
        """Count a shed request; the :class:`Overloaded` that says why."""
        self.stats.shed += 1
        return Overloaded(f"{self._queued:,} sentences are queued; the limit is {self.max_queue:,} (--max-queue)")

    def shed_if_full(self, coming: int = 1) -> None:
        """Raise :class:`Overloaded` (and count it) when ``coming`` more sentences would pass
        ``max_queue``; a request is always admitted into an empty queue."""
        if self.full(coming):
            raise self.shed()

    async def submit(self, items: list) -> list[dict]:
        if self._task is None or self._task.done():
            raise ModelError("the batching worker is not running")
        self.shed_if_full(len(items))
        loop = asyncio.get_running_loop()
        job = _Job(items, loop.create_future(), loop.time())
        self._pending.append(job)
        self._queued += len(items)
        self._arrived.set()
        return await job.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            # wait for as many requests as the last batch had, until the batch is full or the
            # oldest request has waited max_wait (the adaptive wait of the module docstring)
            while self._queued < self.max_batch and len(self._pending) < self._company:
                left = self._pending[0].enqueued + self.max_wait - loop.time()
                if left <= 0:
                    break
                self._arrived.clear()
                try:
                    async with asyncio.timeout(left):
                        await self._arrived.wait()
                except TimeoutError:
                    break
            parts = self._take()
            if parts:
                self._company = len(parts)
                try:
                    await self._execute(parts, loop)
                except asyncio.CancelledError:
                    for job, _, _ in parts:
                        if not job.future.done():
                            job.future.set_exception(ModelError("the server is shutting down"))
                    raise

    def _take(self) -> list[tuple[_Job, int, int]]:
        """The next model call: whole requests, in order, while they fit in ``max_batch`` sentences
        and ``max_call_chars`` characters; a request larger than one call alone gives a piece that
        fits (at least one sentence), and its rest goes behind the requests queued after it (round
        robin), so that no request holds the model for more than one call at a time."""
        parts, n, chars = [], 0, 0
        while self._pending:
            job = self._pending[0]
            if job.future.done():  # the client went away, or its deadline passed
                self._pending.popleft()
                self._queued -= job.left
                continue
            size, cost = job.left, sum(job.costs[job.taken :])
            if parts and (n + size > self.max_batch or chars + cost > self.max_call_chars):
                break
            self._pending.popleft()
            start, end = job.taken, len(job.items)
            if not parts and (size > self.max_batch or cost > self.max_call_chars):
                end, cost = start + 1, job.costs[start]
                while (
                    end < len(job.items)
                    and end - start < self.max_batch
                    and cost + job.costs[end] <= self.max_call_chars
                ):
                    cost += job.costs[end]
                    end += 1
            job.taken = end
            self._queued -= end - start
            parts.append((job, start, end))
            n, chars = n + end - start, chars + cost
            if end < len(job.items):
                self._pending.append(job)
                break
        return parts

    def _call(self, items: list) -> list[dict]:
        """In the model thread: one Tagger call, and the results as JSON dicts."""
        return [sentence_json(s) for s in self.tagger(items, batch_size=self.model_batch, scores=True)]

    async def _execute(self, parts: list[tuple[_Job, int, int]], loop) -> None:
        items = [x for job, start, end in parts for x in job.items[start:end]]
        self.stats.model_calls += 1
        self.stats.largest_batch = max(self.stats.largest_batch, len(items))
        try:
            out = await loop.run_in_executor(self._executor, self._call, items)
        except Exception as e:
            self.stats.failed_calls += 1
            if len(parts) > 1:  # decision: retry each request alone, so that a bad input fails only its own
                log.warning(
                    "a batch of %d requests failed (%s: %s); retrying each alone", len(parts), type(e).__name__, e
                )
                for part in parts:
                    await self._execute([part], loop)
                return
            log.error("model call failed", exc_info=e)
            job = parts[0][0]
            if not job.future.done():  # its other pieces are then dropped from the queue
                job.future.set_exception(ModelError(f"{type(e).__name__}: {str(e)[:300]}"))
            return
        pos = 0
        for job, start, end in parts:
            job.results.extend(out[pos : pos + end - start])
            pos += end - start
            if len(job.results) == len(job.items) and not job.future.done():
                job.future.set_result(job.results)
                self.stats.requests += 1
                self.stats.sentences += len(job.results)


def sentence_json(s: TaggedSentence) -> dict:
    """``TaggedSentence.to_json()``, built directly: ``dataclasses.asdict`` is about 50 times slower,
    a noticeable share of a small student's whole call at batch 1."""
    return {
        "text": s.text,
        "words": s.words,
        "offsets": [[a, b] for a, b in s.offsets],
        "tags": s.tags,
        "spans": [
            {
                "type": e.type,
                "start": e.start,
                "end": e.end,
                "char_start": e.char_start,
                "char_end": e.char_end,
                "text": e.text,
                "score": e.score,
            }
            for e in s.spans
        ],
    }
