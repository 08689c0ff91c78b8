"""``verify`` covers every file of the cache tree: data, headers, markers, exports, strays."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import toy_cache

from seqdistill.cache_schema import CacheReader, CacheWriter, verify_cache
from seqdistill.cache_schema.storage import CacheStore
from seqdistill.cache_schema.verify_tree import check_markers
from seqdistill.cli.cache import main as cache_cli


@pytest.fixture(scope="module")
def full_cache(tiny_encoder, tmp_path_factory):
    """The issue's cache: two hidden layers, subword fields and two exported encoder blocks."""
    d = tmp_path_factory.mktemp("full")
    return toy_cache(tiny_encoder, d, hidden_layers=(1, 2), subwords=True, export_layers=2, shard_size=50)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _errors(problems):
    return [p for p in problems if not p.warning]


def test_a_flipped_byte_in_every_file_of_the_tree_is_named(full_cache, tmp_path):
    root = Path(full_cache)
    files = _files(root)
    kinds = {"layer.json", "shard-00000.json", "exports.json", "records.parquet", "zarr.json", "manifest.json"}
    assert kinds <= {Path(f).name for f in files} and len(files) >= 40, files
    copy = tmp_path / "c"
    shutil.copytree(root, copy)
    for rel in files:  # the experiment, on every file instead of the first 40
        path = copy / rel
        original = path.read_bytes()
        data = bytearray(original)
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
        errors = _errors(verify_cache(str(copy)))
        assert any(p.where == rel for p in errors), (rel, [str(p) for p in errors])
        path.write_bytes(original)
    assert verify_cache(str(copy)) == []


@pytest.mark.parametrize(
    "marker",
    [
        "layers/tiny/layer.json",
        "layers/examples/layer.json",
        "layers/tiny/shard-00001.json",
        "layers/tiny/exports.json",
    ],
)
def test_every_single_bit_flip_in_a_marker_is_caught(full_cache, tmp_path, marker):
    """400 byte positions spread evenly over the whole file (every byte of the small ones; the
    entries of a long file repeat one structure): byte i gets bit i % 8 flipped."""
    copy = tmp_path / "c"
    shutil.copytree(full_cache, copy)
    store, manifest = CacheStore(str(copy)), CacheReader(str(copy)).manifest
    name = marker.split("/")[1]  # only that layer's markers are read at each flip (speed)
    manifest = replace(manifest, layers={name: manifest.layers[name]})
    path = copy / marker
    original = path.read_bytes()
    missed = []
    for i in range(0, len(original), max(1, len(original) // 400)):
        data = bytearray(original)
        data[i] ^= 1 << (i % 8)
        path.write_bytes(bytes(data))
        found = _marker_problems(store, manifest)
        if found != [marker]:
            missed.append((i, bytes(data[max(0, i - 10) : i + 10]), found))
    path.write_bytes(original)
    assert not missed, missed[:5]
    assert _marker_problems(store, manifest) == []


def _marker_problems(store, manifest) -> list[str]:
    found = []
    check_markers(store, manifest, lambda where, what: found.append(where))
    return found


def test_marker_differences_are_named(full_cache, tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(full_cache, copy)
    header = copy / "layers/tiny/layer.json"
    obj = json.loads(header.read_text())
    obj["teacher"]["pooling"] = "last"
    header.write_text(json.dumps(obj, indent=1) + "\n")
    marker = copy / "layers/tiny/shard-00000.json"
    obj = json.loads(marker.read_text())
    obj["bytes"] += 1  # a value the parse recomputes from the file list
    marker.write_text(json.dumps(obj, indent=1) + "\n")
    exports = copy / "layers/tiny/exports.json"
    obj = json.loads(exports.read_text())
    obj[0]["sha256"] = "0" * 64
    exports.write_text(json.dumps(obj) + "\n")
    problems = {p.where: p.what for p in verify_cache(str(copy))}
    assert 'teacher.pooling is "last", the manifest says "first"' in problems["layers/tiny/layer.json"]
    assert "bytes =" in problems["layers/tiny/shard-00000.json"]
    assert "0.sha256 is" in problems["layers/tiny/exports.json"]


def test_a_header_of_an_older_writer_and_a_cache_copied_without_markers_are_sound(full_cache, tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(full_cache, copy)
    header = copy / "layers/examples/layer.json"
    obj = json.loads(header.read_text())
    for c in obj["corpora"]:
        del c["nested"]  # written before nested corpora: the reader's default fills it in
    header.write_text(json.dumps(obj, indent=1) + "\n")
    assert verify_cache(str(copy)) == []
    for p in list(copy.glob("layers/*/*.json")):
        p.unlink()
    assert verify_cache(str(copy)) == []


def test_stray_files_are_warnings_or_errors_when_strict(full_cache, tmp_path, tiny_encoder):
    copy = tmp_path / "c"
    shutil.copytree(full_cache, copy)
    (copy / "layers/tiny/notes.txt").write_text("hello")
    (copy / ".tmp/tmpab12").mkdir(parents=True)
    (copy / ".tmp/tmpab12/records.parquet").write_bytes(b"half")
    (copy / "manifest.json.tmp-0123abcd").write_text("{")
    # an interrupted build of a second teacher: a header and one committed shard, not in the manifest
    w = CacheWriter(str(copy), clean_staging=False)
    reader = CacheReader(str(copy))
    teacher = reader.manifest.teachers["tiny"]
    layer = w.teacher_layer(replace(teacher, id="other"), reader.manifest.layers["tiny"].fields[:1])
    assert layer.missing_shards() == [0, 1, 2]
    problems = verify_cache(str(copy))
    assert problems and all(p.warning for p in problems)
    wheres = {p.where: p.what for p in problems}
    assert set(wheres) == {
        "layers/tiny/notes.txt",
        ".tmp/tmpab12/records.parquet",
        "manifest.json.tmp-0123abcd",
        "layers/other/",
    }, wheres
    assert "interrupted build of teacher 'other'" in wheres["layers/other/"]
    assert "killed build" in wheres[".tmp/tmpab12/records.parquet"]
    strict = verify_cache(str(copy), strict=True)
    assert len(_errors(strict)) == 4
    r = CliRunner().invoke(cache_cli, ["verify", str(copy)])
    assert r.exit_code == 0 and "WARN layers/tiny/notes.txt: stray" in r.output and "4 warning(s)" in r.output
    r = CliRunner().invoke(cache_cli, ["verify", "--strict", str(copy)])
    assert r.exit_code == 1 and "BAD layers/tiny/notes.txt: stray" in r.output and "4 problem(s)" in r.output


def test_a_build_resumed_with_sources_spelled_otherwise_verifies_clean(tmp_path, corpora):
    """The header on disk is what a resumed build commits, so verify finds it equal to the manifest."""
    from conftest import TEACHER_FIELDS, all_rows, examples_columns, make_teacher, shard_rows, teacher_columns

    schema, cs = corpora
    url = str(tmp_path / "cache")
    shards = shard_rows(all_rows(cs), 2)
    infos = [c.info() for c in cs]
    w = CacheWriter(url)
    w.examples_layer(schema, infos, len(shards)).write_shard(0, examples_columns(shards[0]))
    w.teacher_layer(make_teacher(), TEACHER_FIELDS).write_shard(0, teacher_columns(shards[0], 0))
    # the same run again, its corpora and teacher named by other spellings of the same paths
    infos = [replace(c, source="./" + c.source) for c in infos]
    teacher = replace(make_teacher(), source="./elsewhere/../teacher")
    w = CacheWriter(url)
    ex = w.examples_layer(schema, infos, len(shards))
    tl = w.teacher_layer(teacher, TEACHER_FIELDS)
    for i, rows in enumerate(shards):
        if not ex.is_committed(i):
            ex.write_shard(i, examples_columns(rows))
        if not tl.is_committed(i):
            tl.write_shard(i, teacher_columns(rows, i))
    w.commit()
    assert verify_cache(url) == []
