"""Compact encodings (cache v1.1): int8 hidden states, PCA projections, sparse top-k distributions."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import in_child, toy_cache

from seqdistill.cache_schema import CacheReader, FieldError, FieldSpec, verify_cache
from seqdistill.cache_schema.encodings import decode, encode, fit_pca, project, reconstruct
from seqdistill.cache_schema.fields import from_storage, to_storage
from seqdistill.cache_schema.manifest import seal
from seqdistill.cli.cache import main as cache_cli


def _roundtrip(x, spec):
    arrays = encode(x, spec, to_storage)
    return arrays, decode(arrays, spec, from_storage, "test")


# -- the rules, by hand ----------------------------------------------------------------------------
def test_int8_absmax_is_within_half_a_step_of_each_rows_scale():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 24)).astype(np.float32)
    x[3] = 0.0  # an all-zero row
    x[7, 5] = 80.0  # an outlier sets its row's scale
    spec = FieldSpec("h", "word", "int8", (24,), "zarr", encoding={"quantize": "int8-absmax"})
    arrays, y = _roundtrip(x, spec)
    assert arrays["h"].dtype == np.int8 and arrays["scale/h"].shape == (200,)
    step = np.abs(x).max(axis=1) / 127
    assert (np.abs(y - x) <= step[:, None] / 2 + 1e-6).all()
    assert (y[3] == 0).all() and y[7, 5] == pytest.approx(80.0)
    # by hand: row [1, -0.5, 0.25] has scale 1; -0.5 -> round(-63.5) = -64 (to even) -> -64/127
    spec3 = FieldSpec("h", "word", "int8", (3,), "zarr", encoding={"quantize": "int8-absmax"})
    arrays, y = _roundtrip(np.array([[1.0, -0.5, 0.25]], np.float32), spec3)
    assert arrays["h"].tolist() == [[127, -64, 32]]
    assert y[0].tolist() == pytest.approx([1.0, -64 / 127, 32 / 127])


def test_topk_residual_rule_by_hand():
    p = np.array([[0.6, 0.05, 0.3, 0.05], [0.25, 0.25, 0.25, 0.25]], np.float32)
    spec = FieldSpec("marginals", "word", "float32", (4,), "zarr", encoding={"topk": 2, "fill": "residual"})
    arrays, y = _roundtrip(p, spec)
    assert arrays["marginals"].shape == (2, 2) and arrays["topk_index/marginals"].dtype == np.uint8
    assert y[0].tolist() == pytest.approx([0.6, 0.05, 0.3, 0.05])  # residual 0.1 over 2 tags
    assert y[1].tolist() == pytest.approx([0.25] * 4)
    assert y.sum(axis=1) == pytest.approx([1.0, 1.0])


def test_topk_logmeanexp_rule_keeps_the_softmax_of_the_top_tags_and_stays_finite():
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(50, 30)) * 4).astype(np.float32)
    x[0] = [100.0] + [-100.0] * 29  # nearly all mass on one tag
    x[1, :3] = [11.3, 2.1, -1.0]  # a tiny residual: the fill stays below the kept values
    spec = FieldSpec("emissions", "word", "float16", (30,), "zarr", encoding={"topk": 5, "fill": "logmeanexp"})
    arrays, y = _roundtrip(x, spec)
    assert np.isfinite(y).all() and y[0, 1:].tolist() == pytest.approx([-100.0] * 29)
    kept_min = np.sort(x, axis=1)[:, -5]
    assert (arrays["fill/emissions"] <= kept_min + 1e-4).all()

    def softmax(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p, q = softmax(x.astype(np.float64)), softmax(y.astype(np.float64))
    idx = np.argsort(-x, axis=1)[:, :5]
    top_p, top_q = np.take_along_axis(p, idx, 1), np.take_along_axis(q, idx, 1)
    assert np.abs(top_p - top_q).max() < 5e-3  # fp16 storage of the values
    rest = np.ones_like(q, dtype=bool)
    np.put_along_axis(rest, idx, False, 1)
    for i in range(50):  # the rest is spread evenly, with the residual mass
        assert np.ptp(q[i][rest[i]]) < 1e-9
        assert q[i][rest[i]].sum() == pytest.approx(1 - top_p[i].sum(), abs=5e-3)
    # by hand: [2, 1, 0] top-1 -> the others get log(mean(e^1, e^0)) = log((e + 1) / 2)
    small = FieldSpec("emissions", "word", "float32", (3,), "zarr", encoding={"topk": 1, "fill": "logmeanexp"})
    _, y = _roundtrip(np.array([[2.0, 1.0, 0.0]], np.float32), small)
    assert y[0].tolist() == pytest.approx([2.0, np.log((np.e + 1) / 2), np.log((np.e + 1) / 2)])


def test_non_finite_values_are_refused_when_encoding():
    spec = FieldSpec("h", "word", "int8", (4,), "zarr", encoding={"quantize": "int8-absmax"})
    x = np.zeros((3, 4), np.float32)
    x[2, 1] = np.nan
    with pytest.raises(FieldError, match="field 'h': unit 2 holds NaN or inf"):
        encode(x, spec, to_storage)


def test_pca_matches_the_covariance_eigenvectors_and_reconstructs_low_rank_data():
    rng = np.random.default_rng(2)
    basis = rng.normal(size=(3, 10))
    x = (rng.normal(size=(500, 3)) * [5, 2, 1]) @ basis + rng.normal(size=10)
    comp, mean, kept = fit_pca(x, 3)
    assert kept == pytest.approx(1.0, abs=1e-6)
    assert np.abs(reconstruct(project(x, comp, mean), comp, mean) - x).max() < 1e-3
    # brute force: the top eigenvectors of the covariance span the same space
    w, v = np.linalg.eigh(np.cov(x.T))
    top = v[:, np.argsort(w)[::-1][:2]]
    comp2, _, kept2 = fit_pca(x, 2)
    assert np.abs(np.abs(comp2 @ top) - np.eye(2)).max() < 1e-3
    assert kept2 == pytest.approx(np.sort(w)[::-1][:2].sum() / w.sum(), rel=1e-4)


@pytest.mark.parametrize(
    "spec_kwargs, match",
    [
        (dict(dtype="float16", encoding={"quantize": "int8-absmax"}), "quantize stores int8"),
        (dict(dtype="int8", encoding={"quantize": "int4"}), "quantize 'int4' is not one of"),
        (dict(dtype="float16", encoding={"topk": 9, "fill": "residual"}), r"topk 9 must be an int in 1\.\.8"),
        (dict(dtype="float16", encoding={"topk": 2, "fill": "zero"}), "fill 'zero' is not one of"),
        (dict(dtype="float16", encoding={"topk": 2}), "fill None is not one of"),
        (dict(dtype="float16", encoding={"bits": 4}), r"keys \['bits'\] this seqdistill does not know"),
        (dict(dtype="float16", encoding={"project_from": 4, "project_export": "p.safetensors"}), "project_from 4"),
        (
            dict(dtype="float16", encoding={"project_from": 32, "project_export": "../p.safetensors"}),
            "not a file name inside the layer's exports",
        ),
    ],
)
def test_hostile_encodings_are_refused_by_name(spec_kwargs, match):
    with pytest.raises(FieldError, match=match):
        FieldSpec("marginals", "word", shape=(9,), storage="zarr", **spec_kwargs)


def test_aux_arrays_of_the_wrong_shape_or_range_are_refused_by_name():
    x = np.random.default_rng(3).normal(size=(6, 9)).astype(np.float32)
    q = FieldSpec("h", "word", "int8", (9,), "zarr", encoding={"quantize": "int8-absmax"})
    arrays = encode(x, q, to_storage)
    arrays["scale/h"] = arrays["scale/h"][:5]
    with pytest.raises(FieldError, match=r"w/scale/h: holds float32 \[5\], field 'h' needs float32 \[6\]"):
        decode(arrays, q, from_storage, "w")
    arrays = encode(x, q, to_storage)
    arrays["scale/h"][2] = np.nan
    with pytest.raises(FieldError, match="scales must be finite"):
        decode(arrays, q, from_storage, "w")
    t = FieldSpec("m", "word", "float16", (9,), "zarr", encoding={"topk": 3, "fill": "residual"})
    arrays = encode(x, t, to_storage)
    arrays["topk_index/m"][0, 0] = 200
    with pytest.raises(FieldError, match="tag index 200 is not below 9 tags"):
        decode(arrays, t, from_storage, "w")


# -- through a build -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def caches(tiny_encoder, tmp_path_factory):
    """The same tiny teacher over the same corpora: dense fp16, and int8 + PCA-8 + top-2."""
    dense = toy_cache(tiny_encoder, tmp_path_factory.mktemp("dense"), hidden_layers=(1,), shard_size=50)
    compact = toy_cache(
        tiny_encoder,
        tmp_path_factory.mktemp("compact"),
        hidden_layers=(1,),
        shard_size=50,
        hidden_dtype="int8",
        hidden_project=8,
        word_topk=2,
    )
    return dense, compact


def _all(reader, field):
    return np.concatenate([s.get("tiny", field).values for s in reader.iter_shards({"tiny": [field]})])


def test_a_compact_build_reads_back_close_to_the_dense_one(caches):
    dense, compact = CacheReader(caches[0]), CacheReader(caches[1])
    assert verify_cache(caches[1]) == []
    spec = compact.manifest.layers["tiny"].field("hidden_1")
    assert spec.shape == (8,) and spec.dtype == "int8"
    assert spec.encoding == {"quantize": "int8-absmax", "project_from": 32, "project_export": "projection.safetensors"}
    comp, mean = compact.projection("tiny", "hidden_1")
    coeffs = _all(compact, "hidden_1")
    expected = project(_all(dense, "hidden_1"), comp, mean)  # the fp16 states, projected
    assert coeffs.dtype == np.float32 and coeffs.shape == expected.shape
    step = np.abs(expected).max(axis=1) / 127
    assert (np.abs(coeffs - expected) <= step[:, None] / 2 + 0.02).all()  # int8 step + fp16 of the dense states
    m_dense, m_top = _all(dense, "marginals"), _all(compact, "marginals")
    assert m_top.shape == m_dense.shape and np.allclose(m_top.sum(axis=1), 1, atol=2e-3)
    top2 = np.argsort(-m_dense, axis=1)[:, :2]
    assert np.allclose(np.take_along_axis(m_top, top2, 1), np.take_along_axis(m_dense, top2, 1), atol=1e-3)
    e_top, e_dense = _all(compact, "emissions"), _all(dense, "emissions")
    assert (e_top.argmax(axis=1) == e_dense.argmax(axis=1)).all()
    # bytes: the manifest's per-field sizes shrink
    size = {
        name: sum(s.field_bytes[f] for s in CacheReader(c).manifest.layers["tiny"].shards for f in ["hidden_1"])
        for name, c in zip(["dense", "compact"], caches)
    }
    assert size["compact"] < size["dense"] / 2  # tiny shards: zarr metadata dominates; real ratios in BENCHMARKS
    r = CliRunner().invoke(cache_cli, ["info", caches[1]])
    assert r.exit_code == 0 and "int8-absmax" in r.output and "top-2" in r.output, r.output


def test_a_projection_of_the_wrong_dims_is_refused_by_name(caches, tmp_path):
    from safetensors.numpy import load, save

    copy = tmp_path / "c"
    shutil.copytree(caches[1], copy)
    path = copy / "layers/tiny/exports/projection.safetensors"
    tensors = load(path.read_bytes())
    tensors["hidden_1.components"] = tensors["hidden_1.components"][:, :16]
    path.write_bytes(save(tensors))
    obj = json.loads((copy / "manifest.json").read_text())  # a consistent (crafted) manifest
    for layer in obj["layers"]:
        for f in layer.get("exports", []):
            if f["path"].endswith("projection.safetensors"):
                import hashlib

                f["bytes"], f["sha256"] = path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(seal(obj)))
    with pytest.raises(FieldError, match=r"hidden_1\.components is \[8, 16\]; field 'hidden_1' needs \[8, 32\]"):
        CacheReader(str(copy)).projection("tiny", "hidden_1")


def test_a_killed_compact_build_resumes_with_the_projection_it_published(tiny_encoder, tmp_path, caches):
    """The PCA is fitted once and read back from the exports: a resumed build equals an uninterrupted one."""
    d = tmp_path / "k"
    d.mkdir()
    opts = dict(hidden_layers=(1,), shard_size=50, hidden_dtype="int8", hidden_project=8, word_topk=2)
    code = in_child(lambda: toy_cache(tiny_encoder, d, **opts), {"SEQDISTILL_FAILPOINT": "shard-marker:tiny:1"})
    assert code == -9 and not (d / "cache/manifest.json").exists()
    shutil.rmtree(d / "teacher", ignore_errors=True)
    toy_cache(tiny_encoder, d, **opts)
    a, b = CacheReader(str(d / "cache")), CacheReader(caches[1])
    for field in ("hidden_1", "marginals", "emissions"):
        assert np.array_equal(_all(a, field), _all(b, field)), field
    assert verify_cache(str(d / "cache")) == []


def test_build_refuses_options_that_cannot_work(tiny_encoder, tmp_path):
    with pytest.raises(Exception, match="--word-topk 5 keeps every one of the 5 tags of field 'emissions'"):
        toy_cache(tiny_encoder, tmp_path, word_topk=5)
    with pytest.raises(Exception, match="give --hidden-layers too"):
        toy_cache(tiny_encoder, tmp_path, hidden_project=8)
    with pytest.raises(Exception, match="the teacher's states have 32 dimensions; project to fewer"):
        toy_cache(tiny_encoder, tmp_path, hidden_layers=(1,), hidden_project=32)
    with pytest.raises(
        Exception, match=r"its sample holds \d+ words; project to fewer dimensions or raise --shard-size"
    ):
        toy_cache(tiny_encoder, tmp_path, hidden_layers=(1,), hidden_project=20, shard_size=2)
    assert not (tmp_path / "cache").exists()  # refused before anything is written


# -- students on the stored space ------------------------------------------------------------------
def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_xtremedistil_compares_with_the_states_rebuilt_from_pca_int8(caches, tmp_path):
    from seqdistill.cli.train import main as train_cli

    out = tmp_path / "xd"
    args = ["xtremedistil", "--cache", caches[1], "--out", str(out), "--schedule", "d4", "--teacher-layer", "1"]
    args += ["--embedding-dim", "8", "--hidden-size", "12", "--epochs-per-step", "1", "--device", "cpu"]
    r = CliRunner().invoke(train_cli, args)
    assert r.exit_code == 0, r.output
    from safetensors.numpy import load_file

    weights = load_file(str(out / "model.safetensors"))
    assert weights["project.weight"].shape == (32, 24)  # 2 x 12 LSTM units onto the teacher's 32 dims
    rl = [rec["loss_rl"] for rec in _records(out) if "loss_rl" in rec]
    assert rl and all(np.isfinite(rl)), _records(out)[:2]


def test_mt_hidden_loss_uses_the_stored_width(tiny_encoder, tmp_path):
    from seqdistill.cli.train import main as train_cli

    cache = toy_cache(
        tiny_encoder, tmp_path, hidden_layers=(1, 2), export_layers=1, hidden_dtype="int8", hidden_project=8
    )
    out = tmp_path / "mt"
    args = ["mt", "--cache", cache, "--out", str(out), "--student-layers", "1", "--epochs", "1", "--device", "cpu"]
    r = CliRunner().invoke(train_cli, args)
    assert r.exit_code == 0, r.output
    hid = [rec["loss_mt_hid"] for rec in _records(out) if "loss_mt_hid" in rec]
    assert hid and all(np.isfinite(hid)), _records(out)[:2]
