import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr
from click.testing import CliRunner
from conftest import TEACHER_FIELDS, build_cache

from seqdistill.cache_schema import CacheError, CacheReader, FieldError, FieldSpec, verify_cache
from seqdistill.cli.cache import main as cache_cli


def _urls(tmp_path, request):
    return str(tmp_path / "cache"), f"memory://{request.node.name}/cache"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_every_field_kind_round_trips(tmp_path, request, corpora, where):
    schema, cs = corpora
    url = _urls(tmp_path, request)[where == "memory"]
    manifest, shards, tcols = build_cache(url, schema, cs, shard_size=2)
    assert manifest.num_shards == 3 and manifest.num_examples == 6 and manifest.num_words == 26
    reader = CacheReader(url)
    request_all = {"examples": reader.manifest.examples.field_names(), "tiny": [f.name for f in TEACHER_FIELDS]}
    for i, rows in enumerate(shards):
        data = reader.read_shard(i, request_all)
        assert data.example_ids == [r["example_id"] for r in rows]
        for j, row in enumerate(rows):
            got = data.row(j)
            for k in ("corpus", "split", "index", "doc_id", "n_words", "words", "tags"):
                assert got["examples"][k] == row[k]
            want = {name: tcols[i][name][j] for name in tcols[i]}
            t = got["tiny"]
            assert t["kbest_paths"] == want["kbest_paths"]
            np.testing.assert_allclose(t["kbest_logprob"], want["kbest_logprob"], rtol=1e-7)
            assert t["log_z"] == pytest.approx(want["log_z"], rel=1e-6)
            assert t["gold_nll"] == (None if want["gold_nll"] is None else pytest.approx(want["gold_nll"], rel=1e-6))
            np.testing.assert_allclose(t["logits"], want["logits"], rtol=1e-3, atol=1e-3)  # fp16
            assert t["logits"].dtype == np.float16
            np.testing.assert_array_equal(t["marginals"], want["marginals"])
            np.testing.assert_allclose(t["hidden_1"], want["hidden_1"], rtol=1 / 128)  # bf16: 8 bits
            assert t["hidden_1"].dtype == np.float32
            np.testing.assert_array_equal(t["subword_word_ids"], want["subword_word_ids"])
            np.testing.assert_array_equal(t["subword_logits"], want["subword_logits"])
    assert verify_cache(url) == []


def test_reader_reads_only_requested_fields_and_random_access(tmp_path, corpora):
    schema, cs = corpora
    url = str(tmp_path / "cache")
    _, shards, tcols = build_cache(url, schema, cs, shard_size=4)
    reader = CacheReader(url)
    data = reader.read_shard(1, {"tiny": ["logits"]})
    assert set(data.columns) == {"tiny"} and set(data.columns["tiny"]) == {"logits"}
    np.testing.assert_allclose(data.get("tiny", "logits")[1], tcols[1]["logits"][1], atol=1e-2)
    rows = list(reader.iter_examples({"examples": ["words"]}))
    assert [r["examples"]["words"] for r in rows] == [r["words"] for s in shards for r in s]
    with pytest.raises(CacheError, match="has no field 'nope'; it holds: kbest_paths"):
        reader.read_shard(0, {"tiny": ["nope"]})
    with pytest.raises(CacheError, match="no layer 'other'; its layers are: examples, tiny"):
        reader.read_shard(0, {"other": ["x"]})
    with pytest.raises(CacheError, match="shard 9 does not exist"):
        reader.read_shard(9)


def test_plain_pyarrow_and_zarr_can_read_a_cache(tmp_path, corpora):
    """The cache contract: no seqdistill needed to read words, k-best paths and logits."""
    schema, cs = corpora
    url = tmp_path / "cache"
    _, shards, tcols = build_cache(str(url), schema, cs, shard_size=2)
    manifest = json.loads((url / "manifest.json").read_text())
    layers = {layer["name"]: layer for layer in manifest["layers"]}
    shard = layers["tiny"]["shards"][1]["path"]
    words = (
        pq.read_table(url / layers["examples"]["shards"][1]["path"] / "records.parquet", columns=["words"])
        .column("words")
        .to_pylist()
    )
    paths = pq.read_table(url / shard / "records.parquet", columns=["kbest_paths"]).column(0).to_pylist()
    group = zarr.open_group(str(url / shard / "dense.zarr"), mode="r")
    off = group["offsets/word"][:]
    logits = group["logits"][off[1] : off[2]]
    assert words == [r["words"] for r in shards[1]]
    assert paths[1] == tcols[1]["kbest_paths"][1]
    np.testing.assert_allclose(logits, tcols[1]["logits"][1], atol=1e-2)


def test_field_rules():
    with pytest.raises(FieldError, match="per-word floats go to zarr"):
        FieldSpec("logits", "word", "float32", storage="parquet")
    with pytest.raises(FieldError, match="nested lists of floats"):
        FieldSpec("scores", "example", "float32", ("k", "words"))
    with pytest.raises(FieldError, match="only stored in zarr"):
        FieldSpec("x", "example", "float16")
    with pytest.raises(FieldError, match="zarr field's per-unit shape must be fixed ints"):
        FieldSpec("x", "word", "float16", ("k",), storage="zarr")
    with pytest.raises(FieldError, match="names are lower-case identifiers"):
        FieldSpec("example_id", "example", "int32")
    f = FieldSpec("kbest_paths", "example", "int16", ("k", "words"))
    assert str(f.arrow_type()) == "list<item: list<item: int16>>"
    assert FieldSpec.from_json(f.to_json()) == f


def test_writer_validates_shapes_and_alignment(tmp_path, corpora):
    from conftest import all_rows, examples_columns, make_teacher, teacher_columns

    from seqdistill.cache_schema import CacheWriter, ShardError

    schema, cs = corpora
    rows = all_rows(cs)
    w = CacheWriter(str(tmp_path / "c"))
    ex = w.examples_layer(schema, [c.info() for c in cs], 1)
    ex.write_shard(0, examples_columns(rows))
    tl = w.teacher_layer(make_teacher(), TEACHER_FIELDS)
    cols = teacher_columns(rows)
    bad = dict(cols, logits=[x[:, :3] for x in cols["logits"]])
    with pytest.raises(FieldError, match=r"field 'logits' row 0 has shape \[4, 3\], expected \[words, 9\]"):
        tl.write_shard(0, bad)
    bad = dict(cols, marginals=[x[:-1] for x in cols["marginals"]])
    with pytest.raises(FieldError, match="field 'marginals' row 0 has 3 words, the example has 4"):
        tl.write_shard(0, bad)
    bad = dict(cols, kbest_paths=[[p[:-1] for p in x] for x in cols["kbest_paths"]])
    with pytest.raises(FieldError, match="dimension 'words' of 3, the example has 4"):
        tl.write_shard(0, bad)
    for paths in ([np.asarray(x, np.float32) for x in cols["kbest_paths"]], [[[0, 1.5, 2, 0]]] * len(rows)):
        with pytest.raises(FieldError, match="field 'kbest_paths' is int16 but was given non-integer values"):
            tl.write_shard(0, dict(cols, kbest_paths=paths))  # Arrow alone would store 1.5 as 1
    bad = dict(cols, example_id=list(reversed(cols["example_id"])))
    with pytest.raises(ShardError, match="example ids do not match the examples layer"):
        tl.write_shard(0, bad)
    bad = dict(cols, log_z=[None] * len(rows))
    with pytest.raises(FieldError, match="'log_z' has nulls but is not nullable"):
        tl.write_shard(0, bad)
    bad = dict(cols, logits=[x * 1e6 for x in cols["logits"]])
    with pytest.raises(FieldError, match="overflows float16"):
        tl.write_shard(0, bad)
    inf = dict(cols, logits=[np.where(np.arange(x.size).reshape(x.shape) == 0, np.inf, x) for x in cols["logits"]])
    with pytest.raises(FieldError, match="overflows float16"):  # an infinity beside an overflow: still refused
        tl.write_shard(0, dict(inf, logits=[np.where(x == np.inf, x, x * 1e6) for x in inf["logits"]]))
    with pytest.raises(FieldError, match=r"fields \['log_z'\] have no column"):
        tl.write_shard(0, {k: v for k, v in cols.items() if k != "log_z"})
    tl.write_shard(0, cols)
    w.commit()
    assert verify_cache(str(tmp_path / "c")) == []


def test_info_and_verify_commands(tmp_path, corpora):
    schema, cs = corpora
    url = str(tmp_path / "cache")
    build_cache(url, schema, cs)
    runner = CliRunner()
    r = runner.invoke(cache_cli, ["info", url])
    assert r.exit_code == 0, r.output
    assert "6 examples, 26 words in 3 shards" in r.output and "B/word" in r.output
    assert "conll/train" in r.output and "tiny: crf" in r.output
    r = runner.invoke(cache_cli, ["info", url, "--json"])
    summary = json.loads(r.output)
    tiny = next(layer for layer in summary["layers"] if layer["name"] == "tiny")
    logits = next(f for f in tiny["fields"] if f["name"] == "logits")
    assert logits["bytes"] > 0 and logits["bytes_per_word"] == pytest.approx(logits["bytes"] / 26, abs=0.01)
    r = runner.invoke(cache_cli, ["verify", url])
    assert r.exit_code == 0 and "OK" in r.output
    r = runner.invoke(cache_cli, ["info", str(tmp_path / "nothing")])
    assert r.exit_code == 1 and "has no manifest.json" in r.output
