"""The server teacher against the local in-context teacher (issue 55), on the same model and the
same demonstrations: llama.cpp's server started on loopback with a GGUF file, a server teacher
made from the same pool, count and seed as the in-context teacher, both run over the first N
CoNLL-2003 test sentences.

    LLAMA_SERVER_PYTHON=.venv-llama/bin/python .venv/bin/python benchmarks/server_teacher.py \\
        --gguf .data/gemma/gemma-3-270m-q4_k_m.gguf --teacher .data/in-context-conll/icl-20 \\
        --pool .data/in-context-conll/split/gold_train.txt [--sentences 30] [--out .data/server-teacher.json]

``--tiny``: instead, the tiny Llama of ``tests/test_llama_server.py`` (random weights, a 63-token
vocabulary) quantized to Q4_0 by llama.cpp, served, and read locally (dequantized to fp32) as the
in-context teacher with 4 demonstrations: ``--sentences`` random sentences of its words (seeded).
What it measures is the effect of the server's quantized arithmetic on the 1-best paths and the
distributions, at a cost that fits a CPU.

Prints and writes: the server teacher's sentences/s (every request asked, none from its journal:
a new directory each run), the local teacher's, the share of sentences whose 1-best paths are
identical, and the mean (and largest) total-variation distance between their per-word tag
distributions (the local scores softmaxed, the server's renormalised log-probabilities exponentiated).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # --tiny: the tiny GGUF of tests/test_llama_server.py
TINY_WORDS = ["anna", "visits", "rome", "peter", "paris", "the", "eu"]

from sentscore_throughput import conll_test  # noqa: E402
from test_llama_server import llama_server  # noqa: E402

from seqdistill.corpora import derive_label_schema, read_corpus  # noqa: E402
from seqdistill.teachers import load_teacher  # noqa: E402
from seqdistill.teachers.endpoint import EndpointConfig  # noqa: E402
from seqdistill.teachers.prompted import make_server_teacher  # noqa: E402

QUANTIZE = """import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
"""


def tiny(python: str, work: Path, quantize: bool = True) -> tuple[str, str, str]:
    """The tiny Llama of the tests, quantized to Q4_0 by llama.cpp, and an in-context teacher over
    it (4 demonstrations): (the GGUF file, the teacher directory, the demonstrations' pool)."""
    from test_llama_server import CONLL, write_tiny_gguf

    from seqdistill.teachers.prompted import make_in_context_teacher

    write_tiny_gguf(work / "tiny-f32.gguf")
    model = work / ("tiny-q4_0.gguf" if quantize else "tiny-f32.gguf")
    if quantize:
        subprocess.run([python, "-c", QUANTIZE, str(work / "tiny-f32.gguf"), str(model)], check=True)
    (work / "pool.txt").write_text(CONLL)
    pool = read_corpus(work / "pool.txt", "demos", "train")
    schema, [pool] = derive_label_schema([pool], "sBIO")
    make_in_context_teacher(str(model), pool, schema, 4, 13, work / "icl")
    return str(model), str(work / "icl"), str(work / "pool.txt")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf")
    ap.add_argument("--teacher", help="the in-context teacher directory to compare with")
    ap.add_argument("--pool", help="the labelled file its demonstrations were drawn from")
    ap.add_argument("--tiny", action="store_true", help="the tiny Llama, quantized to Q4_0 (module docstring)")
    ap.add_argument("--f32", action="store_true", help="with --tiny: served unquantized (the protocol alone)")
    ap.add_argument("--sentences", type=int, default=30)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--out", default=str(ROOT / ".data" / "server-teacher.json"))
    args = ap.parse_args()
    python = os.environ.get("LLAMA_SERVER_PYTHON") or str(ROOT / ".venv-llama" / "bin" / "python")
    work = Path(tempfile.mkdtemp(prefix="seqdistill-server-"))
    if args.tiny:
        args.gguf, args.teacher, args.pool = tiny(python, work, quantize=not args.f32)
    local = load_teacher(args.teacher)
    record = local.in_context
    pool = read_corpus(args.pool, "demos", "train")
    schema, [pool] = derive_label_schema([pool], "sBIO")
    spans = local._spans
    if args.tiny:
        rng = random.Random(0)
        sentences = [[rng.choice(TINY_WORDS) for _ in range(rng.randint(1, 8))] for _ in range(args.sentences)]
    else:
        test = [s.words for s in read_corpus(conll_test(), "test", "test").sentences]
        sentences = [w for w in test if len(spans(w)) == 1][: args.sentences]
    with llama_server(python, args.gguf, work / "server.log", args.n_ctx, alias="served") as base:
        cfg = EndpointConfig(base, "served", max_concurrency=1)  # llama-cpp-python serves one request at a time
        n = record["demonstrations"] if record.get("seed") is not None else None
        make_server_teacher(cfg, args.gguf, pool, schema, n, record.get("seed") or 13, work / "served")
        served = load_teacher(work / "served")
        assert served.demonstrations == local.demonstrations, "not the same demonstrations"
        t = time.perf_counter()
        got = [served.outputs([w]) for w in sentences]
        server_s = time.perf_counter() - t
        requests = served.endpoint.asked
    t = time.perf_counter()
    want = [local.outputs([w], k=1) for w in sentences]
    local_s = time.perf_counter() - t
    same, tvs = 0, []
    for w, g, h in zip(sentences, got, want):
        n_words = len(w)
        same += torch.equal(g.kbest_paths[0, 0, :n_words], h.kbest_paths[0, 0, :n_words])
        p, q = torch.softmax(h.logits[0, :n_words], -1), torch.exp(g.logits[0, :n_words])
        tvs += (0.5 * (p - q).abs().sum(-1)).tolist()
    result = {
        "sentences": len(sentences),
        "words": sum(len(w) for w in sentences),
        "demonstrations": len(local.demonstrations),
        "server_sentences_per_s": len(sentences) / server_s,
        "server_requests": requests,
        "local_sentences_per_s": len(sentences) / local_s,
        "identical_paths": same / len(sentences),
        "mean_tv": sum(tvs) / len(tvs),
        "max_tv": max(tvs),
        "echo_offset": served.endpoint_cfg.echo_offset,
        "model": os.path.basename(args.gguf),
        "threads": torch.get_num_threads(),
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
