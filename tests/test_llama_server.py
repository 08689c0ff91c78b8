"""The server teacher against the real thing (issue 55): llama.cpp's OpenAI-compatible server
(llama-cpp-python, ``make llama-server``) started on loopback with a tiny Llama GGUF that this test
writes with the ``gguf`` package (a byte-level BPE vocabulary whose words are one token each, and
``<unusedN>`` sentinels), read locally by transformers' GGUF loader as the in-context teacher.

``make test-llama-server`` builds the server's environment and runs this file; it is skipped when
``LLAMA_SERVER_PYTHON`` (the Python of that environment) is not set. It checks what only a real
server shows: that its tokenization of the rendered prompts is the teacher's, that echo scores
give the local search's paths and distributions, that a build and the sentscore recipe run
through it, and that a cache built again after a kill asks the server nothing it answered before.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from test_gguf import write_llama_gguf

PYTHON = os.environ.get("LLAMA_SERVER_PYTHON")
pytestmark = pytest.mark.skipif(not PYTHON, reason="LLAMA_SERVER_PYTHON is not set (make test-llama-server sets it)")

WORDS = ["anna", "visits", "rome", "peter", "paris", "the", "eu", "PER", "LOC", "O", "I"]
CONLL = "".join(f"{a} B-PER\nvisits O\n{c} B-LOC\n\n" for a, c in [("anna", "paris"), ("peter", "rome")] * 3)
SENTENCES = [["anna", "visits", "rome"], ["peter"], ["the", "eu", "visits", "paris", "anna"], ["rome", "rome"]]


def write_tiny_gguf(path, seed: int = 0) -> None:
    """A 2-layer Llama of width 32 with random weights (``test_gguf.write_llama_gguf``), and a
    byte-level BPE vocabulary in which every word above is one token (its merges letter by letter);
    ``<unusedN>`` are control tokens."""
    write_llama_gguf(path, _bpe_vocabulary, hidden=32, heads=4, kv_heads=2, ffn=64, seed=seed, std=0.3, context=512)


def _bpe_vocabulary(w) -> int:
    tokens = ["<unk>", "<s>", "</s>", "<pad>", *(f"<unused{i}>" for i in range(12)), "Ċ"]
    tokens += sorted(set("".join(WORDS)))
    merges = []
    for word in WORDS:
        cur = word[0]
        for c in word[1:]:
            if cur + c not in tokens:
                tokens.append(cur + c)
                merges.append(f"{cur} {c}")
            cur += c
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([2, 3, 3, 3] + [3] * 12 + [1] * (len(tokens) - 16))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(3)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    return len(tokens)


@contextmanager
def llama_server(python: str, gguf_path, log_path, n_ctx: int = 512, alias: str = "tiny"):
    """llama.cpp's server (llama-cpp-python, run by ``python``) on a free loopback port, every
    logit kept (echo needs them); yields its API's base URL once ``/models`` answers (at most 5
    minutes), and stops it after the block."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [python, "-m", "llama_cpp.server", "--model", str(gguf_path), "--model_alias", alias]
    args += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--logits_all", "true"]
    log = open(log_path, "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the server exited: {Path(log_path).read_text()[-2000:]}") from None
                time.sleep(0.5)
        else:
            raise RuntimeError("the server did not start within 5 minutes")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the GGUF file, the server's base URL), the server stopped at the end."""
    d = tmp_path_factory.mktemp("llama-server")
    gguf_path = d / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    with llama_server(PYTHON, gguf_path, d / "server.log") as base:
        yield gguf_path, base


def _teachers(gguf_path, base, tmp_path, n_demos=4):
    from seqdistill.corpora import derive_label_schema, read_corpus
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.endpoint import EndpointConfig
    from seqdistill.teachers.prompted import make_in_context_teacher, make_server_teacher

    (tmp_path / "demos.txt").write_text(CONLL)
    pool = read_corpus(tmp_path / "demos.txt", "demos", "train")
    schema, [pool] = derive_label_schema([pool], "sBIO")
    quiet = dict(log=lambda *a: None)
    make_in_context_teacher(str(gguf_path), pool, schema, n_demos, 1, tmp_path / "local", **quiet)
    cfg = EndpointConfig(base, "tiny", max_concurrency=1, retries=2)  # llama-cpp-python serves one request at a time
    make_server_teacher(cfg, str(gguf_path), pool, schema, n_demos, 1, tmp_path / "served", **quiet)
    return load_teacher(tmp_path / "local"), load_teacher(tmp_path / "served")


def test_the_real_server_scores_as_the_local_in_context_teacher(served, tmp_path):
    """Same 1-best paths; per-word distributions within llama.cpp's arithmetic of the local fp32."""
    local, server = _teachers(*served, tmp_path)
    want, got = local.outputs(SENTENCES), server.outputs(SENTENCES)
    same = [
        torch.equal(got.kbest_paths[b, 0, : len(w)], want.kbest_paths[b, 0, : len(w)]) for b, w in enumerate(SENTENCES)
    ]
    assert sum(same) / len(same) >= 0.95
    p, q = torch.softmax(want.logits, -1), torch.exp(got.logits)
    tv = 0.5 * (p - q).abs().sum(-1)[want.word_mask]
    assert float(tv.max()) < 0.01  # total variation, per word


def test_a_build_through_the_server_resumes_from_its_answers_and_trains_a_student(served, tmp_path):
    """A cache built through the server; the same build again after the cache is lost runs with
    the server unreachable (every answer from the journal); the sentscore recipe trains on it."""
    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.cli.train import main as train_cli

    gguf_path, base = served
    _teachers(gguf_path, base, tmp_path)
    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris\nthe eu\n")
    args = ["build", "--teacher", str(tmp_path / "served"), "--teacher-id", "srv", "--device", "cpu"]
    args += ["--labelled", f"toy={tmp_path / 'demos.txt'}@train", "--labelled", f"toy={tmp_path / 'demos.txt'}@dev"]
    args += ["--unlabelled", f"raw={tmp_path / 'raw.txt'}"]
    r = CliRunner().invoke(cache_cli, [*args, "--out", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    assert verify_cache(str(tmp_path / "cache")) == []
    decoding = CacheReader(str(tmp_path / "cache")).manifest.teachers["srv"].decoding
    assert decoding["algorithm"] == "sentscore-server" and "echo" in decoding["approximates"]
    answers = (tmp_path / "served" / "answers.jsonl").read_text().splitlines()
    meta = json.loads((tmp_path / "served" / "teacher.json").read_text())
    meta["server"]["url"] = "http://127.0.0.1:9/v1"  # nothing listens there: any request would fail
    (tmp_path / "served" / "teacher.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(cache_cli, [*args, "--out", str(tmp_path / "again")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "served" / "answers.jsonl").read_text().splitlines() == answers
    reader, again = CacheReader(str(tmp_path / "cache")), CacheReader(str(tmp_path / "again"))

    def digests(r):
        return [f.sha256 for s in r.manifest.layers["srv"].shards for f in s.files]

    assert digests(reader) == digests(again)  # the same shards, from the journal alone
    student = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "student"), "--recipe", "sentscore"]
    r = CliRunner().invoke(train_cli, [*student, "--epochs", "2", "--embedding-dim", "16", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "student" / "training.json").exists()
