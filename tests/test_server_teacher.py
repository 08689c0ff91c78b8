"""The server teacher (issue 55): the endpoint protocol's edge cases against a fake server on
loopback (429 and 5xx with Retry-After, timeouts, truncated JSON, a wrong key), the journal that
makes a killed run ask nothing twice, and the teacher's echo scoring against the local in-context
search, with a fake server that scores text with the same tiny model."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from test_in_context import CONLL_DEMOS, base_lm  # noqa: F401
from test_sentscore_causal import tokenizer  # noqa: F401

from seqdistill.teachers.endpoint import Answers, Endpoint, EndpointConfig, EndpointError


class FakeServer:
    """``/v1/completions`` on loopback; ``reply(body) -> (status, headers, bytes)`` decides each answer."""

    def __init__(self, reply):
        self.reply, self.requests = reply, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                status, headers, data = outer.reply(body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


OK = json.dumps({"choices": [{"text": "x"}], "usage": {"prompt_tokens": 1}}).encode()


def _endpoint(server, tmp_path, sleeps, **cfg):
    config = EndpointConfig(server.url, "m", **{"retries": 3, "timeout": 5.0, **cfg})
    return Endpoint(config, Answers(tmp_path / "answers.jsonl"), sleep=sleeps.append)


@pytest.mark.parametrize(
    "first, waits",
    [
        ((429, {"Retry-After": "2"}, b"slow down"), [2.0]),  # the server's own wait
        ((503, {}, b"overloaded"), [0.5]),  # back-off
        ((200, {}, b'{"choices": [{"te'), [0.5]),  # a body cut short
        ((500, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, b"oops"), [0.5]),  # a date: back-off
    ],
)
def test_retried_answers_wait_as_told_then_succeed(tmp_path, first, waits):
    answers = iter([first, (200, {}, OK)])
    server = FakeServer(lambda body: next(answers))
    sleeps = []
    try:
        assert _endpoint(server, tmp_path, sleeps).complete({"prompt": "a"})["choices"][0]["text"] == "x"
    finally:
        server.close()
    assert sleeps == waits and len(server.requests) == 2


def test_a_server_that_keeps_failing_gets_a_clear_error_after_the_retries(tmp_path):
    server = FakeServer(lambda body: (502, {}, b"bad gateway"))
    sleeps = []
    try:
        with pytest.raises(EndpointError, match=r"HTTP 502: bad gateway, after 4 tries; is the server up"):
            _endpoint(server, tmp_path, sleeps).complete({"prompt": "a"})
    finally:
        server.close()
    assert sleeps == [0.5, 1.0, 2.0] and len(server.requests) == 4
    assert not (tmp_path / "answers.jsonl").exists()  # nothing half-written


def test_a_slow_server_times_out_and_is_asked_again(tmp_path):
    calls = []

    def reply(body):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.0)
        return 200, {}, OK

    server = FakeServer(reply)
    sleeps = []
    try:
        assert _endpoint(server, tmp_path, sleeps, timeout=0.3).complete({"prompt": "a"})["choices"]
    finally:
        server.close()
    assert sleeps == [0.5] and len(calls) == 2


def test_a_refused_request_is_not_retried_and_names_the_model_and_key(tmp_path):
    server = FakeServer(lambda body: (401, {}, b'{"error": "invalid api key"}'))
    try:
        with pytest.raises(EndpointError, match=r"HTTP 401: .*invalid api key.*--model 'm'.*\$OPENAI_API_KEY"):
            _endpoint(server, tmp_path, []).complete({"prompt": "a"})
    finally:
        server.close()
    assert len(server.requests) == 1


def test_a_server_that_is_down_names_the_endpoint(tmp_path):
    config = EndpointConfig("http://127.0.0.1:9/v1", "m", retries=1, timeout=1.0)
    with pytest.raises(EndpointError, match=r"127.0.0.1:9/v1/completions: connection failed"):
        Endpoint(config, Answers(tmp_path / "a.jsonl"), sleep=lambda s: None).complete({"prompt": "a"})


def test_the_journal_answers_without_asking_and_survives_a_cut_last_line(tmp_path):
    server = FakeServer(lambda body: (200, {}, OK))
    try:
        first = _endpoint(server, tmp_path, [])
        first.complete({"prompt": "a"})
        first.complete({"prompt": "b"})
        assert len(server.requests) == 2
        again = _endpoint(server, tmp_path, [])
        again.complete({"prompt": "a"})
        again.complete({"prompt": "b"})
        assert len(server.requests) == 2 and again.asked == 0  # nothing asked twice
        path = tmp_path / "answers.jsonl"
        path.write_bytes(path.read_bytes()[:-7])  # a kill in the middle of the last line
        cut = _endpoint(server, tmp_path, [])
        cut.complete({"prompt": "a"})
        cut.complete({"prompt": "b"})
        assert len(server.requests) == 3  # only the cut answer is asked again
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join([lines[0], b"{not json", *lines[1:]]))
        with pytest.raises(EndpointError, match=r"answers.jsonl:2: not an answer line"):
            _endpoint(server, tmp_path, [])
    finally:
        server.close()


# -- the teacher against a fake server that scores with the local model -------------------------


def _echo_server(model, tokenizer, broken=None):  # noqa: F811
    """Answers echo requests as the OpenAI protocol has them: the prompt's tokens (BOS first), each
    token's log-probability (None for the first), then one generated token; ``broken()`` gives a
    function that spoils each answer (None: none)."""

    def reply(body):
        ids = tokenizer(body["prompt"])["input_ids"]  # the tokenizer adds <bos>, as the server does
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        scores = [None] + [logp[j - 1, ids[j]].item() for j in range(1, len(ids))] + [-0.1]
        answer = {
            "choices": [{"text": "x", "logprobs": {"token_logprobs": scores, "tokens": ["t"] * len(scores)}}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 1},
        }
        spoil = broken() if broken else None
        if spoil:
            answer = spoil(answer)
        return 200, {}, json.dumps(answer).encode()

    return FakeServer(reply)


def _teachers(base_lm, tokenizer, tmp_path, server_url, holder, n_demos=3):  # noqa: F811
    from seqdistill.corpora import derive_label_schema, read_corpus
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.prompted import make_in_context_teacher, make_server_teacher

    (tmp_path / "demos.txt").write_text(CONLL_DEMOS)
    pool = read_corpus(tmp_path / "demos.txt", "demos", "train")
    schema, [pool] = derive_label_schema([pool], "sBIO")
    quiet = dict(log=lambda *a: None)
    make_in_context_teacher(str(base_lm), pool, schema, n_demos, 1, tmp_path / "local", **quiet)
    local = load_teacher(tmp_path / "local")
    holder["model"] = local.model  # what the fake server scores with
    cfg = EndpointConfig(server_url, "tiny", max_concurrency=4, retries=0)
    make_server_teacher(cfg, str(base_lm), pool, schema, n_demos, 1, tmp_path / "served", **quiet)
    return local, load_teacher(tmp_path / "served")


SENTENCES = [["anna", "visits", "rome"], ["peter"], ["the", "eu", "visits", "paris", "anna"]]


def test_the_server_teacher_scores_as_the_local_in_context_search(base_lm, tokenizer, tmp_path):  # noqa: F811
    """Same paths, beam scores, renormalised tag scores and gold NLL as the local search; one
    request per allowed tag and word, none for tags sBIO forbids, none again from a new process."""
    from seqdistill.teachers import load_teacher

    holder = {}
    server = _echo_server(_LazyModel(lambda: holder["model"]), tokenizer)
    try:
        local, served = _teachers(base_lm, tokenizer, tmp_path, server.url, holder)
        tags = torch.full((3, 5), -1, dtype=torch.long)
        tags[0, :3] = torch.tensor(local.schema.encode(["PER", "O", "LOC"]))
        want = local.outputs(SENTENCES, tags)
        got = served.outputs(SENTENCES, tags)
        assert torch.equal(got.kbest_paths, want.kbest_paths[:, :1])
        torch.testing.assert_close(got.kbest_log_probs, want.kbest_log_probs[:, :1], atol=1e-4, rtol=0)
        valid = want.word_mask[..., None]
        renormalised = torch.log_softmax(want.logits, -1)
        finite = torch.isfinite(renormalised) & valid
        assert torch.equal(torch.isfinite(got.logits) & valid, finite)
        torch.testing.assert_close(got.logits[finite], renormalised[finite], atol=1e-4, rtol=0)
        torch.testing.assert_close(got.gold_nll[:1], want.gold_nll[:1], atol=1e-3, rtol=0)
        assert torch.isnan(got.gold_nll[1:]).all()
        n_tags, outside = len(local.schema.tags), local.schema.tags.index("O")
        expected = 2  # the probe that found the alignment (align_echo), the gold target of the labelled row
        for b, words in enumerate(SENTENCES):
            path = want.kbest_paths[b, 0, : len(words)].tolist()
            expected += sum(n_tags - (i == 0 or path[i - 1] == outside) for i in range(len(words)))  # I not allowed
        assert len(server.requests) == expected
        again = load_teacher(tmp_path / "served").outputs(SENTENCES, tags)  # a new process: the journal answers
        assert len(server.requests) == expected and torch.equal(again.kbest_paths, got.kbest_paths)
    finally:
        server.close()


class _LazyModel:
    """The local teacher's model, known only once the teacher is made (the server starts first)."""

    def __init__(self, get):
        self.get = get

    def __call__(self, **kw):
        return self.get()(**kw)


@pytest.mark.parametrize(
    "broken, match",
    [
        (lambda a: {**a, "usage": {"prompt_tokens": a["usage"]["prompt_tokens"] + 1}}, "does not serve the model"),
        (lambda a: {"choices": [{"text": "x"}], "usage": a["usage"]}, "without choices"),
        (
            lambda a: {**a, "choices": [{"logprobs": {"token_logprobs": [None, "x"] * 40}}]},
            "malformed log-probabilities",
        ),
    ],
)
def test_a_malformed_answer_names_the_sentence_and_writes_nothing(base_lm, tokenizer, tmp_path, broken, match):  # noqa: F811
    holder = {}
    server = _echo_server(_LazyModel(lambda: holder["model"]), tokenizer, lambda: holder.get("broken"))
    try:
        local, served = _teachers(base_lm, tokenizer, tmp_path, server.url, holder)
        holder["broken"] = broken  # once the teacher is made (its probe answered well)
        kept = (tmp_path / "served" / "answers.jsonl").read_text()
        with pytest.raises(EndpointError, match=match) as e:
            served.outputs([["anna", "visits", "rome"]])
        assert "the sentence 'anna visits rome'" in str(e.value)
        assert (tmp_path / "served" / "answers.jsonl").read_text() == kept  # the malformed answer is not kept
    finally:
        server.close()


def test_a_server_that_serves_another_model_is_refused_when_the_teacher_is_made(base_lm, tokenizer, tmp_path):  # noqa: F811
    """The probe scored by a different model (another seed): no alignment follows the local
    model's log-probabilities, so nothing is made (no directory, no staging left)."""
    from test_sentscore_causal import _gemma3

    torch.manual_seed(7)
    other = _gemma3(len(tokenizer), sliding_window=24)
    for p in other.parameters():
        torch.nn.init.normal_(p, std=0.5)
    server = _echo_server(other, tokenizer)
    try:
        with pytest.raises(EndpointError, match="do not follow the local model's"):
            _teachers(base_lm, tokenizer, tmp_path, server.url, {})
    finally:
        server.close()
    assert not (tmp_path / "served").exists() and not (tmp_path / "served.partial").exists()
