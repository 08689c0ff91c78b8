"""``distill-serve``: any model directory (a torch student, a teacher, an exported ONNX directory)
behind HTTP, with dynamic micro-batching across concurrent requests. The app: routes, JSON
answers, the model's facts; what it admits is ``admission.py``'s, how it batches is ``batching.py``'s.

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

Decisions, named here (the batching's and admission's are in their modules):

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
from pathlib import Path

from ..corpora.documents import document_sentences
from ..inference import Tagger
from .admission import (
    Limits,
    RequestError,
    ShedWhenFull,
    disconnected,
    overload_error,
    parse_request,
    read_body,
)
from .batching import MicroBatcher, ModelError, Overloaded

log = logging.getLogger("seqdistill.serve")


GIL_SWITCH_S = 0.0005  # sys.setswitchinterval for the server's process (see the module's docstring)


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
