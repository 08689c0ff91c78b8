"""distill-serve: the real server (uvicorn on loopback) called with a real HTTP client (httpx).
Its spans are the Tagger's; concurrent requests share model calls; every bad request gets a 4xx
JSON error and the server keeps serving; a failing model call gets a 500 and the next request is
answered; the command serves an exported directory."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from test_export import make_student

from seqdistill.deploy.admission import Limits
from seqdistill.deploy.batching import sentence_json
from seqdistill.deploy.serve import create_app, front_matter, serve_in_thread
from seqdistill.inference import Tagger

LIMITS = Limits(max_body_bytes=4096, max_texts=8, max_text_chars=300)
TEXTS = [
    "Peter visits Paris.",
    "anna visits the rome , then paris",
    "",
    "EU rejects the peter visits anna in Rome again .",
    "zz9 xq qqqqqqq",
]
CARD = {"library_name": "seqdistill", "seqdistill": {"kind": "student", "test": {"f1": 0.5}}}


@pytest.fixture(scope="module")
def served(tiny_encoder, tmp_path_factory):
    d = make_student(tiny_encoder, tmp_path_factory.mktemp("serve") / "student", "bilstm-crf")
    (d / "README.md").write_text("---\n" + json.dumps(CARD, indent=1) + "\n---\n# a card\n")
    tagger = Tagger.load(d)
    app = create_app(tagger, d, max_batch=64, max_wait_ms=5, limits=LIMITS)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client, tagger, app.state.batcher


def expected(tagger, inputs) -> list[dict]:
    return [s.to_json() for s in tagger(inputs, scores=True)]


def same(got: list[dict], want: list[dict]) -> None:
    """Equal words, offsets, tags and spans; scores to 1e-5 (a batch's padding may move the last digits)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert {k: g[k] for k in ("text", "words", "offsets", "tags")} == {
            k: w[k] for k in ("text", "words", "offsets", "tags")
        }
        assert [{k: v for k, v in s.items() if k != "score"} for s in g["spans"]] == [
            {k: v for k, v in s.items() if k != "score"} for s in w["spans"]
        ]
        assert [s["score"] for s in g["spans"]] == pytest.approx([s["score"] for s in w["spans"]], abs=1e-5)


def test_tag_texts_and_tokens_as_the_tagger_does(served):
    client, tagger, _ = served
    r = client.post("/tag", json={"texts": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == tagger.name
    same(body["sentences"], expected(tagger, TEXTS))
    assert [sentence_json(s) for s in tagger(TEXTS)] == expected(tagger, TEXTS)  # the server's to_json
    assert any(s["spans"] for s in body["sentences"])  # random weights, but spans to compare
    for s in body["sentences"]:
        for span in s["spans"]:
            assert s["text"][span["char_start"] : span["char_end"]] == span["text"]
            assert 0 < span["score"] <= 1
    tokens = [["anna", "visits", "rome"], ["peter", "Paris", ".", "EU"]]
    r = client.post("/tag", json={"tokens": tokens})
    assert r.status_code == 200, r.text
    got = r.json()["sentences"]
    same(got, expected(tagger, tokens))
    assert got[0]["text"] == "anna visits rome" and got[0]["offsets"] == [[0, 4], [5, 11], [12, 16]]


def test_documents_are_split_and_tagged_with_offsets_into_each_document(served):
    """{"documents": [...]}: the same sentences and spans as Tagger.documents, offsets into each
    document; a blank document has no sentences; the sentences share the batcher."""
    client, tagger, batcher = served
    docs = ["Peter visits Paris. Then anna visits the rome , then paris.\n\nEU rejects it.", "   ", "zz9 xq qqqqqqq"]
    calls = batcher.stats.model_calls
    r = client.post("/tag", json={"documents": docs})
    assert r.status_code == 200, r.text
    got = r.json()["documents"]
    want = [d.to_json() for d in tagger.documents(docs)]
    assert [d["text"] for d in got] == docs
    assert [len(d["sentences"]) for d in got] == [len(d["sentences"]) for d in want] == [3, 0, 1]
    for g, w in zip(got, want):
        same(g["sentences"], w["sentences"])
        assert [s["char_start"] for s in g["spans"]] == [s["char_start"] for s in w["spans"]]
        for s in g["sentences"]:
            for (a, b), word in zip(s["offsets"], s["words"]):
                assert g["text"][a:b] == word  # offsets into the document
        for span in g["spans"]:
            assert g["text"][span["char_start"] : span["char_end"]] == span["text"]
    assert batcher.stats.model_calls == calls + 1  # one request's sentences, one model call
    r = client.post("/tag", json={"documents": [" \n "]})
    assert r.status_code == 200 and r.json()["documents"] == [{"text": " \n ", "sentences": [], "spans": []}]


def test_a_per_type_student_answers_every_span_overlapping_ones_included(tiny_encoder, tmp_path):
    """Issue 82: a student with one BILOU layer per type (paper 003) may find spans of two types over
    the same words; the answer carries every one of them (the Tagger's spans, as spaCy's span group
    has them), while the flat tags keep the outermost."""
    d = make_student(tiny_encoder, tmp_path / "nested", "rnn-tagger", extra={"cell": "sru"})
    tagger = Tagger.load(d)
    assert tagger.nested
    texts = [*TEXTS, "peter anna rome paris eu visits the peter paris rome anna eu the visits"]
    app = create_app(tagger, d, max_batch=64, max_wait_ms=5, limits=LIMITS)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        r = client.post("/tag", json={"texts": texts})
    assert r.status_code == 200, r.text
    got = r.json()["sentences"]
    same(got, expected(tagger, texts))
    overlapping = 0
    for s, spans in zip(got, tagger.predict_spans([s["words"] for s in got])):
        assert sorted((x["start"], x["end"], x["type"]) for x in s["spans"]) == sorted(spans)
        pairs = [(a, b) for i, a in enumerate(s["spans"]) for b in s["spans"][i + 1 :]]
        overlapping += sum(a["start"] < b["end"] and b["start"] < a["end"] and a["type"] != b["type"] for a, b in pairs)
    assert overlapping > 0  # the random student's types overlap somewhere, and the answer keeps both


def test_health_and_info(served):
    client, tagger, _ = served
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["model"] == tagger.name and h["queued_sentences"] == 0
    info = client.get("/info").json()
    assert info["kind"] == "student" and info["architecture"] == "bilstm-crf" and info["runtime"] == "torch"
    assert info["scheme"] == "IOB2" and info["labels"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert info["parameters"]["all"] == tagger.params > info["parameters"]["without_embeddings"] > 0
    assert info["files"]["config.json"]["arch"] == "bilstm-crf"
    assert info["card"] == CARD  # the model card's front matter
    assert info["server"] == {
        "max_batch": 64,
        "max_wait_ms": 5,
        "model_batch": 8,
        "max_queue": None,
        "max_call_chars": 20000,
        "splitter": "pysbd",
        "language": "en",
        "max_texts": 8,
        "max_body_bytes": 4096,
        "max_text_chars": 300,
        "body_timeout_s": 10.0,
        "request_timeout_s": 60.0,
    }


def test_front_matter_json_yaml_or_none(tmp_path):
    p = tmp_path / "README.md"
    p.write_text("---\nlicense: apache-2.0\ntags:\n- ner\n---\n# card\n")
    assert front_matter(p) == {"license": "apache-2.0", "tags": ["ner"]}
    p.write_text("# a README without front matter\n")
    assert front_matter(p) is None


def slow_on(tagger, monkeypatch, word: str = "slowly", seconds: float = 0.5):
    """The model sleeps on a batch holding ``word``: the requests sent meanwhile queue up."""
    decode = tagger.backend.decode

    def slow(words, *a, **k):
        if any(word in s for s in words):
            time.sleep(seconds)
        return decode(words, *a, **k)

    monkeypatch.setattr(tagger.backend, "decode", slow)


async def behind_a_busy_model(url: str, inputs: list[list[str]]) -> list[httpx.Response]:
    """Send a request that keeps the model busy, then ``inputs`` concurrently while it is."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        blocker = asyncio.create_task(c.post("/tag", json={"texts": ["slowly"]}))
        await asyncio.sleep(0.1)
        responses = await asyncio.gather(*(c.post("/tag", json={"texts": x}) for x in inputs))
        assert (await blocker).status_code == 200
        return responses


def test_concurrent_requests_share_model_calls(served, monkeypatch):
    client, tagger, batcher = served
    slow_on(tagger, monkeypatch)
    inputs = [[TEXTS[i % len(TEXTS)], f"peter visits rome number {i}"][: 1 + i % 2] for i in range(24)]
    before = client.get("/health").json()
    responses = asyncio.run(behind_a_busy_model(str(client.base_url), inputs))
    after = client.get("/health").json()
    assert [r.status_code for r in responses] == [200] * len(inputs)
    monkeypatch.undo()
    for r, x in zip(responses, inputs):
        same(r.json()["sentences"], expected(tagger, x))  # each request gets its own slice, in order
    calls = after["model_calls"] - before["model_calls"]
    assert after["requests"] - before["requests"] == len(inputs) + 1
    assert 2 <= calls <= 4, (calls, after)  # the blocker, then the 24 requests (36 sentences) in one or few calls
    assert after["largest_batch"] >= 12


def test_past_max_queue_a_request_is_shed_at_once_with_retry_after(tiny_encoder, tmp_path, monkeypatch):
    """Issue 34: behind a busy model, requests queue up to --max-queue sentences; the next one gets
    503 with Retry-After within milliseconds, the admitted ones their tags, /health the counts."""
    d = make_student(tiny_encoder, tmp_path / "student", "bilstm-crf")
    tagger = Tagger.load(d)
    app = create_app(tagger, d, max_batch=64, max_wait_ms=0, max_queue=6)
    slow_on(tagger, monkeypatch, seconds=1.0)

    async def load(url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            blocker = asyncio.create_task(c.post("/tag", json={"texts": ["slowly"]}))
            await asyncio.sleep(0.2)  # the model is busy with the blocker, its queue empty
            admitted = [asyncio.create_task(c.post("/tag", json={"texts": TEXTS[:3]})) for _ in range(2)]
            await asyncio.sleep(0.2)  # 6 sentences queued: the limit
            t0 = time.perf_counter()
            shed = await c.post("/tag", json={"texts": ["anna"]})
            waited = time.perf_counter() - t0
            big = await c.post("/tag", json={"texts": ["anna " * 1800] * 8})  # 72 KB: its body is not read
            health = (await c.get("/health")).json()
            return shed, waited, big, health, await asyncio.gather(*admitted), await blocker

    with serve_in_thread(app) as url:
        shed, waited, big, health, admitted, blocker = asyncio.run(load(url))
    assert shed.status_code == 503 and shed.headers["retry-after"] == "1"
    assert "overloaded" in shed.json()["error"] and "--max-queue" in shed.json()["error"]
    assert waited < 0.5  # answered while the model was still busy, not after it
    assert "close" not in shed.headers.get("connection", "")  # a small body was drained: the client keeps it
    assert big.status_code == 503 and big.headers["connection"] == "close"  # a large one is left unread
    assert health["shed"] == 2 and health["queued_sentences"] == 6 and health["max_queue"] == 6
    assert blocker.status_code == 200 and [r.status_code for r in admitted] == [200, 200]
    monkeypatch.undo()
    for r in admitted:
        same(r.json()["sentences"], expected(tagger, TEXTS[:3]))


def _watched(tagger, monkeypatch, seconds: float = 1.0) -> list:
    """The model sleeps on "slowly" (the blocker) and records every sentence it is given."""
    seen = []
    decode = tagger.backend.decode

    def watch(words, *a, **k):
        seen.extend(" ".join(s) for s in words)
        if any("slowly" in s for s in words):
            time.sleep(seconds)
        return decode(words, *a, **k)

    monkeypatch.setattr(tagger.backend, "decode", watch)
    return seen


def test_a_body_that_stalls_gets_a_408_within_the_deadline(tiny_encoder, tmp_path):
    """Issue 34: a body shorter than its Content-Length used to hold its request open for 15 s and more."""
    import socket

    d = make_student(tiny_encoder, tmp_path / "student", "bilstm-crf")
    app = create_app(Tagger.load(d), d, limits=Limits(body_timeout_s=0.3))
    with serve_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b'POST /tag HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"texts": [')
            sock.settimeout(5)
            t0 = time.perf_counter()
            reply = sock.recv(4096).decode()
            waited = time.perf_counter() - t0
    assert reply.startswith("HTTP/1.1 408") and "--body-timeout" in reply
    assert 0.2 < waited < 2


def test_the_work_of_a_client_that_has_gone_is_dropped(tiny_encoder, tmp_path, monkeypatch):
    """Issue 34: clients that disconnect while queued behind a busy model used to have their
    sentences run anyway; now they never reach the model."""
    d = make_student(tiny_encoder, tmp_path / "student", "bilstm-crf")
    tagger = Tagger.load(d)
    app = create_app(tagger, d, max_wait_ms=0)
    seen = _watched(tagger, monkeypatch)

    async def load(url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            blocker = asyncio.create_task(c.post("/tag", json={"texts": ["slowly"]}))
            await asyncio.sleep(0.2)
            async with httpx.AsyncClient(base_url=url, timeout=0.3) as impatient:
                with pytest.raises(httpx.ReadTimeout):
                    await impatient.post("/tag", json={"texts": ["abandoned anna"]})
            assert (await blocker).status_code == 200
            after = await c.post("/tag", json={"texts": ["anna visits rome"]})
            return after, (await c.get("/health")).json()

    with serve_in_thread(app) as url:
        after, health = asyncio.run(load(url))
    assert after.status_code == 200 and "abandoned anna" not in seen and "anna visits rome" in seen
    assert health["dropped"] == 1 and health["requests"] == 2


def test_a_request_past_its_deadline_gets_a_504_and_never_runs(tiny_encoder, tmp_path, monkeypatch):
    d = make_student(tiny_encoder, tmp_path / "student", "bilstm-crf")
    tagger = Tagger.load(d)
    app = create_app(tagger, d, max_wait_ms=0, limits=Limits(request_timeout_s=0.4))
    seen = _watched(tagger, monkeypatch)

    async def load(url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            blocker = asyncio.create_task(c.post("/tag", json={"texts": ["slowly"]}))
            await asyncio.sleep(0.1)
            late = await c.post("/tag", json={"texts": ["late peter"]})
            await blocker
            return late

    with serve_in_thread(app) as url:
        late = asyncio.run(load(url))
    assert late.status_code == 504 and "--request-timeout" in late.json()["error"]
    assert "late peter" not in seen


def test_sigterm_ends_within_the_shutdown_timeout_despite_a_stalled_upload(tiny_encoder, tmp_path):
    """Issue 34: one stalled upload used to keep SIGTERM from finishing. The real command in its own
    process: SIGTERM with an upload stalled mid-body ends it within --shutdown-timeout (and some
    margin), not at the body's own deadline."""
    import signal
    import socket
    import subprocess
    import sys

    d = make_student(tiny_encoder, tmp_path / "student", "bilstm-crf")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--model", str(d), "--port", str(port), "--shutdown-timeout", "1", "--body-timeout", "60"]
    p = subprocess.Popen([sys.executable, "-m", "seqdistill.cli.serve", *args], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("the server did not start: " + p.stderr.read1().decode())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b'POST /tag HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"texts": [')
            time.sleep(0.3)
            t0 = time.time()
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
            assert time.time() - t0 < 6
    finally:
        if p.poll() is None:
            p.kill()


class EchoTagger:
    """A stand-in Tagger: every text one word tagged O; records each call's inputs."""

    def __init__(self):
        self.calls = []

    def __call__(self, items, batch_size=32, scores=True):
        from seqdistill.inference import TaggedSentence

        self.calls.append(list(items))
        return [TaggedSentence(t, [t], [(0, len(t))], ["O"], []) for t in items]


def test_the_wait_adapts_to_the_company_requests_keep():
    """A lone client never waits for company; N steady clients form batches of N without waiting
    for the deadline; after a burst a lone request waits the deadline once."""
    from seqdistill.deploy.batching import MicroBatcher

    async def main():
        tagger = EchoTagger()
        b = MicroBatcher(tagger, max_batch=32, max_wait_ms=400)
        b.start()
        try:
            t0 = time.perf_counter()
            for i in range(5):  # one client, one request at a time
                assert await b.submit([f"lone {i}"]) == [
                    {"text": f"lone {i}", "words": [f"lone {i}"], "offsets": [[0, 6]], "tags": ["O"], "spans": []}
                ]
            lone = time.perf_counter() - t0
            t0 = time.perf_counter()
            for r in range(5):  # four clients in step
                out = await asyncio.gather(*(b.submit([f"c{k} r{r}", "x"]) for k in range(4)))
                assert [o[0]["text"] for o in out] == [f"c{k} r{r}" for k in range(4)]
            steady = time.perf_counter() - t0
            t0 = time.perf_counter()
            await b.submit(["after the burst"])
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            await b.submit(["and again"])
            second = time.perf_counter() - t0
        finally:
            await b.close()
        return tagger.calls, lone, steady, first, second

    calls, lone, steady, first, second = asyncio.run(main())
    assert [len(c) for c in calls] == [1] * 5 + [8] * 5 + [1, 1]
    assert lone < 0.3 and steady < 0.3  # never the 0.4 s deadline
    assert first >= 0.39 and second < 0.2


def test_a_large_request_goes_in_pieces_between_which_the_others_get_their_turn():
    """Issue 34: one request of many or long texts used to hold the model for its whole length; now
    each model call holds at most --max-batch sentences and --max-call-chars characters, the rest
    of a large request waits behind the requests queued after it, and every request gets its own
    results, whole and in order."""
    from seqdistill.deploy.batching import MicroBatcher

    async def main():
        tagger = EchoTagger()
        b = MicroBatcher(tagger, max_batch=4, max_wait_ms=0, max_call_chars=30)
        b.start()
        try:
            big = [f"big {i}" for i in range(10)]
            long = ["x" * 12, "y" * 12, "z" * 12]  # 36 characters: two calls
            out = await asyncio.gather(b.submit(big), b.submit(["small"]), b.submit(long))
        finally:
            await b.close()
        return tagger.calls, out

    calls, (big, small, long) = asyncio.run(main())
    assert [s["text"] for s in big] == [f"big {i}" for i in range(10)]
    assert [s["text"] for s in small] == ["small"] and [s["text"] for s in long] == ["x" * 12, "y" * 12, "z" * 12]
    assert calls == [
        ["big 0", "big 1", "big 2", "big 3"],  # a piece of the large request
        ["small"],  # the next request does not wait for the rest of it
        ["x" * 12, "y" * 12],  # 24 of 30 characters; the third would pass the limit
        ["big 4", "big 5", "big 6", "big 7"],
        ["z" * 12, "big 8", "big 9"],  # the rests of two requests fit one call together
    ]
    assert max(len(c) for c in calls) <= 4 and max(sum(map(len, c)) for c in calls) <= 30


BAD = [
    ("malformed JSON", b'{"texts": ["a"', 400, "malformed JSON"),
    ("not UTF-8", b'{"texts": ["\xff\xfe"]}', 400, "not UTF-8"),
    ("empty body", b"", 400, "empty body"),
    ("nested too deeply", b"[" * 2000 + b"]" * 2000, 400, "malformed JSON"),
    ("not an object", b'["a text"]', 422, "must be a JSON object"),
    ("no input field", b"{}", 422, "not none"),
    ("two input fields", b'{"texts": ["a"], "tokens": [["a"]]}', 422, "not texts and tokens"),
    ("a document not a string", b'{"documents": [["a"]]}', 422, "documents[0] must be a string, not a list"),
    (
        "a document sentence too long",
        json.dumps({"documents": ["Fine. " + "x" * 301]}).encode(),
        413,
        "documents[0] has a sentence of 301 characters at character 6",
    ),
    ("unknown field", b'{"text": "a"}', 422, 'did you mean "texts"'),
    ("texts not a list", b'{"texts": "a text"}', 422, '"texts" must be a list, not a string'),
    ("empty list", b'{"texts": []}', 422, '"texts" is empty'),
    ("non-string text", b'{"texts": ["a", 3]}', 422, "texts[1] must be a string, not a number"),
    ("null text", b'{"texts": [null]}', 422, "texts[0] must be a string, not null"),
    ("tokens not lists", b'{"tokens": ["a b"]}', 422, "tokens[0] must be a list of words"),
    ("non-string word", b'{"tokens": [["a"], ["b", true]]}', 422, "tokens[1][1] must be a string, not a boolean"),
    ("blank word", b'{"tokens": [["a", " "]]}', 422, "tokens[0][1] is empty or blank"),
    ("too many texts", json.dumps({"texts": ["a"] * 9}).encode(), 413, "9 inputs; the limit is 8"),
    ("text too long", json.dumps({"texts": ["a" * 301]}).encode(), 413, "texts[0] is 301 characters"),
    ("words too long", json.dumps({"tokens": [["a" * 150, "b" * 150]]}).encode(), 413, "tokens[0] is 301 characters"),
    ("oversize body", json.dumps({"texts": ["a " * 50] * 60}).encode(), 413, "the limit is 4,096"),
    # issue 34: these got a 500 and counted as failed model calls
    ("lone surrogate", b'{"texts": ["a \\ud800 b"]}', 422, "texts[0] holds a lone surrogate (\\ud800) at character 2"),
    ("lone surrogate word", b'{"tokens": [["a", "\\udfff"]]}', 422, "tokens[0][1] holds a lone surrogate"),
]


def test_an_integer_of_more_digits_than_python_converts_is_a_400_not_a_500():
    """Issue 34: json.loads raises a plain ValueError past 4,300 digits (under the default body limit)."""
    from seqdistill.deploy.admission import RequestError, parse_request

    with pytest.raises(RequestError) as e:
        parse_request(b'{"texts": [' + b"9" * 5000 + b"]}", Limits())
    assert e.value.status == 400 and "malformed JSON" in e.value.message


@pytest.mark.parametrize("content,status,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_requests_get_a_4xx_json_error(served, content, status, message):
    client, _, _ = served
    r = client.post("/tag", content=content)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert message in r.json()["error"]
    assert client.post("/tag", json={"texts": ["peter visits paris"]}).status_code == 200  # still serving


def test_oversize_chunked_body_and_wrong_routes(served):
    client, _, _ = served

    def chunks():  # no Content-Length: refused while reading
        for _ in range(100):
            yield b" " * 100

    r = client.post("/tag", content=chunks())
    assert "content-length" not in r.request.headers
    assert r.status_code == 413 and "over 4,096 bytes" in r.json()["error"]
    r = client.get("/tag")
    assert r.status_code == 405 and r.json()["error"] and "POST" in r.headers["allow"]
    r = client.post("/nowhere", json={})
    assert r.status_code == 404 and r.json()["error"]
    assert client.get("/health").json()["status"] == "ok"


def test_a_failing_model_call_gets_a_500_and_the_server_keeps_serving(served, monkeypatch):
    client, tagger, batcher = served

    def broken(words, *a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(tagger.backend, "decode", broken)
    r = client.post("/tag", json={"texts": ["peter visits paris"]})
    assert r.status_code == 500 and "RuntimeError: boom" in r.json()["error"]
    monkeypatch.undo()
    r = client.post("/tag", json={"texts": ["peter visits paris"]})
    assert r.status_code == 200 and r.json()["sentences"][0]["words"] == ["peter", "visits", "paris"]


def test_a_poisoned_request_fails_alone_in_a_batch(served, monkeypatch):
    client, tagger, batcher = served
    slow_on(tagger, monkeypatch)
    decode = tagger.backend.decode

    def poisoned(words, *a, **k):
        if any("poison" in w for s in words for w in s):
            raise ValueError("poisoned input")
        return decode(words, *a, **k)

    monkeypatch.setattr(tagger.backend, "decode", poisoned)
    inputs = [["peter visits paris"], ["anna poison rome"], ["the eu", "rome"], ["anna visits rome"]]
    before = client.get("/health").json()
    responses = asyncio.run(behind_a_busy_model(str(client.base_url), inputs))
    after = client.get("/health").json()
    monkeypatch.undo()
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert "ValueError: poisoned input" in responses[1].json()["error"]
    for i in (0, 2, 3):
        same(responses[i].json()["sentences"], expected(tagger, inputs[i]))
    # the batch of four failed, then each ran alone: the poisoned one failed again
    assert after["failed_calls"] - before["failed_calls"] == 2
    assert after["model_calls"] - before["model_calls"] == 1 + 1 + 4


def test_the_command_serves_an_exported_directory(tiny_encoder, tmp_path, monkeypatch):
    """distill-serve's options reach the app; uvicorn.run is replaced by the same server in a
    thread (a subprocess would spend seconds importing torch; benchmarks/serve_load.py runs
    ``python -m seqdistill.cli.serve``)."""
    import uvicorn
    from click.testing import CliRunner

    from seqdistill.cli.serve import serve_main
    from seqdistill.deploy.export import export_model

    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    out = export_model(src, tmp_path / "onnx")
    seen = {}

    def run(app, host, port, **kw):
        seen.update(host=host, port=port, **kw)
        with serve_in_thread(app) as url:
            info = httpx.get(url + "/info").json()
            seen["info"] = info
            seen["tag"] = httpx.post(url + "/tag", json={"texts": TEXTS})

    monkeypatch.setattr(uvicorn, "run", run)
    args = ["--model", str(out), "--port", "9999", "--max-batch", "4", "--max-texts", "5", "--threads", "1"]
    r = CliRunner().invoke(serve_main, args)
    assert r.exit_code == 0, r.output
    assert seen["host"] == "127.0.0.1" and seen["port"] == 9999 and seen["access_log"] is False
    info = seen["info"]
    assert info["runtime"] == "onnx" and info["kind"] == "student" and info["architecture"] == "bilstm-crf"
    assert info["files"]["export.json"]["decoder"] == "crf" and info["labels"][0] == "O"
    assert info["server"]["max_batch"] == 4 and info["server"]["max_texts"] == 5
    assert seen["tag"].status_code == 200, seen["tag"].text
    same(seen["tag"].json()["sentences"], expected(Tagger.load(out), TEXTS))


def test_the_command_refuses_a_missing_directory(tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.serve import serve_main

    r = CliRunner().invoke(serve_main, ["--model", str(tmp_path / "none")])
    assert r.exit_code != 0 and "no such model directory" in r.output
    r = CliRunner().invoke(serve_main, ["--model", str(tmp_path), "--max-batch", "0"])
    assert r.exit_code != 0 and "--max-batch" in r.output
