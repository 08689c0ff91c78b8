import json
import os

import pytest
from click.testing import CliRunner
from conftest import TEACHER_FIELDS, all_rows, build_cache, examples_columns, make_teacher, shard_rows

from seqdistill.cache_schema import (
    CacheReader,
    CacheWriter,
    FingerprintMismatchError,
    FormatVersionError,
    ManifestError,
    ShardError,
    verify_cache,
)
from seqdistill.cache_schema.manifest import seal
from seqdistill.cli.cache import main as cache_cli


@pytest.fixture
def cache(tmp_path, corpora):
    schema, cs = corpora
    url = tmp_path / "cache"
    build_cache(str(url), schema, cs, shard_size=2)
    return url


def _shard_files(url, layer="tiny", index=1):
    manifest = json.loads((url / "manifest.json").read_text())
    layers = {layer["name"]: layer for layer in manifest["layers"]}
    return [f["path"] for f in layers[layer]["shards"][index]["files"]]


def test_shards_hold_parquet_zarr_chunks_and_metadata(cache):
    files = _shard_files(cache)
    assert any(f.endswith("records.parquet") for f in files)
    assert any(f.endswith("logits/zarr.json") for f in files)
    assert any("/logits/c/" in f for f in files)
    assert any(f.endswith("offsets/word/zarr.json") for f in files)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_every_damaged_file_is_named_by_verify(cache, damage):
    files = _shard_files(cache, "tiny") + _shard_files(cache, "examples", 2)
    for rel in files:
        path = cache / rel
        original = path.read_bytes()
        if damage == "flip":
            data = bytearray(original)
            data[len(data) // 2] ^= 0x40
            path.write_bytes(bytes(data))
        elif damage == "truncate":
            path.write_bytes(original[: len(original) // 2])
        else:
            path.unlink()
        problems = verify_cache(str(cache))
        assert problems and problems[0].where == rel, (rel, [str(p) for p in problems])
        r = CliRunner().invoke(cache_cli, ["verify", str(cache)])
        assert r.exit_code == 1 and rel in r.output
        path.write_bytes(original)
    assert verify_cache(str(cache)) == []


def test_interrupted_write_leaves_nothing_visible_and_resumes(tmp_path, corpora, monkeypatch):
    schema, cs = corpora
    url = str(tmp_path / "cache")
    shards = shard_rows(all_rows(cs), 2)
    w = CacheWriter(url)
    ex = w.examples_layer(schema, [c.info() for c in cs], len(shards))
    ex.write_shard(0, examples_columns(shards[0]))

    # The process dies while publishing shard 1: its data reached the final directory, its marker did not.
    from seqdistill.cache_schema.storage import CacheStore

    real = CacheStore.write_json_atomic

    def die_on_marker(self, rel, obj):
        if rel.endswith("shard-00001.json"):
            raise KeyboardInterrupt("killed")
        return real(self, rel, obj)

    monkeypatch.setattr(CacheStore, "write_json_atomic", die_on_marker)
    with pytest.raises(KeyboardInterrupt):
        ex.write_shard(1, examples_columns(shards[1]))
    monkeypatch.setattr(CacheStore, "write_json_atomic", real)
    assert os.path.isdir(os.path.join(url, "layers/examples/shard-00001"))  # half-published data
    with pytest.raises(ManifestError, match="has no manifest.json.*run the same `distill-cache build` again"):
        CacheReader(url)
    with pytest.raises(ShardError, match=r"shards \[1, 2\] are not written; run the build again"):
        w.commit()

    # A new process resumes: shard 0 is skipped, shard 1 is rewritten, the result equals a clean build.
    manifest, _, _ = build_cache(url, schema, cs, shard_size=2)
    clean, _, _ = build_cache(str(tmp_path / "clean"), schema, cs, shard_size=2)
    assert verify_cache(url) == []
    for layer in ("examples", "tiny"):
        ours = [[f.sha256 for f in s.files] for s in manifest.layers[layer].shards]
        theirs = [[f.sha256 for f in s.files] for s in clean.layers[layer].shards]
        assert ours == theirs
    ids = [i for s in CacheReader(url).iter_shards() for i in s.example_ids]
    assert len(ids) == len(set(ids)) == 6
    assert not os.listdir(os.path.join(url, ".tmp"))


def test_committed_layers_are_not_rewritten_and_new_teacher_adds_a_layer(cache, corpora):
    schema, cs = corpora
    before = {p: os.path.getmtime(p) for p in cache.rglob("*") if p.is_file() and p.name != "manifest.json"}
    manifest, _, _ = build_cache(str(cache), schema, cs, teacher=make_teacher("second", "c" * 64))
    assert list(manifest.layers) == ["examples", "tiny", "second"]
    assert set(manifest.teachers) == {"tiny", "second"}
    for p, t in before.items():
        assert os.path.getmtime(p) == t, p
    assert verify_cache(str(cache)) == []
    # the same teacher again is complete already: nothing to write
    w = CacheWriter(str(cache))
    w.examples_layer(schema, [c.info() for c in cs], 3)
    assert w.teacher_layer(make_teacher(), TEACHER_FIELDS).missing_shards() == []


def test_mismatched_fingerprints_are_refused(cache, corpora, tmp_path):
    schema, cs = corpora
    w = CacheWriter(str(cache))
    w.examples_layer(schema, [c.info() for c in cs], 3)
    with pytest.raises(
        FingerprintMismatchError, match=r"teacher 'tiny' .* weights fingerprint a+ in the cache vs d+ now"
    ):
        w.teacher_layer(make_teacher("tiny", "d" * 64), TEACHER_FIELDS)
    with pytest.raises(FingerprintMismatchError, match=r"has fields .*this run asks for \['log_z'\]"):
        w.teacher_layer(make_teacher(), TEACHER_FIELDS[2:3])
    changed = [c.info() for c in cs]
    changed[0].sha256 = "e" * 64
    with pytest.raises(FingerprintMismatchError, match=r"corpus 'conll' split 'train' changed: source sha256"):
        CacheWriter(str(cache)).examples_layer(schema, changed, 3)
    # the same refusal for a build that was interrupted before its manifest
    w = CacheWriter(str(tmp_path / "pending"))
    w.examples_layer(schema, [c.info() for c in cs], 3)
    w.teacher_layer(make_teacher(), TEACHER_FIELDS)
    w2 = CacheWriter(str(tmp_path / "pending"))
    w2.examples_layer(schema, [c.info() for c in cs], 3)
    with pytest.raises(FingerprintMismatchError, match="interrupted build"):
        w2.teacher_layer(make_teacher("tiny", "d" * 64), TEACHER_FIELDS)


def _edit_manifest(url, edit):
    path = url / "manifest.json"
    obj = json.loads(path.read_text())
    edit(obj)
    seal(obj)  # a crafted manifest: its checksum is no defence
    path.write_text(json.dumps(obj))


@pytest.mark.parametrize(
    "evil, match",
    [
        ("/etc/passwd", "is not a relative path"),
        ("../../outside/records.parquet", "escapes the cache root"),
        ("layers/tiny/shard-00000/../../../x", "escapes the cache root"),
        ("layers/examples/shard-00000/records.parquet", "lies outside its shard"),
        ("C:/x/records.parquet", "is not a relative path"),
    ],
)
def test_manifest_paths_that_escape_are_rejected(cache, evil, match):
    def edit(obj):
        obj["layers"][1]["shards"][0]["files"][0]["path"] = evil

    _edit_manifest(cache, edit)
    with pytest.raises(ManifestError, match=match):
        CacheReader(str(cache))
    assert "manifest.json" in str(verify_cache(str(cache))[0])


def test_manifest_shard_path_outside_its_layer_is_rejected(cache):
    def edit(obj):
        shard = obj["layers"][1]["shards"][0]
        shard["path"] = "layers/examples/shard-00000"
        for f in shard["files"]:
            f["path"] = "layers/examples/shard-00000/" + f["path"].split("/", 3)[3]

    _edit_manifest(cache, edit)
    with pytest.raises(ManifestError, match="outside layers/tiny/"):
        CacheReader(str(cache))


@pytest.mark.parametrize("version, match", [(3, "Upgrade seqdistill"), (0, "Rebuild the cache")])
def test_format_version_mismatch_says_what_to_do(cache, version, match):
    _edit_manifest(cache, lambda obj: obj.update(format_version=version))
    with pytest.raises(FormatVersionError, match=match):
        CacheReader(str(cache))


def test_corrupt_manifest_names_the_line(cache):
    (cache / "manifest.json").write_text('{\n "format": "seqdistill-cache",\n oops\n}')
    with pytest.raises(ManifestError, match="manifest.json line 3: invalid JSON"):
        CacheReader(str(cache))


def test_inconsistent_counts_are_refused(cache):
    _edit_manifest(cache, lambda obj: obj["layers"][1]["shards"][0].update(words=999))
    with pytest.raises(ManifestError, match="shard 0 counts"):
        CacheReader(str(cache))


def test_a_copy_of_the_listed_files_takes_another_teacher(cache, corpora, tmp_path):
    """Another team receives only what the manifest lists, and adds its teacher's layer."""
    import shutil

    schema, cs = corpora
    manifest = json.loads((cache / "manifest.json").read_text())
    copy = tmp_path / "copy"
    for layer in manifest["layers"]:
        for shard in layer["shards"]:
            for f in shard["files"]:
                (copy / f["path"]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(cache / f["path"], copy / f["path"])
    shutil.copy(cache / "manifest.json", copy / "manifest.json")
    assert verify_cache(str(copy)) == []
    built, _, _ = build_cache(str(copy), schema, cs, teacher=make_teacher("theirs", "f" * 64))
    assert list(built.layers) == ["examples", "tiny", "theirs"] and verify_cache(str(copy)) == []


def test_another_shard_size_on_a_committed_cache_is_named(cache, corpora):
    schema, cs = corpora
    with pytest.raises(FingerprintMismatchError, match=r"3 shards of 2 examples; this build asks for 2 shards"):
        CacheWriter(str(cache)).examples_layer(schema, [c.info() for c in cs], 2)
