"""``distill-serve`` at 1x and at 4x its capacity (issue 34): does shedding keep the admitted
requests' latency where it is at capacity, lose nothing, and keep memory flat?

    .venv/bin/python benchmarks/serve_overload.py \
        --model "MGKD BiLSTM-CRF (ONNX int8)=.data/demo/mgkd-int8-wo" \
        --control "--threads 1 --max-batch 32 --max-wait-ms 5 --model-batch 8 --max-queue 32" \
        --test .venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/test.txt \
        --write docs/BENCHMARKS.md

For each server setup (``--serve-args``, then each ``--control``), one server process and three
phases against it:

1. **Capacity** is the saturated throughput: closed loops of 8, 32 and 64 clients (``--levels``),
   each client one request at a time, for ``--seconds`` each; the capacity is the highest
   requests/s of the three. (Issue 34's first run measured it with 8 clients, which left the
   server's batching idle: the "4x" load was then answered whole.)
2. **1x**: requests sent open loop at the capacity's rate for ``--seconds``: the latency at
   capacity (p50, p99 of the answered 200s).
3. **4x** (``--overload``): the same at four times that rate, with the server's resident memory
   sampled every 0.2 s. Every request is counted: 200 admitted, 503 shed, another status an
   error, no answer within 60 s or a broken connection lost.

Goal (issue 34): the admitted p99 at 4x within 2x of the p99 at 1x, nothing lost, memory flat.

The load comes from a separate process (``drive``, this file run with ``drive`` as its first
argument; JSON on stdout), an asyncio loop speaking HTTP/1.1 through ``h11`` (uvicorn's own
parser) over keep-alive connections, a new one opened whenever every open one is busy or the
server closed one. ``h11`` rather than httpx or threads of ``http.client``: the earlier overload
run drove 128 ``http.client`` threads, whose timestamps waited on the client's own GIL, and
httpx costs several ms of CPU a request, CPU the 2-core machine's server needs. Open-loop
latency runs from each request's scheduled send time, so a client that falls behind its schedule
counts against the server's latency, not for it (no coordinated omission). A request that fails on
a kept-alive connection before any byte of its answer came (the server closed the connection at
its keep-alive timeout as the request went out) is sent once more on a new connection, as HTTP
clients do, and counted as resent; a request with no answer after that is lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

HEADING = "## distill-serve at 4x its capacity (issue 34)"
LOST_AFTER_S = 60.0


# -- the driver (its own process) ------------------------------------------------------------------
class _Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, reader, writer):
        import h11

        self.h11 = h11
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(our_role=h11.CLIENT)
        self.answered = False  # whether any byte of this request's answer came

    async def post(self, port: int, body: bytes) -> int:
        h11, http = self.h11, self.http
        self.answered = False
        headers = [
            ("Host", f"127.0.0.1:{port}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        self.writer.write(
            http.send(h11.Request(method="POST", target="/tag", headers=headers))
            + http.send(h11.Data(data=body))
            + http.send(h11.EndOfMessage())
        )
        status = None
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(65536)
                self.answered = self.answered or bool(data)
                http.receive_data(data)  # b"" is the end of the stream: h11 raises if an answer is cut
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                return status

    def reusable(self) -> bool:
        if self.http.our_state is self.h11.DONE and self.http.their_state is self.h11.DONE:
            self.http.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.writer.close()


async def _drive(port: int, bodies: list[bytes], mode: str, value: float, seconds: float) -> dict:
    """``mode`` "closed": ``value`` clients one request at a time; "open": ``value`` requests/s on
    a fixed schedule. Returns (status or None, latency s) per request and the wall time."""
    idle: list[_Connection] = []
    results: list[tuple[int | None, float]] = []
    counter = iter(range(1 << 62))
    retried = [0]

    async def attempt(i: int, conn: _Connection | None) -> tuple[int | None, _Connection | None]:
        try:
            if conn is None:
                conn = _Connection(*await asyncio.open_connection("127.0.0.1", port))
            async with asyncio.timeout(LOST_AFTER_S):
                return await conn.post(port, bodies[i % len(bodies)]), conn
        except Exception:  # no answer: a reset, a cut answer or the timeout
            return None, conn

    async def one(i: int, start: float) -> None:
        conn = None
        while idle and conn is None:  # the most recently used first; one the server closed is dropped
            conn = idle.pop()
            if conn.reader.at_eof():
                conn.close()
                conn = None
        reused = conn is not None
        status, conn = await attempt(i, conn)
        if status is None and reused and not conn.answered:
            # a kept-alive connection the server closed as the request went out (its keep-alive
            # timeout): the request never reached it, so it is sent again on a new connection, as
            # HTTP clients do; counted apart, not lost
            conn.close()
            retried[0] += 1
            status, conn = await attempt(i, None)
        results.append((status, time.perf_counter() - start))
        if conn is not None:
            if status is not None and conn.reusable():
                idle.append(conn)
            else:
                conn.close()

    t0 = time.perf_counter()
    end = t0 + seconds
    if mode == "closed":

        async def client():
            while time.perf_counter() < end:
                await one(next(counter), time.perf_counter())

        await asyncio.gather(*(client() for _ in range(int(value))))
    else:
        tasks = []
        for i in range(int(value * seconds)):
            scheduled = t0 + i / value
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(i, scheduled)))
        await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    for conn in idle:
        conn.close()
    return {"wall": wall, "results": results, "cpu_s": time.process_time(), "retried": retried[0]}


def drive_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="serve_overload.py drive")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bodies", required=True, help="a JSON file: the request bodies, as strings")
    ap.add_argument("--mode", choices=["closed", "open"], required=True)
    ap.add_argument("--value", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    a = ap.parse_args(argv)
    bodies = [b.encode() for b in json.loads(Path(a.bodies).read_text())]
    out = asyncio.run(_drive(a.port, bodies, a.mode, a.value, a.seconds))
    sys.stdout.write(json.dumps(out))


# -- the run -----------------------------------------------------------------------------------------
def drive(server, bodies_file: Path, mode: str, value: float, seconds: float) -> dict:
    """One phase, driven from its own process; adds the server's CPU seconds over it."""
    from serve_load import cpu_seconds

    port = server.port
    before = cpu_seconds(server.proc.pid)
    cmd = [sys.executable, __file__, "drive", "--port", str(port), "--bodies", str(bodies_file)]
    cmd += ["--mode", mode, "--value", str(value), "--seconds", str(seconds)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return {**json.loads(done.stdout), "server_cpu_s": cpu_seconds(server.proc.pid) - before}


def summary(out: dict) -> dict:
    from serve_load import percentile

    results = out["results"]
    ok = [t for s, t in results if s == 200]
    return {
        "sent": len(results),
        "rps": len(results) / out["wall"],
        "admitted": len(ok),
        "shed": sum(s == 503 for s, _ in results),
        "errors": sum(s not in (200, 503, None) for s, _ in results),
        "lost": sum(s is None for s, _ in results),
        "retried": out["retried"],
        "p50_ms": 1000 * percentile(ok, 50) if ok else float("nan"),
        "p99_ms": 1000 * percentile(ok, 99) if ok else float("nan"),
        "server_cores": out["server_cpu_s"] / out["wall"],  # CPU seconds per second of the phase
        "driver_cores": out["cpu_s"] / out["wall"],  # the driver's start-up included
    }


def run_setup(name: str, model_dir: str, serve_args: list[str], bodies_file: Path, args) -> dict:
    from serve_load import Server, rss_mb

    print(f"{name}: serving {model_dir} {' '.join(serve_args)}", flush=True)
    server = Server(model_dir, serve_args)
    try:
        drive(server, bodies_file, "closed", 8, 2.0)  # warm-up
        levels = {}
        for c in args.levels:
            levels[c] = summary(drive(server, bodies_file, "closed", c, args.seconds))
            print(f"  closed loop, {c} clients: {levels[c]}", flush=True)
        capacity = max(s["rps"] for s in levels.values())
        at_capacity = summary(drive(server, bodies_file, "open", capacity, args.seconds))
        print(f"  open loop at 1x ({capacity:.0f} req/s): {at_capacity}", flush=True)
        rss, done = [rss_mb(server.proc.pid)], threading.Event()

        def sample():
            while not done.wait(0.2):
                rss.append(rss_mb(server.proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        over = summary(drive(server, bodies_file, "open", args.overload * capacity, args.seconds))
        done.set()
        sampler.join()
        print(f"  open loop at {args.overload:g}x: {over}", flush=True)
        health = server.health()
    finally:
        server.close()
    return {
        "model": name,
        "serve_args": " ".join(serve_args),
        "levels": levels,
        "capacity_rps": capacity,
        "at_capacity": at_capacity,
        "overload": over,
        "rss_mb": (rss[0], max(rss), rss[-1]),
        "health": health,
    }


def main() -> None:
    if sys.argv[1:2] == ["drive"]:
        return drive_main(sys.argv[2:])
    from doc_section import write_section
    from serve_load import machine, test_texts

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--test", required=True, help="CoNLL-2003 test file (the texts are rebuilt from its words)")
    ap.add_argument("--serve-args", default="--threads 1 --max-batch 32 --max-wait-ms 5 --model-batch 8")
    ap.add_argument("--control", action="append", default=[], help="the first model again with these flags")
    ap.add_argument("--levels", default="8,32,64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--overload", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of each phase")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--write", default=None, help="replace the marked section of this Markdown file")
    ap.add_argument("--section", default="serve_overload")
    args = ap.parse_args()

    texts = test_texts(args.test)
    k = args.texts_per_request
    bodies = [json.dumps({"texts": texts[i : i + k]}) for i in range(0, len(texts) - k + 1, k)]
    bodies_file = Path(f"/tmp/serve_overload_bodies_{k}.json")
    bodies_file.write_text(json.dumps(bodies))
    setups = [(*m.split("=", 1), shlex.split(args.serve_args)) for m in args.model]
    setups += [(*args.model[0].split("=", 1), shlex.split(flags)) for flags in args.control]
    rows = [run_setup(name, d, flags, bodies_file, args) for name, d, flags in setups]

    BEGIN, END = f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->"
    x = f"{args.overload:g}x"
    lines = [
        BEGIN,
        "",
        f"Command: `{' '.join(['.venv/bin/python', 'benchmarks/serve_overload.py', *map(shlex.quote, sys.argv[1:])])}`",
        "",
        f"Machine: {machine()}; server and load driver (h11 on asyncio, its own process) on the same machine "
        f"(loopback). Data: {len(texts):,} CoNLL-2003 test sentences as raw text, {k} per request. Capacity: the "
        f"highest throughput of closed loops of {', '.join(map(str, args.levels))} clients; then open loop at 1x "
        f"and at {x} that rate, {args.seconds:g} s each; latency from each request's scheduled send time.",
        "",
        f"| model | server flags | capacity req/s | 1x: p50 / p99 ms (shed) | {x}: offered req/s | sent | admitted | "
        f"shed (503) | errors | lost (resent) | {x}: admitted p50 / p99 ms | p99 {x} / 1x | server RSS MB (start, max, end) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        c, o = r["at_capacity"], r["overload"]
        lines.append(
            f"| {r['model']} | `{r['serve_args']}` | {r['capacity_rps']:.0f} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} "
            f"({100 * c['shed'] / max(1, c['sent']):.0f}%) | {o['rps']:.0f} | {o['sent']:,} | {o['admitted']:,} | "
            f"{o['shed']:,} ({100 * o['shed'] / max(1, o['sent']):.0f}%) | {o['errors']} | {o['lost']} ({o['retried']}) | "
            f"{o['p50_ms']:.1f} / {o['p99_ms']:.1f} | {o['p99_ms'] / c['p99_ms']:.2f} | "
            + ", ".join(f"{v:.0f}" for v in r["rss_mb"])
            + " |"
        )
    lines += ["", END]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.write:
        write_section(args.write, BEGIN, END, HEADING, text)


if __name__ == "__main__":
    main()
