"""A cache on object storage, for real: moto's standalone S3 server on loopback, started and
stopped by this module (skipped, with the reason, only where it cannot start)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import toy_corpus

from seqdistill.cache_schema import BuildLock, CacheLockedError, LabelSchema, verify_cache
from seqdistill.cache_schema.storage import CacheStore
from seqdistill.cli.cache import main as cache_cli
from seqdistill.cli.train import main as train_cli
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.teachers import build_teacher

BUCKET = "seqdistill-test"
QUIET = dict(log=lambda *a: None)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "server.log"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.skip(f"moto's S3 server did not start: {log.read_text()[-500:]}")
            time.sleep(0.3)
    s3fs.S3FileSystem(endpoint_url=endpoint).mkdir(BUCKET)
    yield endpoint
    proc.terminate()
    proc.wait(10)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def sources(tiny_encoder, tmp_path_factory):
    d = tmp_path_factory.mktemp("s3-sources")
    build_teacher(tiny_encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(d / "teacher")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 40, 0), "train", True),
        CorpusSpec("toy", toy_corpus(d / "dev.txt", 12, 1), "dev", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 20, 2, labelled=False), "unlabelled", False),
    ]
    return str(d / "teacher"), specs


CFG = BuildConfig(device="cpu", k=4, shard_size=16)
TRAIN = [
    "--epochs",
    "2",
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
    "--batch-size",
    "8",
]


def test_build_verify_info_and_train_from_s3(s3, sources, tmp_path):
    teacher, specs = sources
    opts = {"endpoint_url": s3}
    url = f"s3://{BUCKET}/toy"
    assert build_cache(url, teacher, specs, CFG, teacher_id="tiny", storage_options=opts, **QUIET).status == "built"
    local = str(tmp_path / "local")
    build_cache(local, teacher, specs, CFG, teacher_id="tiny", **QUIET)
    store = CacheStore(url, opts)
    assert not store.exists("build.lock") and not store.exists(".tmp")
    assert verify_cache(url, opts) == []
    option = ["--storage-option", f"endpoint_url={s3}"]
    r = CliRunner().invoke(cache_cli, ["verify", url, *option])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cache_cli, ["info", url, "--json", *option])
    assert r.exit_code == 0 and {lay["name"] for lay in json.loads(r.output)["layers"]} == {"examples", "tiny"}

    mirror = tmp_path / "mirror"
    r = CliRunner().invoke(
        train_cli, ["--cache", url, *option, "--local-cache", str(mirror), "--out", str(tmp_path / "from-s3"), *TRAIN]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    r = CliRunner().invoke(train_cli, ["--cache", local, "--out", str(tmp_path / "from-disk"), *TRAIN])
    assert r.exit_code == 0, r.output
    runs = [json.loads((tmp_path / d / "training.json").read_text())["history"] for d in ("from-s3", "from-disk")]
    strip = [[{k: v for k, v in e.items() if k != "seconds"} for e in h] for h in runs]
    assert strip[0] == strip[1]  # the same cache, the same run
    # every shard file training read is in the local mirror, checked against the manifest
    manifest = json.loads(store.read_bytes("manifest.json"))
    listed = {
        f["path"]: f["sha256"] for layer in manifest["layers"] for shard in layer["shards"] for f in shard["files"]
    }
    mirrored = {str(p.relative_to(mirror)) for p in mirror.rglob("*") if p.is_file()}
    assert {p for p in listed if p.endswith("records.parquet")} <= mirrored
    assert all(CacheStore(str(mirror)).sha256(p) == listed[p] for p in mirrored & set(listed))

    assert (
        build_cache(url, teacher, specs, CFG, teacher_id="tiny", storage_options=opts, **QUIET).status == "up-to-date"
    )


def test_a_damaged_object_is_refused_by_name(s3, sources, tmp_path):
    teacher, specs = sources
    opts = {"endpoint_url": s3}
    url = f"s3://{BUCKET}/damaged"
    build_cache(url, teacher, specs, CFG, teacher_id="tiny", storage_options=opts, **QUIET)
    store = CacheStore(url, opts)
    rel = next(p for p in store.find("layers/tiny") if p.endswith("records.parquet"))
    data = bytearray(store.read_bytes(rel))
    data[len(data) // 2] ^= 0x40
    store.fs.pipe_file(store.path(rel), bytes(data))
    assert verify_cache(url, opts)[0].where == rel
    r = CliRunner().invoke(
        train_cli,
        [
            "--cache",
            url,
            "--storage-option",
            f"endpoint_url={s3}",
            "--local-cache",
            str(tmp_path / "mirror"),
            "--out",
            str(tmp_path / "s"),
            *TRAIN,
        ],
    )
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)
    assert f"{url}/{rel}: corrupt" in r.output, r.output
    assert not list(Path(tmp_path / "mirror").rglob("*.part-*"))
    assert not (tmp_path / "mirror" / rel).exists()  # a corrupt copy never enters the mirror


def test_the_build_lock_is_exclusive_on_s3(s3):
    store = CacheStore(f"s3://{BUCKET}/locked", {"endpoint_url": s3})
    with BuildLock(store):
        with pytest.raises(CacheLockedError, match="another build is writing this cache"):
            BuildLock(store).acquire()
    assert not store.exists("build.lock")
