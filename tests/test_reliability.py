"""Issue 10: a killed build or training run loses nothing, a damaged or hostile cache is refused by
name, one build at a time writes a cache, and no pickle is ever loaded (docs/RELIABILITY.md).

Killed runs are forked children of the test process (they inherit its imports, so twenty kills
cost seconds); each dies by SIGKILL at a named failpoint (``cache_schema.storage.failpoint``) and
the parent resumes the work in-process. tests/test_build.py kills the real CLI in a subprocess."""

import io
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tokenize
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import in_child, launched_env, toy_cache
from safetensors.torch import load_file
from test_build import QUIET, _assert_same, _cfg, _cli_build, _contents, corpus_paths, teachers  # noqa: F401

import seqdistill
from seqdistill.cache_schema import BuildLock, CacheLockedError, CacheReader, verify_cache
from seqdistill.cache_schema.lock import LOCK, LockHolder, _pid_namespace
from seqdistill.cache_schema.manifest import seal
from seqdistill.cache_schema.storage import FAILPOINT_ENV, FAILPOINT_TRACE_ENV, CacheStore
from seqdistill.cli.train import main as train_cli
from seqdistill.pipeline.build import build_cache
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import MGKDConfig as TrainConfig

_in_child = in_child  # (conftest)


# -- builds killed anywhere ---------------------------------------------------------------------
def test_a_child_killed_holding_the_progress_bar_lock_leaves_the_parent_free():
    """The seeded kills below run in forked children; one killed while it held tqdm's write lock
    (a semaphore shared across the fork) once left this process waiting for ever at its next
    progress bar. conftest.in_child gives each child locks of its own."""
    from tqdm.auto import tqdm

    parent = tqdm.get_lock()  # created before the fork, as after any earlier test's bar

    def hold_then_die():
        tqdm.get_lock().acquire()
        os.kill(os.getpid(), signal.SIGKILL)

    assert _in_child(hold_then_die, {}) == -signal.SIGKILL
    taken = [lock.acquire(timeout=5) for lock in parent.locks]
    assert all(taken), "a dead child holds the parent's progress-bar lock"
    parent.release()


def test_sigkill_at_20_seeded_points_then_resume_equals_an_uninterrupted_build(
    teachers, corpus_paths, tmp_path, monkeypatch
):
    crf_dir, _ = teachers
    trace = tmp_path / "trace"
    monkeypatch.setenv(FAILPOINT_TRACE_ENV, str(trace))
    clean = str(tmp_path / "clean")
    build_cache(clean, crf_dir, corpus_paths, _cfg(), **QUIET)
    monkeypatch.delenv(FAILPOINT_TRACE_ENV)
    points = trace.read_text().split()
    assert len(points) == len(set(points)) >= 40, points
    # 20 points drawn with a seed, plus one of each kind so that every kind is always tried
    kinds = {}
    for p in points:
        kinds.setdefault(p.split(":")[0], p)
    chosen = sorted(set(random.Random(20261123).sample(points, 20)) | set(kinds.values()), key=points.index)
    assert {
        "json",
        "shard-parquet",
        "shard-staged",
        "publish",
        "shard-data",
        "shard-marker",
        "exports-staged",
        "exports-data",
        "manifest",
    } <= set(kinds)
    expected = _contents(clean)
    for i, point in enumerate(chosen):
        out = str(tmp_path / f"killed-{i}")
        code = _in_child(
            lambda out=out: build_cache(out, crf_dir, corpus_paths, _cfg(), **QUIET), {FAILPOINT_ENV: point}
        )
        assert code == -9, point
        assert not os.path.exists(os.path.join(out, "manifest.json")), point
        with pytest.raises(Exception, match="no manifest.json"):
            CacheReader(out)  # nothing half-written is visible
        report = build_cache(out, crf_dir, corpus_paths, _cfg(), **QUIET)  # breaks the dead child's lock
        assert report.status in ("built", "resumed"), point
        assert verify_cache(out) == [], point
        _assert_same(_contents(out), expected)
        assert not os.path.exists(os.path.join(out, LOCK)), point
        staging = os.path.join(out, ".tmp")
        assert not os.path.exists(staging) or not os.listdir(staging), point


# -- training killed and resumed -----------------------------------------------------------------
@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("reliability"), k=4, shard_size=16)


TRAIN = dict(
    losses=("hard", "seq-ce"),
    k=4,
    epochs=2,
    device="cpu",
    hidden_size=8,
    embedding="random",
    embedding_dim=8,
    batch_size=8,
    checkpoint_every=3,
    patience=10,
)


def _record_batches(monkeypatch):
    import seqdistill.students.recipes.mgkd as T

    seen = []
    real = T.loss_parts
    monkeypatch.setattr(
        T, "loss_parts", lambda model, batch, cfg, dev: seen.append(batch.origin) or real(model, batch, cfg, dev)
    )
    return seen


def _weights(out):
    return {
        k: v
        for k, v in load_file(str(Path(out) / "checkpoint" / "tensors.safetensors")).items()
        if k.startswith("model.")
    }


@pytest.mark.parametrize("point, resume_at", [("train-step:7", 6), ("train-step:11", 9), ("checkpoint-swap:9", 6)])
def test_training_killed_resumes_with_the_same_steps_and_no_example_twice(
    cache, tmp_path, monkeypatch, point, resume_at
):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the killed child runs on one thread: the same arithmetic everywhere
    try:
        seen = _record_batches(monkeypatch)
        full = train_student(cache, tmp_path / "full", TrainConfig(**TRAIN), log=lambda *a: None)
        full_batches = list(seen)
        assert full["steps"] > 11
        out = tmp_path / "killed"
        code = _in_child(
            lambda: train_student(cache, out, TrainConfig(**TRAIN), log=lambda *a: None), {FAILPOINT_ENV: point}
        )
        assert code == -9
        seen[:] = []
        logs = []
        resumed = train_student(cache, out, TrainConfig(resume=True, **TRAIN), log=logs.append)
    finally:
        torch.set_num_threads(threads)
    assert any(f"step {resume_at}" in line for line in logs), logs
    assert resumed["steps"] == full["steps"]
    assert seen == full_batches[resume_at:]  # the rest of the run, each batch once, in the same order
    ours, theirs = _weights(out), _weights(tmp_path / "full")
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k


# -- damaged files ---------------------------------------------------------------------------------
def _kinds_of_file(root: Path) -> dict[str, str]:
    """One cache-relative path per kind of file a cache holds."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def first(pattern):
        return next(f for f in files if re.search(pattern, f))

    return {
        "manifest": "manifest.json",
        "parquet shard": first(r"^layers/tiny/shard-\d+/records\.parquet$"),
        "zarr metadata": first(r"^layers/tiny/shard-\d+/.*/marginals/zarr\.json$"),
        "zarr chunk": first(r"^layers/tiny/shard-\d+/.*/marginals/c/"),
        "examples parquet": first(r"^layers/examples/shard-\d+/records\.parquet$"),
        "exported safetensors": first(r"exports/embeddings\.safetensors$"),
        "exported tokenizer": first(r"exports/tokenizer/tokenizer\.json$"),
    }


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x40
        path.write_bytes(bytes(b))
    elif how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.unlink()


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_every_kind_of_damaged_file_is_named_by_verify_and_refused_by_training(cache, tmp_path, how):
    for kind, rel in _kinds_of_file(Path(cache)).items():
        copy = tmp_path / f"{how}-{kind.replace(' ', '-')}"
        shutil.copytree(cache, copy)
        _damage(copy / rel, how)
        problems = verify_cache(str(copy))
        assert problems and rel in str(problems[0]), (kind, [str(p) for p in problems])
        r = CliRunner().invoke(
            train_cli,
            [
                "--cache",
                str(copy),
                "--out",
                str(tmp_path / "student"),
                "--epochs",
                "1",
                "--hidden-size",
                "8",
                "--embedding",
                "random",
                "--embedding-dim",
                "8",
                "--device",
                "cpu",
                "--losses",
                "hard,seq-ce",
                "--k",
                "4",
            ],
        )
        assert r.exit_code == 1, (kind, r.output, r.exception)
        assert isinstance(r.exception, SystemExit), (kind, r.exception)  # a message, not a traceback
        assert "Error:" in r.output and (rel in r.output or (kind == "manifest" and "manifest.json" in r.output)), (
            kind,
            r.output,
        )


# -- hostile manifests ---------------------------------------------------------------------------
def _edited(cache, tmp_path, edit) -> str:
    copy = tmp_path / "hostile"
    shutil.copytree(cache, copy)
    obj = json.loads((copy / "manifest.json").read_text())
    edit(obj)
    seal(obj)  # a crafted manifest: its checksum is no defence
    (copy / "manifest.json").write_text(json.dumps(obj))
    return str(copy)


def _field(obj, layer, name):
    lay = next(x for x in obj["layers"] if x["name"] == layer)
    return next(f for f in lay["fields"] if f["name"] == name)


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda o: _field(o, "tiny", "marginals").update(dtype="float32"),
            r"marginals: holds float16 .* manifest says float32",
        ),
        (
            lambda o: _field(o, "tiny", "marginals").update(shape=[7]),
            r"marginals: holds .* shape \[5\], the manifest says .* \[7\]",
        ),
    ],
)
def test_fields_whose_data_disagree_with_the_manifest_are_refused(cache, tmp_path, edit, match):
    url = _edited(cache, tmp_path, edit)
    assert any("marginals" in str(p) for p in verify_cache(url, checksums=False))
    with pytest.raises(Exception, match=match):
        CacheReader(url).read_shard(0, {"tiny": ["marginals"]})


def test_exports_path_outside_the_cache_is_refused(cache, tmp_path):
    def edit(o):
        next(x for x in o["layers"] if x["name"] == "tiny")["exports"][0]["path"] = "../../etc/passwd"

    with pytest.raises(Exception, match="escapes the cache root|outside"):
        CacheReader(_edited(cache, tmp_path, edit))


# -- one build at a time -----------------------------------------------------------------------------
def _lock_file(root, **kw):
    holder = {
        "token": "other",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.time(),
        "heartbeat": time.time(),
        "pidns": _pid_namespace(),
        **kw,
    }
    os.makedirs(root, exist_ok=True)
    Path(root, LOCK).write_text(json.dumps(holder))


def test_a_live_lock_is_refused_with_its_holder_then_waited_for(teachers, corpus_paths, tmp_path):
    crf_dir, _ = teachers
    out = str(tmp_path / "c")
    _lock_file(out)
    with pytest.raises(CacheLockedError, match=rf"pid {os.getpid()} on host .*--wait SECONDS"):
        build_cache(out, crf_dir, corpus_paths, _cfg(), **QUIET)
    assert os.listdir(out) == [LOCK]  # nothing written
    threading.Timer(0.5, lambda: os.unlink(os.path.join(out, LOCK))).start()
    report = build_cache(out, crf_dir, corpus_paths, _cfg(wait=30), **QUIET)
    assert report.status == "built" and verify_cache(out) == []
    assert not os.path.exists(os.path.join(out, LOCK))


@pytest.mark.parametrize(
    "holder, why",
    [
        ({"pid": 0}, "process 0 on this host is gone"),
        ({"host": "elsewhere", "heartbeat": time.time() - 7200}, "no heartbeat for"),
    ],
)
def test_a_stale_lock_is_broken(teachers, corpus_paths, tmp_path, holder, why):
    crf_dir, _ = teachers
    out = str(tmp_path / "c")
    _lock_file(out, **holder)
    logs = []
    assert build_cache(out, crf_dir, corpus_paths, _cfg(), log=logs.append).status == "built"
    assert any("breaking a stale build lock" in line and why in line for line in logs), logs


def test_a_fresh_lock_of_another_host_is_respected(tmp_path):
    _lock_file(tmp_path, host="elsewhere")
    with pytest.raises(CacheLockedError, match="on host elsewhere"):
        BuildLock(CacheStore(str(tmp_path))).acquire()


def test_a_lock_of_another_pid_namespace_is_not_taken_for_dead(tmp_path):
    _lock_file(tmp_path, pid=0, pidns="pid:[another container]")  # pid 0 does not exist here; it may there
    with pytest.raises(CacheLockedError, match="pid 0 on host"):
        BuildLock(CacheStore(str(tmp_path))).acquire()


def test_a_build_whose_lock_was_taken_does_not_commit(tmp_path):
    lock = BuildLock(CacheStore(str(tmp_path)), stale_after=0.2, log=lambda *a: None)
    lock.acquire()
    _lock_file(tmp_path, token="usurper")  # another build broke our lock, thinking us dead
    deadline = time.time() + 10
    while lock.lost is None and time.time() < deadline:  # the heartbeat (every 0.05 s) notices
        time.sleep(0.05)
    with pytest.raises(CacheLockedError, match="taken by another build while this one held it"):
        lock.check()
    lock.release()
    assert json.loads((tmp_path / LOCK).read_text())["token"] == "usurper"  # theirs stays


def test_lock_on_an_object_store_is_exclusive_and_kept_alive(request):
    store = CacheStore(f"memory://{request.node.name}/cache")
    first = BuildLock(store, stale_after=0.4)
    first.acquire()
    try:
        with pytest.raises(CacheLockedError):
            BuildLock(store, stale_after=0.4).acquire()
        beat = first.read().heartbeat
        deadline = time.time() + 10
        while first.read().heartbeat == beat and time.time() < deadline:
            time.sleep(0.05)
        assert first.read().heartbeat > beat  # the heartbeat keeps the lock fresh
        with pytest.raises(CacheLockedError):
            BuildLock(store, stale_after=0.4).acquire()
    finally:
        first.release()
    assert first.read() is None
    with BuildLock(store):
        assert isinstance(BuildLock(store).read(), LockHolder)


def test_two_builds_started_at_once_leave_one_good_cache(teachers, corpus_paths, tmp_path):
    crf_dir, _ = teachers
    clean = str(tmp_path / "clean")
    build_cache(clean, crf_dir, corpus_paths, _cfg(), **QUIET)
    out = str(tmp_path / "both")
    results = [None, None]

    def run(i):
        results[i] = _cli_build(out, crf_dir, corpus_paths, {"OMP_NUM_THREADS": "1"}, extra=["--wait", "120"])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-1500:] for r in results]
    statuses = sorted(("up-to-date" if "nothing to do" in r.stdout else "built") for r in results)
    assert statuses == ["built", "up-to-date"], [r.stdout for r in results]
    assert verify_cache(out) == []
    _assert_same(_contents(out), _contents(clean))


# -- what is never loaded --------------------------------------------------------------------------------
def test_no_pickle_no_unsafe_torch_load_and_remote_code_only_from_a_flag():
    for py in Path(seqdistill.__file__).parent.rglob("*.py"):
        src = py.read_text()
        assert not re.search(r"^\s*(import|from)\s+(pickle|cPickle|dill|joblib|cloudpickle)\b", src, re.M), py
        assert "pickle.load" not in src, py
        assert "np.load(" not in src or "allow_pickle=False" in src, py
        for m in re.finditer(r"torch\.load\(", src):
            depth, i = 1, m.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(src[i], 0)
                i += 1
            assert "weights_only=True" in src[m.end() : i], f"{py}: torch.load without weights_only=True"
        code = "".join(
            t.string
            for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type in (tokenize.NAME, tokenize.OP)
        )  # no strings, comments or spaces
        assert "trust_remote_code=True" not in code, py


def test_a_damaged_manifest_is_named_and_rebuilt_from_the_shard_markers(teachers, corpus_paths, tmp_path):
    crf_dir, _ = teachers
    out = tmp_path / "c"
    build_cache(str(out), crf_dir, corpus_paths, _cfg(), **QUIET)
    expected = _contents(str(out))
    text = (out / "manifest.json").read_text()
    i = text.index('"sha256": "') + len('"sha256": "')
    (out / "manifest.json").write_text(text[:i] + ("0" if text[i] != "0" else "1") + text[i + 1 :])  # still valid JSON
    with pytest.raises(Exception, match="manifest.json: its manifest_sha256 does not match its contents"):
        CacheReader(str(out))
    (out / "manifest.json").unlink()  # as the message says
    logs = []
    assert build_cache(str(out), crf_dir, corpus_paths, _cfg(), log=logs.append).status == "resumed"
    assert verify_cache(str(out)) == []
    _assert_same(_contents(str(out)), expected)


# -- scale-out ----------------------------------------------------------------------------------------
def test_torchrun_ddp_training_reads_each_example_once_and_matches_one_process(cache, tmp_path):
    from seqdistill.students.common import default_splits
    from seqdistill.students.data import CacheStream, StreamConfig, parse_selection

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # 2 ranks x batch 4 against one process x batch 8: the same sentences per update
    args = [
        "--cache",
        cache,
        "--arch",
        "bilstm-crf",
        "--epochs",
        "12",
        "--lr",
        "0.01",
        "--hidden-size",
        "16",
        "--embedding",
        "random",
        "--embedding-dim",
        "16",
        "--device",
        "cpu",
        "--losses",
        "hard,seq-ce",
        "--k",
        "4",
        "--batch-size",
        "4",
        "--patience",
        "10",
    ]
    r = subprocess.run(
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
            "--out",
            str(tmp_path / "ddp"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=launched_env(tmp_path, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false"),  # scratch in tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / "training.json").read_text())
    one = train_student(
        cache,
        tmp_path / "one",
        TrainConfig(
            arch="bilstm-crf",
            losses=("hard", "seq-ce"),
            k=4,
            epochs=12,
            lr=0.01,
            hidden_size=16,
            embedding="random",
            embedding_dim=16,
            device="cpu",
            batch_size=8,
            patience=10,
        ),
        log=lambda *a: None,
    )
    assert ddp["processes"] == 2 and (tmp_path / "ddp" / "model.safetensors").exists()
    # the two ranks' parts of each epoch cover the training rows once; a step lasts while either has a batch
    reader = CacheReader(cache)
    train_names, _ = default_splits(reader, TrainConfig())
    selected = parse_selection(train_names, reader)
    steps, seen = 0, []
    for epoch in range(12):
        counts = []
        for rank in range(2):
            stream = CacheStream(
                reader, {"examples": ["words"]}, selected, _Ids, StreamConfig(4, 4096, 13), rank=rank, world_size=2
            )
            stream.set_epoch(epoch)
            parts = [b.ids for b in stream]
            counts.append(len(parts))
            seen.append(sorted(i for b in parts for i in b))
        steps += max(counts)
        both = seen[-1] + seen[-2]
        assert (
            len(both)
            == len(set(both))
            == sum(
                1 for ex in reader.iter_examples() if (ex["examples"]["corpus"], ex["examples"]["split"]) in selected
            )
        )
    assert ddp["steps"] == steps
    assert abs(ddp["best_dev_f1"] - one["best_dev_f1"]) <= 0.05, (ddp["best_dev_f1"], one["best_dev_f1"])


class _Ids:
    def __init__(self, rows):
        self.ids = [r["example_id"] for r in rows]
