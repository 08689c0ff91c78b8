"""``distill-serve``: a thin command line over ``seqdistill.deploy.serve`` (``python -m
seqdistill.cli.serve`` runs it too)."""

from __future__ import annotations

import logging
import sys

import click

from ..corpora.documents import SPLITTERS
from ..deploy.admission import Limits
from ..deploy.evaluate import DEFAULT_THREADS
from ..deploy.serve import GIL_SWITCH_S, create_app
from ..inference import Tagger
from .options import min_score_option, words_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", required=True, help="Teacher, student or exported (distill-export) directory.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Most sentences in one model call, across the requests batched together.",
)
@click.option(
    "--max-wait-ms",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="How long a request waits for others to join its batch when the model is idle; 0: never.",
)
@click.option(
    "--model-batch",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Sentences per forward pass: a batch's sentences are sorted by length and cut into runs of this many.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=DEFAULT_THREADS,
    show_default=True,
    help="Model threads; 0: all cores.",
)
@click.option("--device", default="cpu", show_default=True)
@words_option
@click.option("--max-texts", type=click.IntRange(min=1), default=Limits.max_texts, show_default=True)
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=Limits.max_body_bytes, show_default=True)
@click.option(
    "--max-text-chars",
    type=click.IntRange(min=1),
    default=Limits.max_text_chars,
    show_default=True,
    help="Longest text (or words joined by one space) in characters.",
)
@click.option(
    "--max-queue",
    type=click.IntRange(min=1),
    default=None,
    help="Sentences waiting for the model past which a request is answered 503 with Retry-After at once "
    "(default: 2 x --max-batch, about two model calls of backlog; docs/BENCHMARKS.md, issue 34).",
)
@click.option(
    "--max-call-chars",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Characters of one model call: a larger request goes in pieces, between which the others get their turn.",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=Limits.body_timeout_s,
    show_default=True,
    help="Seconds for a request's whole body to arrive (408 past it).",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=Limits.request_timeout_s,
    show_default=True,
    help="Seconds for a request to be answered (504 past it; its work is dropped from the queue).",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds SIGTERM waits for the requests in flight before the server closes what is left.",
)
@click.option("--access-log/--no-access-log", default=False, show_default=True, help="uvicorn's line per request.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info")
@min_score_option
@click.option(
    "--splitter",
    type=click.Choice(SPLITTERS),
    default="pysbd",
    show_default=True,
    help='How {"documents": [...]} are split into sentences (seqdistill/corpora/documents.py).',
)
def serve_main(
    model,
    host,
    port,
    max_batch,
    max_wait_ms,
    model_batch,
    threads,
    device,
    words,
    min_score,
    max_texts,
    max_body_bytes,
    max_text_chars,
    max_queue,
    max_call_chars,
    body_timeout,
    request_timeout,
    shutdown_timeout,
    access_log,
    log_level,
    splitter,
) -> None:
    """Serve a teacher, student or exported model over HTTP: POST /tag ({"texts": [...]},
    {"tokens": [[...]]} or {"documents": [...]}), GET /health, GET /info; concurrent requests are
    tagged in shared batches."""
    try:
        import uvicorn
    except ImportError:
        raise click.ClickException(
            "distill-serve needs starlette and uvicorn: pip install 'seqdistill[serve]'"
        ) from None
    try:
        tagger = Tagger.load(model, device=device, threads=threads or None, words=words, min_score=min_score)
    except (FileNotFoundError, ValueError, ImportError) as e:
        raise click.ClickException(str(e)) from None
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(
        tagger,
        model,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        model_batch=model_batch,
        limits=Limits(max_body_bytes, max_texts, max_text_chars, body_timeout, request_timeout),
        max_queue=max_queue or 2 * max_batch,
        max_call_chars=max_call_chars,
        splitter=splitter,
    )
    click.echo(
        f"serving {tagger.kind} {tagger.name} ({tagger.runtime}, {threads or 'all'} thread(s)) on http://{host}:{port} "
        f"(batches of up to {max_batch} sentences in passes of {model_batch}, waiting up to {max_wait_ms:g} ms)",
        err=True,
    )
    sys.setswitchinterval(GIL_SWITCH_S)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=shutdown_timeout,
    )


if __name__ == "__main__":
    serve_main()
