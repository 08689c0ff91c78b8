"""What ``distill-serve`` (``serve.py``) admits: bounded, well-formed requests, within their
deadlines, while the queue has room; everything else gets a JSON error at once.

Decisions, named here:

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
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from .batching import MicroBatcher, Overloaded

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
