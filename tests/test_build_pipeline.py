"""The build's pipeline (pipeline/stream.py): the same shards at any worker count, a worker's
failure named and resumable, Ctrl-C stopping every thread, and its default sizes."""

import threading

import pytest
import torch
from conftest import toy_corpus

from seqdistill.cache_schema import CacheReader, LabelSchema, verify_cache
from seqdistill.cache_schema.writer import LayerWriter
from seqdistill.pipeline import stream
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.teachers import build_teacher
from seqdistill.teachers.kinds.crf import CRFTeacher

QUIET = dict(log=lambda *a: None)


@pytest.fixture(scope="module")
def setup(tiny_encoder, tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    teacher = build_teacher(tiny_encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf")
    with torch.no_grad():
        teacher.crf.transitions.normal_(generator=torch.Generator().manual_seed(3))
    teacher.save(d / "teacher")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 30, 0), "train", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 26, 2, labelled=False), "unlabelled", False),
    ]
    return str(d / "teacher"), specs


def _cfg(**kw):
    # 56 sentences: 7 shards of 8, each cut into several batches of at most 24 padded words
    return BuildConfig(
        **{"k": 3, "shard_size": 8, "max_words_per_batch": 24, "hidden_layers": (1,), "device": "cpu", **kw}
    )


def _shard_files(out: str) -> dict[str, str]:
    """sha256 of every shard file of every layer, by path (the manifest's checksums)."""
    manifest = CacheReader(out).manifest
    return {f.path: f.sha256 for layer in manifest.layers.values() for s in layer.shards for f in s.files}


def test_shards_are_byte_identical_at_any_worker_count(setup, tmp_path):
    teacher_dir, specs = setup
    one = str(tmp_path / "one")
    report = build_cache(one, teacher_dir, specs, _cfg(workers=1, writers=1, queue_size=0), **QUIET)
    many = str(tmp_path / "many")
    build_cache(many, teacher_dir, specs, _cfg(workers=3, writers=3, queue_size=2), **QUIET)
    assert report.shards_written == 7
    files = _shard_files(one)
    assert len(files) > 7 * 2 and files == _shard_files(many)
    assert verify_cache(many) == []
    stages = report.stages
    assert stages["wall"] > 0 and stages["device"] > 0 and stages["write"] > 0 and 0 <= stages["device_idle"] <= 1


def test_a_failing_tokenization_worker_is_named_and_the_build_resumes(setup, tmp_path, monkeypatch):
    teacher_dir, specs = setup
    clean = str(tmp_path / "clean")
    build_cache(clean, teacher_dir, specs, _cfg(), **QUIET)
    prepare, write = CRFTeacher.prepare, LayerWriter.write_shard
    published = threading.Event()  # a teacher shard is out: the resume below has something to keep

    def failing(self, words):
        # the first batch tokenized after shard 0 was published fails. Not "the Nth call": a worker
        # that took shard 0's last batch can be preempted before its call while the other worker
        # makes the next ones, so on a loaded machine the Nth call can be shard 0's (CI saw it)
        if published.is_set():
            raise RuntimeError("tokenizer broke")
        return prepare(self, words)

    def writing(self, index, columns):
        info = write(self, index, columns)
        if self.name != "examples":
            published.set()
        return info

    monkeypatch.setattr(CRFTeacher, "prepare", failing)
    monkeypatch.setattr(LayerWriter, "write_shard", writing)
    out = str(tmp_path / "out")
    # one writer and one queued shard: the device loop waits for shard 0's publication by the end
    # of shard 2, 6 batches (2 shards) ahead, so shards 5 and 6 are tokenized after it, whatever
    # the machine's speed or core count
    failing_cfg = _cfg(workers=2, writers=1, queue_size=1)
    with pytest.raises(RuntimeError, match="tokenizer broke") as err:
        build_cache(out, teacher_dir, specs, failing_cfg, **QUIET)
    assert any("tokenization worker, shard" in note for note in err.value.__notes__)
    assert not any(t.name.startswith("seqdistill-") for t in threading.enumerate())
    assert published.is_set()
    monkeypatch.setattr(CRFTeacher, "prepare", prepare)
    report = build_cache(out, teacher_dir, specs, _cfg(workers=2), **QUIET)
    assert report.status == "resumed" and 0 < report.shards_written < 7
    assert verify_cache(out) == [] and _shard_files(out) == _shard_files(clean)


def test_a_failing_writer_stops_the_build_and_leaves_no_half_shard(setup, tmp_path, monkeypatch):
    teacher_dir, specs = setup
    clean = str(tmp_path / "clean")
    build_cache(clean, teacher_dir, specs, _cfg(), **QUIET)
    write = LayerWriter.write_shard

    def failing(self, index, columns):
        if self.name != "examples" and index == 3:
            raise OSError("disk full")
        return write(self, index, columns)

    monkeypatch.setattr(LayerWriter, "write_shard", failing)
    out = str(tmp_path / "out")
    with pytest.raises(OSError, match="disk full") as err:
        build_cache(out, teacher_dir, specs, _cfg(writers=2), **QUIET)
    assert "(in the build's shard writer, shard 3)" in err.value.__notes__
    monkeypatch.setattr(LayerWriter, "write_shard", write)
    report = build_cache(out, teacher_dir, specs, _cfg(writers=2), **QUIET)
    assert report.status == "resumed" and 1 <= report.shards_written < 7
    assert verify_cache(out) == [] and _shard_files(out) == _shard_files(clean)


def test_ctrl_c_stops_every_thread(setup, tmp_path, monkeypatch):
    teacher_dir, specs = setup
    outputs, calls = CRFTeacher.outputs, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt
        return outputs(self, *args, **kwargs)

    monkeypatch.setattr(CRFTeacher, "outputs", interrupted)
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        build_cache(out, teacher_dir, specs, _cfg(workers=3, writers=2), **QUIET)
    assert not any(t.name.startswith("seqdistill-") for t in threading.enumerate())
    monkeypatch.setattr(CRFTeacher, "outputs", outputs)
    assert build_cache(out, teacher_dir, specs, _cfg(), **QUIET).status == "resumed"
    assert verify_cache(out) == []


def test_default_sizes_suit_a_small_cpu_and_a_gpu_host():
    small, host = stream.pipeline_sizes(cpus=2), stream.pipeline_sizes(cpus=16)
    assert (small.workers, small.writers, small.ahead, small.queued) == (1, 1, 4, 2)
    assert (host.workers, host.writers, host.ahead) == (4, 4, 10)
    assert stream.pipeline_sizes(workers=2, writers=3, queued=0, cpus=64) == stream.PipelineSizes(2, 6, 3, 0)
    assert "2 tokenization worker(s)" in stream.pipeline_sizes(workers=2).describe()
