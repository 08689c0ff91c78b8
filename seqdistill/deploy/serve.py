"""``distill-serve``: any model directory (a torch student, a teacher, an exported ONNX directory)
behind HTTP, with dynamic micro-batching across concurrent requests. One idea in one module (over
400 lines, most of them the decisions below): the server and its batching worker.

    distill-serve --model student-onnx/ --port 8080
    curl -s localhost:8080/tag -d '{"texts": ["Peter Blackburn visits Paris."]}'

Endpoints:

* ``POST /tag`` — ``{"texts": ["...", ...]}`` (raw texts, split into words by
  the model's words rule, ``seqdistill.corpora.words``) or ``{"tokens": [["w", ...], ...]}`` (pre-split; offsets
  then point into the words joined by one space). Answers ``{"model": NAME, "sentences": [...]}``,
  one object per input in input order: ``Tagger``'s output as JSON (text, words, character offsets,
  tags, and spans with their word and character offsets, text and score). Or ``{"documents":
  ["...", ...]}``: each text is split into sentences by ``--splitter`` (``corpora.documents``, as
  ``Tagger.documents`` does), the sentences of the request go to the batcher as one request's
  sentences, and the answer is ``{"model": NAME, "documents": [{"text", "sentences", "spans"},
  ...]}`` with every offset into its document (a sentence's ``text`` is its own).
* ``GET /health`` — ``{"status": "ok"}`` and counters: requests, sentences, model calls (failed
  ones too), the largest batch, what is queued.
* ``GET /info`` — what the model is (kind, architecture, runtime, tag scheme, labels, parameters),
  the facts its directory holds (``config.json``, ``teacher.json``, ``export.json``, a summary of
  ``training.json``), the front matter of its model card (``README.md``, as ``distill-eval --card``
  writes it) when there is one, and the server's limits.

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
* **Bounded input, with a 4xx and a JSON ``{"error": ...}`` naming what is wrong**: a body over
  ``--max-body-bytes`` is 413, refused from its Content-Length or, when chunked, as soon as it
  passes the limit (never read whole); more than ``--max-texts`` inputs or a text (or joined
  words) over ``--max-text-chars`` characters is 413; malformed JSON is 400; a body that is not an
  object, with not exactly one of ``texts``, ``tokens`` and ``documents``, an unknown field, an
  empty list, a non-string text or word, or an empty or blank word, is 422. A document has no
  length limit of its own (the body's bounds it); each of its sentences must be within
  ``--max-text-chars`` (413 names the document and the sentence's offset), so that a document the
  splitter cannot cut is refused as an over-long text would be. An empty text is valid (no words,
  no spans), as for the Tagger. Unknown paths and methods get 404 and 405, in JSON too.
* **Shedding, not queueing without end** (issue 34): past ``--max-queue`` sentences waiting (by
  default 2 x ``--max-batch``, about two model calls of backlog: at 4x capacity, the admitted
  requests' p99 was 0.83 s with 64 against 1.6 s with 256, docs/BENCHMARKS.md), a request is
  answered 503 with
  ``Retry-After: 1`` at once: when the queue is full, before its body is parsed (a small body,
  up to 64 KiB, is read and dropped so that the client keeps its connection; a larger or slow one
  is left unread and the connection closed); when the request itself would pass the bound, before it
  reaches the model. A request is always admitted into an empty queue, however large, so that none is
  refused for ever. ``/health`` reports the queue and the requests shed.
* **Deadlines, and no work for a client that has gone** (issue 34): the body must arrive within
  ``--body-timeout`` (408), a request is answered within ``--request-timeout`` (504), and a
  request whose client disconnects, or whose deadline passes, is dropped from the queue before it
  reaches the model (a batch already running finishes; its answer is dropped). Shutdown waits
  ``--shutdown-timeout`` for the requests in flight, then closes what is left.
* **The GIL is handed over every 0.5 ms, not every 5** (``GIL_SWITCH_S``, set by ``distill-serve``
  for its process): the event loop and the model's thread share one interpreter, and the model's
  thread takes the GIL back after each ONNX or torch call; under overload, with the event loop
  busy shedding, Python's default 5 ms interval let it wait up to 5 ms each time, and the admitted
  requests' throughput fell by about half (issue 34; docs/BENCHMARKS.md, "distill-serve at 4x
  its capacity").
* starlette on uvicorn (the ``serve`` extra, with httptools and uvloop, which uvicorn picks up by
  itself); one process, one model. For more cores, run more
  processes behind a load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..corpora.documents import document_sentences
from ..inference import TaggedSentence, Tagger

log = logging.getLogger("seqdistill.serve")


@dataclass(frozen=True)
class Limits:
    """What one request may hold."""

    max_body_bytes: int = 1 << 20
    max_texts: int = 256
    max_text_chars: int = 10_000
    body_timeout_s: float = 10.0  # the whole body must arrive within this (408 past it)
    request_timeout_s: float = 60.0  # a request not answered within this gets 504; its work is dropped


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Overloaded(Exception):
    """The queue holds ``--max-queue`` sentences already: the request is shed (503, Retry-After)."""


class ModelError(Exception):
    """The model call failed for this request."""


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


# -- request checks ----------------------------------------------------------------------------------
async def disconnected(request) -> None:
    """Returns when the client has gone (ASGI ``http.disconnect`` after the body was read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def read_body(request, limit: int) -> bytes:
    """The body, refused (413) past ``limit`` bytes: from its Content-Length before reading, or
    while reading a chunked one, never read whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body is {int(declared):,} bytes; the limit is {limit:,} (--max-body-bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body is over {limit:,} bytes, the limit (--max-body-bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


GIL_SWITCH_S = 0.0005  # sys.setswitchinterval for the server's process (see the module's docstring)
SHED_DRAIN_BYTES = 64 << 10  # a shed request's body up to this size is read and dropped ...
SHED_DRAIN_S = 0.05  # ... if it arrives within this time; the connection is then kept alive


async def drained(scope, receive) -> bool:
    """Reads and drops the body of a request about to be shed, when it is small (Content-Length up
    to ``SHED_DRAIN_BYTES``) and arrives within ``SHED_DRAIN_S``, so that the client keeps its
    connection (a 503 on a closed connection costs the client a new connection per retry, and the
    server an accept, which under overload is CPU taken from the model). A larger, chunked or slow
    body is left unread and the connection closed: shedding never waits on a body."""
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if not declared.isdigit() or int(declared) > SHED_DRAIN_BYTES:
        return False
    try:
        async with asyncio.timeout(SHED_DRAIN_S):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return False
                if not message.get("more_body"):
                    return True
    except TimeoutError:
        return False


def overload_error(e: Overloaded) -> dict:
    """The JSON body of a 503 for a shed request."""
    return {"error": f"overloaded: {e}; retry after a second"}


class ShedWhenFull:
    """ASGI middleware, ahead of starlette's routing: a ``POST /tag`` that arrives while the queue
    is full is answered 503 here, with no request object, route or JSON response built for it.
    Under overload most requests are shed, and what each costs the server is CPU the admitted ones
    wait for (issue 34: shedding through starlette's handler let the admitted requests' p99 grow)."""

    def __init__(self, app, batcher: MicroBatcher):
        self.app, self.batcher = app, batcher

    async def __call__(self, scope, receive, send):
        b = self.batcher
        if scope["type"] != "http" or scope["path"] != "/tag" or scope["method"] != "POST" or not b.full():
            return await self.app(scope, receive, send)
        body = json.dumps(overload_error(b.shed())).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers.append((b"retry-after", b"1"))
        if not await drained(scope, receive):
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


INPUTS = ("texts", "tokens", "documents")


def parse_request(body: bytes, limits: Limits) -> tuple[str, list]:
    """The inputs of a ``/tag`` body, checked: which kind (``texts``, ``tokens`` or ``documents``)
    and the list."""
    if not body.strip():
        raise RequestError(400, 'empty body; send a JSON object {"texts": [...]} or {"tokens": [[...], ...]}')
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise RequestError(400, "malformed JSON: the body is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts (sys.set_int_max_str_digits)
        raise RequestError(400, f"malformed JSON: {str(e)[:200]}") from None
    if not isinstance(data, dict):
        raise RequestError(
            422, f'the body must be a JSON object {{"texts": [...]}} or {{"tokens": [[...], ...]}}, not {_kind(data)}'
        )
    present = [k for k in INPUTS if k in data]
    unknown = sorted(set(data) - set(INPUTS))
    if unknown:
        hint = ' (did you mean "texts"?)' if "text" in unknown else ""
        raise RequestError(
            422, f"unknown field(s) {', '.join(map(repr, unknown))}{hint}; send texts, tokens or documents"
        )
    if len(present) != 1:
        raise RequestError(
            422,
            'send exactly one of "texts" (a list of strings), "tokens" (a list of lists of words) and "documents" '
            "(a list of strings), " + (f"not {' and '.join(present)}" if present else "not none"),
        )
    key = present[0]
    items = data[key]
    if not isinstance(items, list):
        raise RequestError(422, f'"{key}" must be a list, not {_kind(items)}')
    if not items:
        raise RequestError(422, f'"{key}" is empty; send at least one input')
    if len(items) > limits.max_texts:
        raise RequestError(413, f'"{key}" holds {len(items):,} inputs; the limit is {limits.max_texts:,} (--max-texts)')
    for i, item in enumerate(items):
        if key in ("texts", "documents"):
            if not isinstance(item, str):
                raise RequestError(422, f"{key}[{i}] must be a string, not {_kind(item)}")
            _check_unicode(item, f"{key}[{i}]")
            chars = len(item) if key == "texts" else 0  # a document's sentences are checked once split
        else:
            if not isinstance(item, list):
                raise RequestError(422, f"tokens[{i}] must be a list of words (strings), not {_kind(item)}")
            for j, w in enumerate(item):
                if not isinstance(w, str):
                    raise RequestError(422, f"tokens[{i}][{j}] must be a string, not {_kind(w)}")
                if not w.strip():
                    raise RequestError(422, f"tokens[{i}][{j}] is empty or blank; a word needs a character")
                _check_unicode(w, f"tokens[{i}][{j}]")
            chars = sum(len(w) for w in item) + max(0, len(item) - 1)  # the words joined by one space
        if chars > limits.max_text_chars:
            raise RequestError(
                413, f"{key}[{i}] is {chars:,} characters; the limit is {limits.max_text_chars:,} (--max-text-chars)"
            )
    return key, items


def split_documents(docs: list[str], splitter: str, language: str, limits: Limits) -> list[tuple[int, int, int]]:
    """``(document, start, end)`` of the documents' sentences, each within ``--max-text-chars``."""
    pieces = document_sentences(docs, splitter, language)
    for d, start, end in pieces:
        if end - start > limits.max_text_chars:
            raise RequestError(
                413,
                f"documents[{d}] has a sentence of {end - start:,} characters at character {start:,} (the splitter "
                f"found no boundary in it); the limit is {limits.max_text_chars:,} (--max-text-chars)",
            )
    return pieces


def documents_json(docs: list[str], pieces: list[tuple[int, int, int]], sentences: list[dict]) -> list[dict]:
    """The documents' answer: each document's sentences and spans, their offsets moved into it."""
    out = [{"text": text, "sentences": [], "spans": []} for text in docs]
    for (d, start, _), s in zip(pieces, sentences):
        s["offsets"] = [[a + start, b + start] for a, b in s["offsets"]]
        for span in s["spans"]:
            span["char_start"] += start
            span["char_end"] += start
        out[d]["sentences"].append(s)
        out[d]["spans"] += s["spans"]
    return out


def _check_unicode(text: str, where: str) -> None:
    """422 for a string that is no Unicode text: JSON's ``\\ud800`` escapes decode to lone surrogates,
    which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(
            422,
            f"{where} holds a lone surrogate (\\u{ord(text[e.start]):04x}) at character {e.start}; send Unicode text",
        ) from None


def _kind(x) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(x), "a number" if isinstance(x, (int, float)) else type(x).__name__
    )


# -- /info ---------------------------------------------------------------------------------------------
TRAINING_KEYS = (
    "recipe",
    "teacher",
    "teachers",
    "encoder",
    "train_sentences",
    "best_epoch",
    "best_dev_f1",
    "provenance",
)


def front_matter(readme: Path) -> dict | str | None:
    """A model card's front matter: JSON (as ``distill-eval --card`` writes it) or YAML (when
    PyYAML is there, as transformers installs it); the raw text when neither reads it."""
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("---\n") or "\n---" not in text[3:]:
        return None
    raw = text[4 : text.index("\n---", 3)]
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        import yaml

        data = yaml.safe_load(raw)
        return data if isinstance(data, dict) else raw
    except Exception:  # no PyYAML, or not YAML
        return raw


def model_info(tagger: Tagger, model_dir) -> dict:
    """What the model is, and the facts its directory holds."""
    d = Path(model_dir)
    decoder = tagger.decoder
    info = {
        "name": tagger.name,
        "path": str(d.resolve()),
        "kind": tagger.kind,
        "architecture": tagger.backend.what,
        "runtime": tagger.runtime,
        "scheme": decoder.schema.scheme if decoder is not None else None,
        "labels": list(decoder.schema.tags) if decoder is not None else None,
        "entity_types": list(decoder.schema.entity_types) if decoder is not None else None,
        "nested": tagger.nested,
        "decoder": decoder.kind if decoder is not None else None,
        "parameters": {"all": tagger.params, "without_embeddings": tagger.params_without_embeddings},
    }

    def read(name):
        try:
            return json.loads((d / name).read_text())
        except (OSError, ValueError):
            return None

    files = {}
    for name in ("config.json", "teacher.json", "export.json"):
        data = read(name)
        if isinstance(data, dict):
            files[name] = data
    training = read("training.json")
    if isinstance(training, dict):
        summary = {k: training[k] for k in TRAINING_KEYS if training.get(k) is not None}
        config = training.get("config") or {}
        for k in ("recipe", "teacher", "losses", "epochs", "hidden_size"):
            if config.get(k) is not None:
                summary.setdefault(k, config[k])
        files["training.json"] = summary
    info["files"] = files
    extra = (files.get("config.json") or {}).get("extra") or {}
    info["recipe"] = (files.get("training.json") or {}).get("recipe") or extra.get("recipe")
    card = front_matter(d / "README.md") if (d / "README.md").is_file() else None
    if card is not None:
        info["card"] = card
    return info


# -- the app -------------------------------------------------------------------------------------------
def create_app(
    tagger: Tagger,
    model_dir=None,
    *,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    model_batch: int = 8,
    limits: Limits | None = None,
    max_queue: int | None = None,
    max_call_chars: int = 20_000,
    splitter: str = "pysbd",
    language: str | None = None,
):
    """The starlette app serving ``tagger``; its batching worker runs while the app runs (lifespan).
    ``app.state.batcher`` holds the batcher (its ``stats``). ``max_queue``: sentences waiting past
    which a request is answered 503 at once (None: no bound). ``splitter`` and ``language``: how
    ``documents`` are split into sentences (``language`` by default as ``Tagger.documents`` has it)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    limits = limits or Limits()
    language = language or tagger.document_language
    batcher = MicroBatcher(tagger, max_batch, max_wait_ms, model_batch, max_queue, max_call_chars)
    info = model_info(tagger, model_dir) if model_dir is not None else {"name": tagger.name, "kind": tagger.kind}
    info["server"] = {
        "max_batch": max_batch,
        "max_wait_ms": max_wait_ms,
        "model_batch": model_batch,
        "max_queue": max_queue,
        "max_call_chars": max_call_chars,
        "splitter": splitter,
        "language": language,
        "max_texts": limits.max_texts,
        "max_body_bytes": limits.max_body_bytes,
        "max_text_chars": limits.max_text_chars,
        "body_timeout_s": limits.body_timeout_s,
        "request_timeout_s": limits.request_timeout_s,
    }

    def overloaded(e: Overloaded):
        return JSONResponse(overload_error(e), status_code=503, headers={"Retry-After": "1"})

    async def tag(request):  # a full queue has shed the request already (ShedWhenFull)
        try:
            try:
                async with asyncio.timeout(limits.body_timeout_s):
                    body = await read_body(request, limits.max_body_bytes)
            except TimeoutError:
                raise RequestError(
                    408, f"the body did not arrive within {limits.body_timeout_s:g} s (--body-timeout)"
                ) from None
            key, items = parse_request(body, limits)
            docs = pieces = None
            if key == "documents":  # split off the event loop: pysbd takes milliseconds a document
                docs = items
                pieces = await asyncio.get_running_loop().run_in_executor(
                    None, split_documents, docs, splitter, language, limits
                )
                items = [docs[d][start:end] for d, start, end in pieces]
        except RequestError as e:
            return JSONResponse({"error": e.message}, status_code=e.status)
        if not items:  # documents without a sentence: nothing for the model
            return JSONResponse({"model": tagger.name, "documents": documents_json(docs, [], [])})
        work = asyncio.ensure_future(batcher.submit(items))
        gone = asyncio.ensure_future(disconnected(request))
        try:
            done, _ = await asyncio.wait({work, gone}, timeout=limits.request_timeout_s, return_when="FIRST_COMPLETED")
        finally:
            gone.cancel()
        if work not in done:  # the client went away, or the deadline passed: the batcher skips the work
            work.cancel()
            batcher.stats.dropped += 1
            return JSONResponse(
                {"error": f"not answered within {limits.request_timeout_s:g} s (--request-timeout)"}, status_code=504
            )
        try:
            sentences = work.result()
        except Overloaded as e:
            return overloaded(e)
        except ModelError as e:
            return JSONResponse({"error": f"the model failed on this request: {e}"}, status_code=500)
        if docs is not None:
            return JSONResponse({"model": tagger.name, "documents": documents_json(docs, pieces, sentences)})
        return JSONResponse({"model": tagger.name, "sentences": sentences})

    async def health(request):
        s = batcher.stats
        return JSONResponse(
            {
                "status": "ok",
                "model": tagger.name,
                "uptime_s": round(time.time() - s.started, 3),
                "requests": s.requests,
                "sentences": s.sentences,
                "model_calls": s.model_calls,
                "failed_calls": s.failed_calls,
                "largest_batch": s.largest_batch,
                "shed": s.shed,
                "dropped": s.dropped,
                "queued_sentences": batcher.queued,
                "max_queue": batcher.max_queue,
            }
        )

    async def get_info(request):
        return JSONResponse(info)

    async def http_error(request, exc: HTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    async def server_error(request, exc: Exception):
        log.error("unhandled error", exc_info=exc)
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            await batcher.close()

    app = Starlette(
        routes=[
            Route("/tag", tag, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/info", get_info, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        middleware=[Middleware(ShedWhenFull, batcher=batcher)],
        lifespan=lifespan,
    )
    app.state.batcher = batcher
    return app


@contextlib.contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int = 0):
    """Run ``app`` on uvicorn in a background thread (a free port when ``port`` is 0); yields its
    base URL and stops the server on exit. For tests and benchmarks."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


# -- the command -------------------------------------------------------------------------------------
