"""Tiny corpora and caches made in the test, with every kind of field."""

from __future__ import annotations

import os
import random
import string
from pathlib import Path

import numpy as np
import pytest
import torch

from seqdistill.cache_schema import CacheWriter, FieldSpec, TeacherInfo
from seqdistill.corpora import derive_label_schema, read_corpus

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""

RAW = """The quick brown fox .
Jumps over the lazy dog in Paris .

A third sentence here .
"""

T, H = 9, 6  # tags of the fixture schema (IOB2 over LOC MISC ORG PER) and hidden size


@pytest.fixture
def corpus_files(tmp_path):
    conll = tmp_path / "train.txt"
    conll.write_text(CONLL)
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW)
    return conll, raw


@pytest.fixture
def corpora(corpus_files):
    conll, raw = corpus_files
    train = read_corpus(conll, "conll", "train")
    wiki = read_corpus(raw, "wiki", "unlabelled", labelled=False)
    schema, converted = derive_label_schema([train, wiki])
    return schema, converted


TEACHER_FIELDS = [
    FieldSpec("kbest_paths", "example", "int16", ("k", "words")),
    FieldSpec("kbest_logprob", "example", "float32", ("k",)),
    FieldSpec("log_z", "example", "float32"),
    FieldSpec("gold_nll", "example", "float32", nullable=True),
    FieldSpec("logits", "word", "float16", (T,), storage="zarr"),
    FieldSpec("marginals", "word", "float32", (T,), storage="zarr"),
    FieldSpec("hidden_1", "word", "bfloat16", (H,), storage="zarr"),
    FieldSpec("subword_word_ids", "subword", "int32", (), storage="zarr"),
    FieldSpec("subword_logits", "subword", "float32", (T,), storage="zarr"),
]


def make_teacher(tid: str = "tiny", weights: str = "a" * 64) -> TeacherInfo:
    return TeacherInfo(tid, "crf", {"weights": weights, "tokenizer": "b" * 64}, {"k": 3}, [1], "first")


def teacher_columns(rows: list[dict], seed: int = 0) -> dict:
    """Random but deterministic teacher outputs for the example rows of a shard."""
    rng = np.random.default_rng(seed)
    cols = {f.name: [] for f in TEACHER_FIELDS}
    cols["example_id"] = [r["example_id"] for r in rows]
    for r in rows:
        n = r["n_words"]
        cols["kbest_paths"].append(rng.integers(0, T, size=(3, n)).tolist())
        lp = np.sort(rng.normal(size=3))[::-1] - 2
        cols["kbest_logprob"].append(lp.astype(np.float32))
        cols["log_z"].append(float(rng.normal()))
        cols["gold_nll"].append(None if r["tags"] is None else float(rng.random()))
        cols["logits"].append(rng.normal(size=(n, T)).astype(np.float32))
        cols["marginals"].append(rng.dirichlet(np.ones(T), size=n).astype(np.float32))
        cols["hidden_1"].append(rng.normal(size=(n, H)).astype(np.float32))
        subs = rng.integers(1, 3, size=n)
        cols["subword_word_ids"].append(np.repeat(np.arange(n), subs).astype(np.int32))
        cols["subword_logits"].append(rng.normal(size=(int(subs.sum()), T)).astype(np.float32))
    return cols


def all_rows(corpora) -> list[dict]:
    return [row for c in corpora for row in c.example_rows()]


def shard_rows(rows: list[dict], shard_size: int) -> list[list[dict]]:
    return [rows[i : i + shard_size] for i in range(0, len(rows), shard_size)]


def examples_columns(rows: list[dict]) -> dict:
    return {k: [r[k] for r in rows] for k in rows[0]}


def build_cache(
    url, schema, corpora, shard_size: int = 2, teacher: TeacherInfo | None = None, storage_options=None, seed: int = 0
):
    """Write the examples layer and one teacher layer; return (manifest, rows per shard, teacher cols)."""
    teacher = teacher or make_teacher()
    shards = shard_rows(all_rows(corpora), shard_size)
    w = CacheWriter(url, storage_options)
    ex = w.examples_layer(schema, [c.info() for c in corpora], len(shards))
    for i, rows in enumerate(shards):
        if not ex.is_committed(i):
            ex.write_shard(i, examples_columns(rows))
    tl = w.teacher_layer(teacher, TEACHER_FIELDS)
    tcols = []
    for i, rows in enumerate(shards):
        cols = teacher_columns(rows, seed + i)
        tcols.append(cols)
        if not tl.is_committed(i):
            tl.write_shard(i, cols)
    return w.commit(), shards, tcols


@pytest.fixture(scope="session")
def glove_dir(tmp_path_factory):
    """A directory of word vectors as the GloVe package's (a ``.npy`` matrix and its word list):
    ten words of the toy corpora and some they lack, 6 random dimensions."""
    d = tmp_path_factory.mktemp("vectors")
    words = ["the", "peter", "paris", "rome", "anna", "visits", "berlin", "madrid", "london", "oslo"]
    np.save(d / "v.npy", np.random.default_rng(0).normal(size=(len(words), 6)).astype(np.float32))
    (d / "w.txt").write_text("\n".join(words) + "\n")
    return d


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    from transformers import BertConfig, BertModel, BertTokenizer

    d = tmp_path_factory.mktemp("tiny-bert")
    chars = string.ascii_lowercase + string.digits
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *chars,
        ".",
        ",",
        "-",
        *("##" + c for c in chars),
        "the",
        "eu",
        "peter",
        "paris",
        "rome",
        "anna",
        "visits",
        "##s",
    ]
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(d)
    return str(d)


def toy_corpus(path, n, seed, labelled=True):
    """n sentences "NAME visits [the ...] CITY" in CoNLL (or raw text when not labelled)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        name, city = rng.choice(["peter", "anna"]), rng.choice(["paris", "rome"])
        extra = ["the"] * rng.randint(0, 4)
        sent = [(name, "B-PER"), ("visits", "O"), *[(w, "O") for w in extra], (city, "B-LOC")]
        lines += [f"{w} {t}" for w, t in sent] + [""] if labelled else [" ".join(w for w, _ in sent)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def toy_cache(encoder: str, d, **build) -> str:
    """A cache of a tiny CRF teacher (IOB2 over LOC, PER) over toy train/dev/unlabelled corpora,
    whose teacher directory is deleted afterwards: stage two must not need it."""
    import shutil

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.teachers import build_teacher

    build_teacher(encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(d / "teacher")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 60, 0), "train", True),
        CorpusSpec("toy", toy_corpus(d / "dev.txt", 20, 1), "dev", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 40, 2, labelled=False), "unlabelled", False),
    ]
    build_cache(
        str(d / "cache"),
        str(d / "teacher"),
        specs,
        BuildConfig(device="cpu", **build),
        teacher_id="tiny",
        log=lambda *a: None,
    )
    shutil.rmtree(d / "teacher")
    return str(d / "cache")


def launched_env(tmp_path, **env: str) -> dict:
    """The environment of a process a test launches (torchrun and its ranks, a CLI killed on
    purpose): this one's with ``env``, and TMPDIR a folder of the test's own ``tmp_path``, so that
    what the process leaves in the temporary directory goes with the test's folder: torchrun's
    ``torchelastic_*`` log folders, which the launcher never removes, and the temporary folders of
    a process killed by SIGKILL."""
    scratch = Path(tmp_path) / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch), **env}


def _own_progress_bar_lock() -> None:
    """Give a forked child tqdm locks of its own. tqdm's default write lock is a multiprocessing
    semaphore created in the parent and shared across the fork: a child killed by SIGKILL while it
    holds it (the monitor thread of its progress bars takes it every 10 seconds) left the parent's next
    progress bar waiting for ever (seen once, 2026-11-27: test_reliability's seeded kills, a
    teacher loading in the parent, under a CPU-bound job beside the suite). A thread lock in each
    tqdm class is enough in a child, which draws its bars alone."""
    import threading

    from tqdm import std

    classes = [std.tqdm]
    while classes:
        cls = classes.pop()
        cls.set_lock(threading.RLock())
        classes += cls.__subclasses__()


def in_child(fn, env: dict) -> int:
    """Run ``fn()`` in a forked child with ``env`` added; return its exit code (-9: killed)."""
    import multiprocessing
    import os

    def target():
        os.environ.update(env)
        torch.set_num_threads(1)  # as DataLoader workers do: no OpenMP pool across the fork
        _own_progress_bar_lock()
        fn()

    p = multiprocessing.get_context("fork").Process(target=target)
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        pytest.fail("the child run hung")
    return p.exitcode


def resumes_and_runs_under_torchrun(recipe: str, cache: str, options: dict, tmp_path, kill_at: int) -> None:
    """Issue 20, for one recipe: a run killed by SIGKILL after optimiser step ``kill_at`` and
    started again with the same command ends with bit-identical weights and the same records;
    under torchrun with 2 ranks the same run trains to the end, each rank on its part of the data
    (fewer optimiser steps than one process takes over the whole of it)."""
    import json
    import socket
    import subprocess
    import sys

    import tomli_w
    from safetensors.torch import load_file

    from seqdistill.cache_schema.storage import FAILPOINT_ENV
    from seqdistill.students.config import make_config
    from seqdistill.students.recipes import get

    r = get(recipe)
    cfg = make_config(r.config, {**options, "device": "cpu"}, "test")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "run.toml").write_text(tomli_w.dumps({"recipe": recipe, **options, "device": "cpu"}))
    child_env = launched_env(tmp_path, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    quiet = lambda *a: None  # noqa: E731
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the killed child runs on one thread: the same arithmetic everywhere
    try:
        full = r.train(cache, tmp_path / "full", cfg, log=quiet)
        assert full["finished"] and full["steps"] > kill_at
        # the killed run is a new process (the command a user runs), not a fork of this one: a fork
        # of a process that has run a training inherits its libraries' threads and locks (zarr's
        # IO loop, pyarrow's pool, OpenMP), and such a child once hung at its first batch in CI
        train = [sys.executable, "-m", "seqdistill.cli.train", "--config", str(tmp_path / "run.toml")]
        p = subprocess.run(
            [*train, "--cache", cache, "--out", str(tmp_path / "killed")],
            capture_output=True,
            text=True,
            timeout=300,
            env={**child_env, FAILPOINT_ENV: f"train-step:{kill_at}"},
        )
        assert p.returncode == -9, p.stderr[-3000:]
        logs = []
        resumed = r.train(cache, tmp_path / "killed", cfg, log=logs.append)
    finally:
        torch.set_num_threads(threads)
    assert any(line.startswith("resuming from") for line in logs), logs
    assert resumed["steps"] == full["steps"]
    assert [h.get("loss") for h in resumed["history"]] == [h.get("loss") for h in full["history"]]
    for name in ("model.safetensors", "checkpoint/tensors.safetensors"):
        ours, theirs = load_file(str(tmp_path / "killed" / name)), load_file(str(tmp_path / "full" / name))
        keys = [k for k in theirs if not k.startswith(("optimizer.", "rng."))]
        assert keys and all(torch.equal(ours[k], theirs[k]) for k in keys), name

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-m",
            "seqdistill.cli.train",
            "--config",
            str(tmp_path / "run.toml"),
            "--cache",
            cache,
            "--out",
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / "training.json").read_text())
    assert ddp["processes"] == 2 and ddp["finished"] and (tmp_path / "ddp" / "model.safetensors").exists()
    assert 0 < ddp["steps"] < full["steps"]  # the cache has several shards, split between the ranks


# A test is end to end (`-m e2e`) when it runs a real model through a stage of the tool: it takes a
# tiny encoder (directly or through a cache or teacher fixture built from one); the rest are unit
# tests (`-m unit`). `make test` runs both.
E2E_FIXTURES = {"tiny_encoder", "wide_encoder", "encoder_dir", "teachers", "two_teacher_cache"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        e2e = bool(names & E2E_FIXTURES)
        item.add_marker(pytest.mark.e2e if e2e else pytest.mark.unit)
