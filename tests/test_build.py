"""distill-cache build with tiny random teachers: contents, multi-teacher, refusals, kills, torchrun."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from conftest import CONLL, RAW, launched_env

from seqdistill.cache_schema import CacheReader, LabelSchema, verify_cache
from seqdistill.cli.cache import main as cache_cli
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, batches_by_length, build_cache
from seqdistill.teachers import build_teacher, load_teacher
from seqdistill.tokenization import word_pieces

SCHEMA = LabelSchema("IOB2", ("LOC", "MISC", "ORG", "PER"))
QUIET = dict(log=lambda *a: None)


@pytest.fixture(scope="module")
def teachers(tiny_encoder, tmp_path_factory):
    d = tmp_path_factory.mktemp("teachers")
    crf = build_teacher(tiny_encoder, SCHEMA, "crf")
    with torch.no_grad():
        crf.crf.transitions.normal_(generator=torch.Generator().manual_seed(3))
    crf.save(d / "crf")
    build_teacher(tiny_encoder, SCHEMA, "softmax").save(d / "tc")
    return str(d / "crf"), str(d / "tc")


@pytest.fixture
def corpus_paths(tmp_path):
    (tmp_path / "train.txt").write_text(CONLL)
    (tmp_path / "raw.txt").write_text(RAW)
    return [
        CorpusSpec("conll", str(tmp_path / "train.txt"), "train", True),
        CorpusSpec("wiki", str(tmp_path / "raw.txt"), "unlabelled", False),
    ]


def _cfg(**kw):
    return BuildConfig(**{"k": 4, "shard_size": 2, "hidden_layers": (1,), "device": "cpu", **kw})


def test_build_writes_what_the_teacher_computes(teachers, corpus_paths, tmp_path):
    crf_dir, tc_dir = teachers
    out = str(tmp_path / "cache")
    report = build_cache(out, crf_dir, corpus_paths, _cfg(max_words_per_batch=8), **QUIET)
    assert report.status == "built" and report.examples == 6 and report.words == 26
    assert set(report.bytes_per_word) >= {"kbest_paths", "emissions", "marginals", "hidden_1"}
    assert verify_cache(out) == []
    reader = CacheReader(out)
    teacher = load_teacher(crf_dir)
    rows = list(
        reader.iter_examples(
            {
                "examples": ["words", "tags"],
                "crf": ["kbest_paths", "kbest_log_probs", "log_z", "emissions", "marginals", "gold_nll", "hidden_1"],
            }
        )
    )
    words = [r["examples"]["words"] for r in rows]
    gold = torch.full((6, max(map(len, words))), -1)
    for i, r in enumerate(rows):
        if r["examples"]["tags"]:
            gold[i, : len(words[i])] = torch.tensor(SCHEMA.encode(r["examples"]["tags"]))
    want = teacher.outputs(words, gold, k=4, hidden_layers=(1,))
    for i, r in enumerate(rows):
        got, n = r["crf"], len(words[i])
        valid = torch.isfinite(want.kbest_log_probs[i])
        assert got["kbest_paths"] == want.kbest_paths[i][valid, :n].tolist()
        np.testing.assert_allclose(got["kbest_log_probs"], want.kbest_log_probs[i][valid].numpy(), rtol=1e-5, atol=1e-5)
        assert got["log_z"] == pytest.approx(want.log_z[i].item(), abs=1e-4)
        np.testing.assert_allclose(got["emissions"], want.logits[i, :n].numpy(), atol=2e-3)
        np.testing.assert_allclose(got["marginals"].astype(np.float32).sum(1), 1.0, atol=2e-3)
        np.testing.assert_allclose(got["hidden_1"], want.hidden[1][i, :n].numpy(), atol=5e-3)
        labelled = r["examples"]["tags"] is not None
        assert (got["gold_nll"] is not None) == labelled
        if labelled:
            assert got["gold_nll"] == pytest.approx(want.gold_nll[i].item(), abs=1e-4)
    exports = reader.exports("crf")
    assert {"embeddings.safetensors", "crf.safetensors", "label_schema.json", "tokenizer/tokenizer.json"} <= set(
        exports
    )
    from safetensors.numpy import load

    # every row of a small matrix (vocabulary.py, the default); --trim-vocabulary --frequent-subwords 0:
    # the rows of the subwords the corpora use, every piece of every word, and the specials
    export = load(reader.read_export("crf", "embeddings.safetensors"))
    full = teacher.encoder.get_input_embeddings().weight.detach().numpy()
    assert "ids" not in export
    np.testing.assert_array_equal(export["weight"], full)
    trimmed = str(tmp_path / "trimmed")
    build_cache(trimmed, crf_dir, corpus_paths, _cfg(trim_vocabulary=True, frequent_subwords=0), **QUIET)
    export = load(CacheReader(trimmed).read_export("crf", "embeddings.safetensors"))
    ids = export["ids"]
    used = {i for sentence in word_pieces(teacher.tokenizer, words) for piece in sentence for i in piece}
    assert used | set(teacher.tokenizer.all_special_ids) == set(ids.tolist())
    assert list(ids) == sorted(set(ids.tolist())) and len(ids) < full.shape[0]
    np.testing.assert_array_equal(export["weight"], full[ids].astype(np.float16))


def test_second_teacher_adds_a_layer_and_the_same_one_is_a_no_op(teachers, corpus_paths, tmp_path):
    crf_dir, tc_dir = teachers
    out = tmp_path / "cache"
    build_cache(str(out), crf_dir, corpus_paths, _cfg(), **QUIET)
    before = {p: p.stat().st_mtime_ns for p in (out / "layers" / "examples").rglob("*") if p.is_file()}
    report = build_cache(str(out), tc_dir, corpus_paths, _cfg(subwords=True), teacher_id="tiny-tc", **QUIET)
    assert report.status == "added"
    assert {p: p.stat().st_mtime_ns for p in (out / "layers" / "examples").rglob("*") if p.is_file()} == before
    reader = CacheReader(str(out))
    assert list(reader.manifest.layers) == ["examples", "crf", "tiny-tc"]
    data = reader.read_shard(1, {"crf": ["emissions"], "tiny-tc": ["logits", "subword_word_ids", "subword_ids"]})
    assert data.get("tiny-tc", "logits")[0].shape == data.get("crf", "emissions")[0].shape
    assert data.get("tiny-tc", "subword_word_ids")[0].tolist()[0] == 0
    assert verify_cache(str(out)) == []
    assert (
        build_cache(str(out), tc_dir, corpus_paths, _cfg(subwords=True), teacher_id="tiny-tc", **QUIET).status
        == "up-to-date"
    )


def test_changed_corpus_or_teacher_is_refused_unless_overwrite(teachers, corpus_paths, tmp_path, tiny_encoder):
    crf_dir, _ = teachers
    out = str(tmp_path / "cache")
    build_cache(out, crf_dir, corpus_paths, _cfg(), **QUIET)
    with open(corpus_paths[1].path, "a") as f:
        f.write("One more sentence .\n")
    r = CliRunner().invoke(
        cache_cli,
        [
            "build",
            "--out",
            out,
            "--teacher",
            crf_dir,
            "--labelled",
            f"conll={corpus_paths[0].path}",
            "--unlabelled",
            f"wiki={corpus_paths[1].path}",
            "--kbest",
            "4",
            "--shard-size",
            "2",
            "--hidden-layers",
            "1",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 1 and "corpus 'wiki' split 'unlabelled' changed" in r.output
    report = build_cache(out, crf_dir, corpus_paths, _cfg(overwrite=True), **QUIET)
    assert report.status == "built" and report.examples == 7
    other = tmp_path / "crf"  # another model under the same id
    t = build_teacher(tiny_encoder, SCHEMA, "crf", seed=99)
    t.save(other)
    with pytest.raises(Exception, match="teacher 'crf' in the cache is a different model: weights fingerprint"):
        build_cache(out, str(other), corpus_paths, _cfg(), **QUIET)
    with pytest.raises(Exception, match=r"decoded with .*'k': 4.*this run asks for .*'k': 5"):
        build_cache(out, crf_dir, corpus_paths, _cfg(k=5), **QUIET)
    assert build_cache(out, str(other), corpus_paths, _cfg(overwrite=True), **QUIET).status == "added"
    assert verify_cache(out) == []


def test_bad_input_stops_before_anything_is_written(teachers, tmp_path):
    crf_dir, _ = teachers
    bad = tmp_path / "bad.txt"
    bad.write_text("Ann B-PER\nsings O\n\nBob B-ANIMAL\n")
    out = tmp_path / "cache"
    r = CliRunner().invoke(
        cache_cli, ["build", "--out", str(out), "--teacher", crf_dir, "--labelled", f"x={bad}", "--device", "cpu"]
    )
    assert r.exit_code == 1 and f"{bad}:4: tag 'B-ANIMAL' is not in the label schema" in r.output
    assert not out.exists()


def test_batches_by_length_respect_the_budget():
    lengths = [5, 1, 9, 3, 3, 20, 2]
    batches = batches_by_length(lengths, 10)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 10
    assert [lengths[b[0]] for b in batches] == sorted(lengths[b[0]] for b in batches)


def _cli_build(out, crf_dir, specs, env=None, runner=None, extra=()):
    args = [
        "build",
        "--out",
        out,
        "--teacher",
        crf_dir,
        "--labelled",
        f"conll={specs[0].path}",
        "--unlabelled",
        f"wiki={specs[1].path}",
        "--kbest",
        "4",
        "--shard-size",
        "2",
        "--hidden-layers",
        "1",
        "--device",
        "cpu",
        *extra,
    ]
    cmd = (runner or [sys.executable, "-m", "seqdistill.cli.cache"]) + args
    full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)


def _contents(out):
    reader = CacheReader(out)
    fields = {name: layer.field_names() for name, layer in reader.manifest.layers.items()}
    return [
        (
            s.example_ids,
            {
                k: {f: (v.values if hasattr(v, "values") else v.to_pylist()) for f, v in cols.items()}
                for k, cols in s.columns.items()
            },
        )
        for s in reader.iter_shards(fields)
    ]


def _close(x, y, atol):
    if isinstance(x, np.ndarray):
        np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), atol=atol)
    elif isinstance(x, list):
        assert len(x) == len(y)
        for a, b in zip(x, y):
            _close(a, b, atol)
    elif isinstance(x, float):
        assert y == pytest.approx(x, abs=atol)
    else:
        assert x == y


def _assert_same(a, b, atol=0.0):
    assert len(a) == len(b)
    for (ids_a, cols_a), (ids_b, cols_b) in zip(a, b):
        assert ids_a == ids_b
        assert cols_a.keys() == cols_b.keys()
        for layer in cols_a:
            for f in cols_a[layer]:
                _close(cols_a[layer][f], cols_b[layer][f], atol)


@pytest.mark.parametrize(
    "point", ["shard-data:crf:1", "manifest"]
)  # the real CLI; test_reliability.py kills at 20+ points
def test_killed_build_resumes_to_the_same_cache(teachers, corpus_paths, tmp_path, point):
    crf_dir, _ = teachers
    clean = str(tmp_path / "clean")
    build_cache(clean, crf_dir, corpus_paths, _cfg(), **QUIET)
    out = str(tmp_path / "killed")
    first = _cli_build(out, crf_dir, corpus_paths, {"SEQDISTILL_FAILPOINT": point})
    assert first.returncode == -9, first.stderr[-2000:]
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    second = _cli_build(out, crf_dir, corpus_paths)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed" in second.stdout
    assert verify_cache(out) == []
    _assert_same(_contents(out), _contents(clean))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_torchrun_build_equals_a_single_process_build(teachers, corpus_paths, tmp_path):
    """Two ranks under torchrun write the cache one process writes (to 1e-3); the launcher's own
    scratch, its torchelastic_* log folder, goes to the test's temporary directory (launched_env)."""
    crf_dir, _ = teachers
    single = str(tmp_path / "single")
    build_cache(single, crf_dir, corpus_paths, _cfg(), **QUIET)
    out = str(tmp_path / "ranks")
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "-m",
        "seqdistill.cli.cache",
    ]
    env = launched_env(tmp_path, OMP_NUM_THREADS="1")
    r = _cli_build(out, crf_dir, corpus_paths, env, runner=torchrun)
    assert r.returncode == 0, r.stderr[-3000:]
    assert verify_cache(out) == []
    _assert_same(_contents(out), _contents(single), atol=1e-3)
    # the launcher's log folder went to the test's own temporary directory, not the system's
    assert [p.name.startswith("torchelastic_") for p in Path(env["TMPDIR"]).iterdir()] == [True]


def test_build_to_an_fsspec_url(teachers, corpus_paths, request, tmp_path):
    crf_dir, _ = teachers
    url = f"memory://{request.node.name}/cache"
    assert build_cache(url, crf_dir, corpus_paths, _cfg(), **QUIET).status == "built"
    assert verify_cache(url) == []
    reader = CacheReader(url)
    assert reader.read_shard(2, {"crf": ["marginals"]}).get("crf", "marginals")[0].shape[1] == SCHEMA.num_tags
    assert "tokenizer/tokenizer.json" in reader.exports("crf")
    assert os.path.exists(os.path.join(reader.export_dir("crf", tmp_path), "embeddings.safetensors"))
    assert build_cache(url, crf_dir, corpus_paths, _cfg(), **QUIET).status == "up-to-date"


def test_bf16_on_the_cpu_is_asked_for_by_name_and_recorded(teachers, corpus_paths, tmp_path):
    """--precision auto (the default) builds a CPU cache in fp32; bf16 asked for by name autocasts
    the teacher on the CPU, keeps the k-best paths' log-probabilities fp32 and normalised, and the
    manifest records what ran; fp16 on a CPU is refused before anything is written."""
    crf_dir, _ = teachers
    exact = build_cache(str(tmp_path / "auto"), crf_dir, corpus_paths, _cfg(dtype="fp32"), **QUIET)
    build_cache(str(tmp_path / "bf16"), crf_dir, corpus_paths, _cfg(dtype="fp32", precision="bf16"), **QUIET)
    assert exact.status == "built"
    fields = {"crf": ["emissions", "kbest_log_probs"]}
    a, b = (CacheReader(str(tmp_path / d)) for d in ("auto", "bf16"))
    assert a.manifest.teachers["crf"].decoding["precision"] == "fp32"
    assert b.manifest.teachers["crf"].decoding["precision"] == "bf16"
    ea, eb = (np.concatenate(r.read_shard(0, fields).get("crf", "emissions")) for r in (a, b))
    assert not np.array_equal(ea, eb)  # the forward pass did run in bf16
    np.testing.assert_allclose(ea, eb, atol=0.1)
    stored = b.read_shard(0, fields).get("crf", "kbest_log_probs")
    assert b.manifest.layers["crf"].field("kbest_log_probs").dtype == "float32"
    assert stored.type.value_type == pa.float32()  # as written, not only as declared
    for lp in stored.to_pylist():
        lp = np.asarray(lp, dtype=np.float64)
        assert np.isfinite(lp[0]) and np.exp(lp).sum() <= 1 + 1e-5
    values = torch.tensor(stored.flatten().to_numpy())
    assert not torch.equal(values, values.bfloat16().float())  # computed in fp32: not bf16 values
    r = CliRunner().invoke(
        cache_cli,
        ["build", "--out", str(tmp_path / "fp16"), "--teacher", crf_dir, "--labelled", f"x={corpus_paths[0].path}"]
        + ["--device", "cpu", "--precision", "fp16"],
    )
    assert r.exit_code != 0 and "--precision: precision fp16 runs on a GPU only" in r.output
    assert not (tmp_path / "fp16").exists()
