"""Load test of ``distill-serve`` on loopback: throughput and latency at concurrency 1, 8 and 32,
for the MGKD student and for its teacher served the same way (issue 21).

    .venv/bin/python benchmarks/serve_load.py \
        --model "MGKD BiLSTM-CRF (ONNX int8)=.data/demo/mgkd-onnx-int8" \
        --model "MGKD BiLSTM-CRF (torch)=.data/demo/mgkd" \
        --model "MiniLM-L6 CRF teacher (torch)=.data/demo/teacher" \
        --control "--threads 1 --max-batch 1" --control "--threads 1 --max-batch 32 --model-batch 32" \
        --test .venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/test.txt \
        --write docs/BENCHMARKS.md

Each model is served by ``python -m seqdistill.cli.serve`` in its own process, with the same
flags for every model (``--serve-args``; by default ``--threads 1 --max-batch 32 --max-wait-ms 5
--model-batch 8``), and loaded by ``--concurrency`` clients in this process: threads of the
standard library's ``http.client``, one keep-alive connection each (httpx's AsyncClient cost 3.7
ms of CPU a request here, nine times ``http.client``: CPU the server shares on a small machine).
Each client sends one request, waits for its answer, and sends the next; a request is
``--texts-per-request`` raw CoNLL-2003 test sentences (``{"texts": [...]}``; the text rebuilt from
the words, spaces dropped before closing punctuation and after opening, as a user would send it),
taken in a seeded shuffled order. Every level is bounded in requests (``--requests``) and in time
(``--seconds``), after a warm-up of ``2 x concurrency`` requests, and measured in ``--rounds``
rounds that interleave the levels (1, 8, 32, 1, 8, 32, ...) so that a burst of background load
does not fall on one level only; the figures pool the rounds. Controls (``--control FLAGS``,
repeatable): the first model again, served with FLAGS instead, e.g. ``--max-batch 1`` (no
batching: concurrency alone) or ``--model-batch 32`` (one forward pass per batch).

Reported: sentences/s and requests/s (answers over wall time), p50 and p99 latency (send to
answer, in this process), sentences per model call (from ``/health``), and the CPU time per
request of the server process and of this client process (from /proc): on a small machine they
share the cores. ``--write FILE`` replaces the section between the markers in FILE (appended at
its end when absent; ``--section`` names the markers, for a second setup).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import platform
import random
import re
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doc_section import write_section  # noqa: E402

from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.deploy.card import machine as card_machine  # noqa: E402

HEADING = "## Serving: distill-serve under load (issue 21)"
TICKS = os.sysconf("SC_CLK_TCK")


def detokenize(words: list[str]) -> str:
    """A sentence's text as a user would write it: no space before closing punctuation, none after opening."""
    text = " ".join(words)
    text = re.sub(r" ([,.;:!?%)\]}]|'s\b|n't\b)", r"\1", text)
    return re.sub(r"([(\[{$]) ", r"\1", text)


def test_texts(path: str, seed: int = 0) -> list[str]:
    corpus = read_corpus(path, "test", "test")
    texts = [detokenize(s.words) for s in corpus.sentences if s.words]
    random.Random(seed).shuffle(texts)
    return texts


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine() -> str:
    m = card_machine(None)
    return f"{m['cpu']}, {m['cores']} cores, no GPU, {m['os']}"


def uvicorn_stack() -> str:
    """The HTTP parser and event loop uvicorn picks ("auto"): httptools and uvloop when installed."""
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http}, {loop}"


class Server:
    """``python -m seqdistill.cli.serve`` on a free loopback port, until closed."""

    def __init__(self, model_dir: str, args: list[str]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "seqdistill.cli.serve", "--model", model_dir, "--port", str(self.port)]
        self.proc = subprocess.Popen([*cmd, *args, "--log-level", "warning"], cwd=ROOT)
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {shlex.join(cmd + args)}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the server did not start in 180 s")
            time.sleep(0.2)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=30).json()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def load(port: int, texts: list[str], start: int, concurrency: int, per_request: int, requests: int, seconds: float):
    """``concurrency`` clients (threads, one keep-alive connection each), each one request at a
    time, until ``requests`` answers or ``seconds``, after a warm-up of 2 requests each; returns the
    latencies (s), the wall time, the errors and the next text index."""
    counter = itertools.count()
    warm = 2 * concurrency
    ready = threading.Barrier(concurrency + 1)
    latencies, errors = [], []
    stop = [0.0]

    def body(i: int) -> bytes:
        return json.dumps(
            {"texts": [texts[(start + i * per_request + j) % len(texts)] for j in range(per_request)]}
        ).encode()

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers = {"Content-Type": "application/json"}

        def post(i: int) -> tuple[int, bytes]:
            conn.request("POST", "/tag", body(i), headers)
            r = conn.getresponse()
            return r.status, r.read()

        for i in (2 * k, 2 * k + 1):
            post(i)
        ready.wait()
        ready.wait()  # the clock starts
        while True:
            i = next(counter)
            if i >= requests or time.perf_counter() >= stop[0]:
                break
            t = time.perf_counter()
            status, data = post(warm + i)
            latencies.append(time.perf_counter() - t)
            if status != 200:
                errors.append(f"{status}: {data[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    stop[0] = t0 + seconds
    ready.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return latencies, wall, errors, start + (warm + len(latencies)) * per_request


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (/proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(name, model_dir, serve_args, texts, args) -> list[dict]:
    print(f"{name}: serving {model_dir} {' '.join(serve_args)}", flush=True)
    server = Server(model_dir, serve_args)
    levels = [int(c) for c in args.concurrency.split(",")]
    pooled = {
        c: {"lat": [], "wall": 0.0, "errors": [], "calls": 0, "sent": 0, "scpu": 0.0, "ccpu": 0.0} for c in levels
    }
    pos = 0
    try:
        for rnd in range(args.rounds):
            for c in levels:
                h0, s0, c0 = server.health(), cpu_seconds(server.proc.pid), time.process_time()
                lat, wall, errors, pos = load(
                    server.port, texts, pos, c, args.texts_per_request, args.requests, args.seconds
                )
                s1, c1, h1 = cpu_seconds(server.proc.pid), time.process_time(), server.health()
                p = pooled[c]
                p["lat"] += lat
                p["wall"] += wall
                p["errors"] += errors
                # from /health: the warm-up included (sentences per call is a ratio)
                p["calls"] += h1["model_calls"] - h0["model_calls"]
                p["sent"] += h1["sentences"] - h0["sentences"]
                p["scpu"] += s1 - s0
                p["ccpu"] += c1 - c0
                print(
                    f"  round {rnd + 1} concurrency {c}: {len(lat)} requests in {wall:.1f} s, "
                    f"{len(lat) / wall:.1f} req/s, p50 {1000 * statistics.median(lat):.1f} ms",
                    flush=True,
                )
    finally:
        server.close()
    rows = []
    for c, p in pooled.items():
        n = len(p["lat"])
        rows.append(
            {
                "model": name,
                "serve_args": " ".join(serve_args),
                "concurrency": c,
                "requests": n,
                "seconds": p["wall"],
                "errors": len(p["errors"]),
                "first_error": p["errors"][0] if p["errors"] else None,
                "requests_per_s": n / p["wall"],
                "sentences_per_s": n * args.texts_per_request / p["wall"],
                "p50_ms": 1000 * percentile(p["lat"], 50),
                "p99_ms": 1000 * percentile(p["lat"], 99),
                "mean_batch": p["sent"] / max(1, p["calls"]),
                # CPU per request, warm-up included on both sides (the same share of requests)
                "server_cpu_ms_per_request": 1000 * p["scpu"] / (n + 2 * c * args.rounds),
                "client_cpu_ms_per_request": 1000 * p["ccpu"] / (n + 2 * c * args.rounds),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR (repeatable); the first is the student")
    ap.add_argument("--test", required=True, help="CoNLL-2003 test file (the texts are rebuilt from its words)")
    ap.add_argument("--serve-args", default="--threads 1 --max-batch 32 --max-wait-ms 5 --model-batch 8")
    ap.add_argument(
        "--control",
        action="append",
        default=[],
        help="the first model again, served with these flags instead (repeatable), e.g. '--threads 1 --max-batch 1'",
    )
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--requests", type=int, default=300, help="most measured requests per level and round")
    ap.add_argument("--seconds", type=float, default=10.0, help="most seconds per level and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--write", default=None, help="replace the marked section of this Markdown file")
    ap.add_argument("--section", default="serve_load", help="the section's marker name (one section per setup)")
    args = ap.parse_args()
    BEGIN, END = f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->"

    texts = test_texts(args.test)
    models = [m.split("=", 1) for m in args.model]
    load_before = os.getloadavg()
    t_start = time.time()
    rows = []
    base = shlex.split(args.serve_args)
    for name, d in models:
        rows += measure(name, d, base, texts, args)
    for flags in args.control:
        name, d = models[0]
        rows += measure(name, d, shlex.split(flags), texts, args)
    load_after = os.getloadavg()
    minutes = (time.time() - t_start) / 60

    lines = [
        BEGIN,
        "",
        "Command: `"
        + (f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else "")
        + f"{' '.join(['.venv/bin/python', 'benchmarks/serve_load.py', *map(shlex.quote, sys.argv[1:])])}`",
        "",
        f"Machine: {machine()}; Python {platform.python_version()}, uvicorn "
        f"{__import__('uvicorn').__version__} ({uvicorn_stack()}), starlette {__import__('starlette').__version__}; "
        f"clients: http.client threads. Load average (1, 5, 15 min) {', '.join(f'{x:.1f}' for x in load_before)} before "
        f"and {', '.join(f'{x:.1f}' for x in load_after)} after; {minutes:.1f} minutes in all. "
        f"Data: {len(texts):,} CoNLL-2003 test sentences as raw text (rebuilt from the words), "
        f"{args.texts_per_request} per request, in a seeded shuffled order; server and clients on the same "
        f"machine (loopback); each level at most {args.requests} requests or {args.seconds:g} s a round, "
        f"{args.rounds} rounds interleaved, after a warm-up of 2 x concurrency requests.",
        "",
        "| model | server flags | clients | requests | sentences/s | requests/s | p50 ms | p99 ms | "
        "sentences per model call | server CPU ms/request | client CPU ms/request |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model'].replace('|', '/')} | `{r['serve_args']}` | {r['concurrency']} | {r['requests']:,}"
            + (f" ({r['errors']} errors)" if r["errors"] else "")
            + f" | {r['sentences_per_s']:.1f} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['mean_batch']:.1f} | {r['server_cpu_ms_per_request']:.2f} | {r['client_cpu_ms_per_request']:.2f} |"
        )
    lines += ["", "Throughput at the highest concurrency against concurrency 1 (sentences/s):", ""]
    levels = sorted({r["concurrency"] for r in rows})
    for (model, flags), group in itertools.groupby(rows, key=lambda r: (r["model"], r["serve_args"])):
        by = {r["concurrency"]: r for r in group}
        if levels[0] in by and levels[-1] in by:
            ratio = by[levels[-1]]["sentences_per_s"] / by[levels[0]]["sentences_per_s"]
            lines.append(f"- {model}, `{flags}`: {ratio:.1f}x")
    lines += ["", END]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.write:
        write_section(args.write, BEGIN, END, HEADING, text)


if __name__ == "__main__":
    main()
