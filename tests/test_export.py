"""distill-export and the Tagger: every student kind and teacher kind exported to ONNX gives the
torch model's tags; int8 stays close; tags never depend on the batch; character offsets; damaged or foreign directories refused
by name; an export runs without the teachers package."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from seqdistill.cache_schema import LabelSchema
from seqdistill.cli.export import main as export_main
from seqdistill.deploy.export import export_model
from seqdistill.inference import ExportError, Tagger, split_words
from seqdistill.students.archs import architectures as student_architectures
from seqdistill.students.base import StudentConfig, save_student

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))
BIOES = LabelSchema("BIOES", ("LOC", "ORG", "PER"))
WORDS = ["the", "eu", "peter", "paris", "rome", "anna", "visits", "xq", "zz9", "a-b", ".", ",", "qqqqqqq", "é"]
VECTOR_WORDS = ["the", "Paris", "paris", "rome", "peter", "é", "café", "東京", "naïve", "zoë's", "i̇stanbul", "οδος"]


def sentences(n: int = 24, seed: int = 0, long: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    out = [[rng.choice(WORDS) for _ in range(rng.randint(1, 12))] for _ in range(n)]
    if long:  # past the tiny encoder's 64 positions: windows
        out.append([rng.choice(WORDS) for _ in range(long)])
    return out


def _randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Random weights everywhere, CRF and BatchNorm statistics included, so that decoding is not trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
        for m in model.modules():  # as training keeps it: an embedding's padding row stays zero
            if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()


def make_student(tiny_encoder, d, arch: str, schema=SCHEMA, **kw):
    from transformers import AutoTokenizer, BertConfig

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    vocab = BertConfig.from_pretrained(tiny_encoder).vocab_size  # the tiny vocabulary repeats "##s"
    extra = kw.pop("extra", {})
    kept = kw.pop("kept", None)  # a trimmed vocabulary (seqdistill.vocabulary): these teacher ids, and the UNK row
    vector_words = kw.pop("word_vectors", None)  # pretrained word vectors (students/word_vectors.py) of these words
    if vector_words is not None:
        from seqdistill.students.word_vectors import WordVectors

        vectors = np.random.default_rng(2).normal(size=(len(vector_words), 4)).astype(np.float32)
        kw.update(WordVectors.sizes(vector_words, vectors))
    if kept is not None:
        kw["teacher_vocab_size"], vocab = vocab, len(kept) + 1
    if arch == "transformer":
        enc = BertConfig.from_pretrained(tiny_encoder).to_dict()
        enc["num_hidden_layers"] = 1
        enc["vocab_size"] = vocab
        cfg = student_architectures()[arch].config_class(
            schema.to_json(),
            vocab,
            32,
            embedding="teacher",
            hidden_size=32,
            num_layers=1,
            encoder_config=enc,
            extra={"cls_token_id": tok.cls_token_id, "sep_token_id": tok.sep_token_id},
            **kw,
        )
    else:
        if arch == "rnn-tagger":
            extra = {"entity_types": list(schema.entity_types), **extra}
        config_class = getattr(student_architectures()[arch], "config_class", StudentConfig)
        cfg = config_class(schema.to_json(), vocab, 12, hidden_size=6, arch=arch, extra=extra, **kw)
    model = student_architectures()[arch](cfg)
    _randomize(model)
    if kept is not None:
        model.vocab.fill(torch.tensor(kept))
    if vector_words is not None:
        model.word_vectors.fill(vector_words, vectors)
    save_student(model.eval(), tok, d)
    return d


def make_teacher(tiny_encoder, d, kind: str, schema=SCHEMA, **build):
    from seqdistill.teachers import build_teacher

    t = build_teacher(tiny_encoder, schema, kind, **build)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in t.classifier.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
        if kind == "crf":
            for p in t.crf.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    t.save(d)
    return d


def torch_tags(model_dir, sents):
    """The torch model's own decoding (its CRF, softmax head, BILOU layers or SenTScore), not the Tagger's."""
    from pathlib import Path

    from seqdistill.inference.torch_models import is_student_dir

    if is_student_dir(Path(model_dir)):
        from seqdistill.students.archs import load_student
        from seqdistill.students.common import predict_tags

        model, tok = load_student(model_dir)
        return predict_tags(model, tok, sents, batch_size=7)
    from seqdistill.teachers import load_teacher

    t = load_teacher(model_dir)
    return [tags for i in range(0, len(sents), 7) for tags in t.predict(sents[i : i + 7])]


STUDENTS = [
    ("bilstm-crf", {}),
    ("bilstm-crf", {"char_dim": 6, "char_filters": 5}),  # with the char CNN feature
    ("bilstm-tagger", {"pooling": "first"}),
    ("bilstm-tagger", {"pooling": "mean"}),
    ("transformer", {"head": "crf"}),
    ("transformer", {"head": "softmax"}),
    ("rnn-tagger", {"extra": {"cell": "lstm"}}),
    ("rnn-tagger", {"extra": {"cell": "sru"}}),
    ("rnn-tagger", {"extra": {"cell": "sru++"}}),
    ("rnn-tagger", {"extra": {"cell": "sru++", "projection": 6}}),  # folded into the table
    ("cnn-crf", {"projection": 5, "width": 8, "dilations": (1, 3), "char_dim": 6, "char_filters": 5}),
    ("cnn-crf", {"projection": 0, "width": 8, "dilations": (2,)}),  # no projection, no char feature
    # with word vectors: as written ("Paris" and "paris" are two rows), lowercased, UTF-8 words, unknown words
    ("cnn-crf", {"word_vectors": VECTOR_WORDS, "projection": 5, "width": 8, "char_dim": 6, "char_filters": 5}),
    ("cnn-crf", {"word_vectors": VECTOR_WORDS, "projection": 0, "width": 8, "dilations": (1,)}),  # no char feature
    ("bilstm-crf", {"word_vectors": VECTOR_WORDS, "char_dim": 6, "char_filters": 5}),
    # a hashed word table (issue 83): no word list, each word its key's and n-grams' rows
    (
        "cnn-crf",
        {"word_hash_rows": 50, "word_vectors_dim": 4, "projection": 5, "width": 8, "char_dim": 6, "char_filters": 5},
    ),
]


KEPT = [0, 1, 2, 3, 5, 8, 13, 21, 34, 41, 45, 50, 61, 73, 75, 77]  # specials, some chars, pieces, words
STUDENTS += [  # over a trimmed vocabulary: the map from teacher ids to rows is part of the graph
    ("bilstm-crf", {"kept": KEPT, "char_dim": 6, "char_filters": 5}),
    ("bilstm-tagger", {"kept": KEPT, "pooling": "mean"}),
    ("transformer", {"kept": KEPT, "head": "crf"}),
    ("rnn-tagger", {"kept": KEPT, "extra": {"cell": "sru++"}}),
    ("cnn-crf", {"kept": KEPT, "projection": 4, "width": 6, "char_dim": 6, "char_filters": 5}),
]


def _student_id(arch, kw):
    named = (v for k, v in kw.items() if k not in ("kept", "word_vectors"))
    return f"{arch}-{'trimmed-' if 'kept' in kw else ''}{'vectors-' if 'word_vectors' in kw else ''}{next(named, '')}"


@pytest.mark.parametrize("arch,kw", STUDENTS, ids=[_student_id(a, k) for a, k in STUDENTS])
def test_every_student_kind_exports_with_the_torch_tags(tiny_encoder, tmp_path, arch, kw):
    kw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()}
    schema = BIOES if arch in ("bilstm-crf", "cnn-crf") else SCHEMA  # a scheme with forbidden moves beside IOB2's
    src = make_student(tiny_encoder, tmp_path / "s", arch, schema, **kw)
    out = export_model(src, tmp_path / "onnx")
    sents = sentences(long=40 if arch == "transformer" else 0)
    expected = torch_tags(src, sents)
    exported, in_torch = Tagger.load(out), Tagger.load(src)
    assert exported.runtime == "onnx" and in_torch.runtime == "torch"
    assert exported.predict(sents, batch_size=5) == expected
    assert in_torch.predict(sents, batch_size=5) == expected
    a, b = exported.backend.scores(sents[:6]), in_torch.backend.scores(sents[:6])
    for i, s in enumerate(sents[:6]):  # real words only: padding positions are never read
        np.testing.assert_allclose(a[i, : len(s)], b[i, : len(s)], atol=1e-4)
    assert (exported.params, exported.params_without_embeddings) == (
        in_torch.params,
        in_torch.params_without_embeddings,
    )
    if arch == "rnn-tagger":  # nested spans from the per-type layers, as the rnn recipe reads them
        from seqdistill.students.archs import load_student
        from seqdistill.students.recipes.rnn import predict_spans

        model, tok = load_student(src)
        assert exported.predict_spans(sents) == predict_spans(model, tok, sents)
        if model.project is not None:  # shipped folded: a table [V, P], no [V, D] one and no projection matrix
            import onnx

            graph = onnx.load(str(out / json.loads((out / "export.json").read_text())["onnx"])).graph
            shapes = {tuple(t.dims) for t in graph.initializer}
            V, D = model.embed.weight.shape
            assert (V, model.project.out_features) in shapes and (V, D) not in shapes
            assert tuple(model.project.weight.shape) not in shapes


def test_the_export_tests_cover_every_registered_architecture_and_teacher_kind():
    """A new student architecture or teacher kind (one module, docs/ARCHITECTURE.md) is found by its
    registry; this keeps the export tests below from silently leaving it out."""
    from seqdistill.teachers import KINDS

    assert {a for a, _ in STUDENTS} == set(student_architectures())
    assert set(EXPORTED_KINDS) | {"sentscore", "span"} == set(KINDS)  # these two refuse export (their own tests)


EXPORTED_KINDS = ["crf", "softmax", "bilou-per-type"]


@pytest.mark.parametrize("kind", EXPORTED_KINDS)
def test_every_teacher_kind_exports_with_the_torch_tags(tiny_encoder, tmp_path, kind):
    src = make_teacher(tiny_encoder, tmp_path / "t", kind)
    out = export_model(src, tmp_path / "onnx")
    sents = sentences(long=50)  # the teacher's own overlapping windows
    meta = json.loads((out / "export.json").read_text())
    assert meta["kind"] == "teacher" and meta["model"] == kind and meta["source"]["weights"]
    assert Tagger.load(out).predict(sents, batch_size=5) == torch_tags(src, sents)
    if kind == "bilou-per-type":
        from seqdistill.teachers import load_teacher

        assert Tagger.load(out).predict_spans(sents) == load_teacher(src).predict_spans(sents)


def test_int8_stays_close_to_fp32(tiny_encoder, tmp_path):
    """Weight-only int8 of a BiLSTM-CRF (issue 34): scores within a stated tolerance of fp32 (0.1 on
    emissions of magnitude ~1-5 for these random weights), most tags the same, the MatMul and LSTM
    weights stored as int8 behind DequantizeLinear, and a graph that is smaller."""
    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    fp32, int8 = export_model(src, tmp_path / "fp32"), export_model(src, tmp_path / "int8", quantize="int8")
    a, b = Tagger.load(fp32), Tagger.load(int8)
    assert b.runtime == "onnx int8"
    sents = sentences(40, seed=3)
    sa, sb = a.backend.scores(sents[:8]), b.backend.scores(sents[:8])
    lengths = [len(s) for s in sents[:8]]
    real = np.concatenate([sa[i, :n] - sb[i, :n] for i, n in enumerate(lengths)])
    assert 0 < np.abs(real).max() < 0.1 * np.abs(sa).max()
    same = np.mean([x == y for p, q in zip(a.predict(sents), b.predict(sents)) for x, y in zip(p, q)])
    assert same > 0.95
    import onnx

    graph = onnx.load(str(int8 / "model.onnx")).graph
    int8_weights = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8}
    lstm_inputs = {i for n in graph.node if n.op_type == "LSTM" for i in n.input[1:3]}
    assert lstm_inputs and {f"{w}_int8" for w in lstm_inputs} <= int8_weights  # the recurrent weights are int8
    assert not {n.op_type for n in graph.node} & {"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "MatMulInteger"}


INVARIANT = [
    *(s for s in STUDENTS if "kept" not in s[1] or s[0] == "bilstm-crf"),  # one trimmed student, int8 included
    *(("teacher", {"kind": k}) for k in ["crf", "softmax", "bilou-per-type"]),
]


@pytest.mark.parametrize("arch,kw", INVARIANT, ids=[_student_id(a, k) for a, k in INVARIANT])
def test_tags_and_scores_do_not_depend_on_the_batch(tiny_encoder, tmp_path, arch, kw):
    """Issue 34: a sentence gets the same tags, span scores and word scores alone as in a batch of
    32 sentences of other lengths, in torch, in fp32 ONNX and in int8 ONNX, for every student
    architecture and teacher kind (dynamic int8 scaled activations over the whole batch and changed
    tags)."""
    kw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()}
    if arch == "teacher":
        src = make_teacher(tiny_encoder, tmp_path / "s", kw["kind"])
    else:
        src = make_student(tiny_encoder, tmp_path / "s", arch, **kw)
    sents = sentences(48, seed=7, long=40 if arch in ("transformer", "teacher") else 0)
    models = [src, export_model(src, tmp_path / "fp32"), export_model(src, tmp_path / "int8", quantize="int8")]
    for model in models:
        tagger = Tagger.load(model)
        alone, batched = tagger(sents, batch_size=1), tagger(sents, batch_size=32)
        assert [s.tags for s in alone] == [s.tags for s in batched], model
        for x, y in zip(alone, batched):
            assert [(p.start, p.end, p.type) for p in x.spans] == [(p.start, p.end, p.type) for p in y.spans]
            np.testing.assert_allclose(
                [p.score for p in x.spans], [p.score for p in y.spans], atol=1e-5, err_msg=str(model)
            )
        one = [tagger.backend.scores([s]) for s in sents[:32]]
        together = tagger.backend.scores(sents[:32])
        for i, s in enumerate(sents[:32]):
            np.testing.assert_allclose(one[i][0, : len(s)], together[i, : len(s)], atol=1e-5, err_msg=str(model))


def test_length_batches_never_pad_a_sentence_past_twice_its_length():
    """Tagger batches: at most batch_size sentences, and a batch ends where the next sentence is
    more than twice as long as its first (hand-checked cuts)."""
    from seqdistill.inference.tagger import length_batches

    lengths = [3, 1, 2, 5, 4, 9, 124, 40, 2, 80]
    assert [[lengths[i] for i in b] for b in length_batches(lengths, 3)] == [
        [1, 2, 2],
        [3, 4, 5],
        [9],
        [40, 80],
        [124],
    ]
    assert length_batches([], 32) == []


def test_character_offsets_point_into_the_original_text(tiny_encoder, tmp_path):
    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-tagger", pooling="first")
    tagger = Tagger.load(export_model(src, tmp_path / "onnx"))
    text = "Anna visits Rome, then  Rome again: Ünïcode café «Paris»… anna!"
    [s] = tagger(text, scores=True)
    assert s.text == text and s.words == split_words(text)[0]
    assert s.words[:4] == ["Anna", "visits", "Rome", ","] and "Ünïcode" in s.words and "«" in s.words
    for w, (a, b) in zip(s.words, s.offsets):
        assert text[a:b] == w
    rome = [o for w, o in zip(s.words, s.offsets) if w == "Rome"]
    assert rome == [(12, 16), (24, 28)]  # a repeated word gets its own offsets
    for span in s.spans:
        assert span.text == text[span.char_start : span.char_end]
        assert (span.char_start, span.char_end) == (s.offsets[span.start][0], s.offsets[span.end - 1][1])
        assert 0 < span.score <= 1
    # pre-split words: offsets into the words joined by one space; texts come back in input order
    out = tagger([["anna", "visits", "rome"], "peter ."], batch_size=1)
    assert out[0].text == "anna visits rome" and out[0].offsets == [(0, 4), (5, 11), (12, 16)]
    assert out[1].words == ["peter", "."] and tagger([]) == []
    with pytest.raises(TypeError, match="input 0"):
        tagger([[1, 2]])


def test_crf_span_scores_are_the_marginals(tiny_encoder, tmp_path):
    from seqdistill.crf import marginals

    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    tagger = Tagger.load(src)
    words = ["anna", "visits", "rome", "peter", "xq"]
    [s] = tagger([words])
    em = torch.from_numpy(tagger.backend.scores([words]))
    with torch.no_grad():
        m = marginals(em, torch.ones(1, len(words), dtype=torch.bool), *tagger.backend.module.crf.scores())[0]
    ids = SCHEMA.encode(s.tags)
    for span in s.spans:
        expected = float(np.mean([m[i, ids[i]] for i in range(span.start, span.end)]))
        assert span.score == pytest.approx(expected, abs=1e-5)


def test_damaged_and_foreign_directories_are_refused_by_name(tiny_encoder, tmp_path):
    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    out = export_model(src, tmp_path / "onnx")
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_model(src, out)
    with pytest.raises(ExportError, match="already an exported directory"):
        export_model(out, tmp_path / "again")
    graph = out / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(ExportError, match=r"model\.onnx: damaged"):
        Tagger.load(out)
    # a graph that matches export.json's checksum but is not ONNX at all
    graph.write_bytes(b"not a graph")
    meta = json.loads((out / "export.json").read_text())
    import hashlib

    meta["onnx_sha256"] = hashlib.sha256(b"not a graph").hexdigest()
    (out / "export.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match=r"model\.onnx: ONNX Runtime cannot load it"):
        Tagger.load(out)
    (out / "export.json").write_text("{broken")
    with pytest.raises(ExportError, match=r"export\.json: not valid JSON"):
        Tagger.load(out)
    (out / "export.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ExportError, match="not a seqdistill export"):
        Tagger.load(out)
    from seqdistill.inference.onnx_runtime import OnnxModel

    with pytest.raises(ExportError, match="no export.json; not an exported directory"):
        OnnxModel(tmp_path / "s")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        Tagger.load(tmp_path / "nothing")


@pytest.mark.parametrize(
    "breakage,message",
    [
        ("tokenizer.json deleted", r"tokenizer/tokenizer\.json: missing"),
        ("tokenizer.json garbage", r"tokenizer/tokenizer\.json: damaged"),
        ("decode file deleted", r"decode\.safetensors: missing"),
        ("onnx_sha256 null", r"onnx_sha256 is None, not a sha256"),
        ("graph outside", r"onnx '\.\./outside\.onnx' names a file outside"),
        ("listed file outside", r"files '\.\./x' names a file outside"),
        ("format 1", r"no checksums of the tokenizer files \(format 1"),
    ],
)
def test_a_broken_export_is_refused_naming_the_file(tiny_encoder, tmp_path, breakage, message):
    """Issue 34: every file an export needs is checked at load; a missing tokenizer.json used to
    load a 5-entry fallback tokenizer that tagged every word O, and a null checksum a damaged graph."""
    import shutil

    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    out = export_model(src, tmp_path / "onnx")
    meta = json.loads((out / "export.json").read_text())
    assert set(meta["files"]) >= {"tokenizer/tokenizer.json", "decode.safetensors"} and meta["tokenizer_size"] > 50
    Tagger.load(out)  # sound before the breakage
    if breakage == "tokenizer.json deleted":
        (out / "tokenizer" / "tokenizer.json").unlink()
    elif breakage == "tokenizer.json garbage":
        (out / "tokenizer" / "tokenizer.json").write_bytes(b"\xff\xfe garbage")
    elif breakage == "decode file deleted":
        (out / "decode.safetensors").unlink()
    elif breakage == "onnx_sha256 null":
        meta["onnx_sha256"] = None
    elif breakage == "graph outside":
        shutil.copyfile(out / "model.onnx", tmp_path / "outside.onnx")
        meta["onnx"] = "../outside.onnx"
    elif breakage == "listed file outside":
        (tmp_path / "x").write_text("x")
        meta["files"]["../x"] = "0" * 64
    elif breakage == "format 1":
        meta["format_version"] = 1
        del meta["files"], meta["tokenizer_size"]
    (out / "export.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match=message):
        Tagger.load(out)


def test_an_export_runs_without_the_teachers_package(tiny_encoder, tmp_path):
    src = make_teacher(tiny_encoder, tmp_path / "t", "crf")
    out = export_model(src, tmp_path / "onnx", quantize="int8")
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("seqdistill.teachers", "seqdistill.students")):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from seqdistill import Tagger
t = Tagger.load({str(out)!r})
print(t([["anna", "visits", "rome"]])[0].tags)
assert not any(m.startswith(("seqdistill.teachers", "seqdistill.students")) for m in sys.modules)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith("[")


def test_cli_export_check_and_predict_from_stdin(tiny_encoder, tmp_path):
    from seqdistill.cli.evaluate import eval_main, predict_main

    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    gold = tmp_path / "gold.txt"
    tagged = Tagger.load(src).predict(sentences(30, seed=5))
    gold.write_text(
        "".join("".join(f"{w} {t}\n" for w, t in zip(s, tg)) + "\n" for s, tg in zip(sentences(30, seed=5), tagged))
    )
    r = CliRunner().invoke(export_main, ["--model", str(src), "--out", str(tmp_path / "e"), "--check", str(gold)])
    assert r.exit_code == 0, r.output
    assert "torch 100.00, export 100.00" in r.output
    # the same gold as Parquet with integer tag ids, named by --tag-names
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = sorted({t for tg in tagged for t in tg})
    ids = [[names.index(t) for t in tg] for tg in tagged]
    pq.write_table(pa.table({"tokens": sentences(30, seed=5), "ner_tags": ids}), tmp_path / "gold.parquet")
    check = ["--model", str(src), "--check", str(tmp_path / "gold.parquet")]
    r = CliRunner().invoke(export_main, check + ["--out", str(tmp_path / "e3"), "--tag-names", ",".join(names)])
    assert r.exit_code == 0 and "torch 100.00, export 100.00" in r.output, r.output
    r = CliRunner().invoke(export_main, check + ["--out", str(tmp_path / "e4")])
    assert r.exit_code == 1 and "--tag-names" in r.output
    # a drop beyond --max-f1-drop fails with exit 1 (here any drop at all: -1 allows none, even 0)
    r = CliRunner().invoke(
        export_main, ["--model", str(src), "--out", str(tmp_path / "e2"), "--check", str(gold), "--max-f1-drop", "-1"]
    )
    assert r.exit_code == 1 and "more than --max-f1-drop -1" in r.output
    r = CliRunner().invoke(
        eval_main, ["--model", str(src), "--model", str(tmp_path / "e"), "--data", str(gold), "--no-latency", "--json"]
    )
    rows = json.loads(r.output)
    assert [x["runtime"] for x in rows] == ["torch", "onnx"] and rows[0]["f1"] == rows[1]["f1"] == 1.0
    assert rows[0]["threads"] == 1
    r = CliRunner().invoke(
        predict_main,
        ["--model", str(tmp_path / "e"), "--input", "-", "--format", "text", "--output-format", "jsonl"],
        input="Anna visits Rome.\n\npeter ,  paris\n",
    )
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.splitlines()]
    assert [x["words"] for x in lines] == [["Anna", "visits", "Rome", "."], ["peter", ",", "paris"]]
    assert lines[1]["offsets"] == [[0, 5], [6, 7], [9, 14]]
    r = CliRunner().invoke(predict_main, ["--model", str(src), "--input", str(gold)])
    assert r.exit_code == 0 and r.output.split("\n\n")[0].splitlines() == [
        f"{w} {t}" for w, t in zip(sentences(30, seed=5)[0], tagged[0])
    ]


def test_sentscore_teachers_are_not_exported_and_say_why(tmp_path):
    from seqdistill.teachers import TeacherError
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher

    teacher = type("Loaded", (), {"source_dir": tmp_path})()  # export_graph reads nothing else
    with pytest.raises(TeacherError, match="distil it into a student"):
        SentScoreTeacher.export_graph(teacher)


def test_span_teachers_are_not_exported_and_say_why(tiny_encoder, tmp_path, monkeypatch):
    """A GLiNER directory is read with the types a build names: loaded or exported without them, it
    is refused with what to do instead; loaded with them (as a build loads it), the span teacher
    itself refuses distill-export, naming its package's exporter, and nothing is written."""
    from test_span_teacher import TYPES, _gliner

    from seqdistill import teachers
    from seqdistill.teachers import LayerOptions, SpanOptions, TeacherError, load_teacher, parse_entity_types

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "gliner_config.json").write_text('{"max_width": 4}')
    (bare / "model.safetensors").write_bytes(b"")
    for refused in (lambda: load_teacher(bare), lambda: export_model(bare, tmp_path / "onnx")):
        with pytest.raises(TeacherError, match="distil it into a student to tag, evaluate or export"):
            refused()
    gliner = _gliner(tiny_encoder, tmp_path / "tiny-gliner")
    options = LayerOptions(3, span=SpanOptions(parse_entity_types(TYPES)))
    real = teachers.load_teacher
    monkeypatch.setattr(teachers, "load_teacher", lambda d, **kw: real(d, **{**kw, "options": options}))
    assert teachers.load_teacher(gliner).kind == "span"
    with pytest.raises(TeacherError, match=r"exported by its own package \(GLiNER\.export_to_onnx\); distill-export"):
        export_model(gliner, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


def test_a_model_remembers_each_words_pieces_exactly(tiny_encoder, tmp_path):
    """An exported model tokenizes a word once (``tokenization.PieceMemo``): the pieces it serves from
    memory are the tokenizer's own, the first word of a sentence keyed apart, and the scores of a
    model whose memo is warm are a fresh model's to the bit. A tokenizer that truncates is never
    served from memory: a word past its cut has no pieces of its own."""
    from transformers import AutoTokenizer

    from seqdistill.tokenization import PieceMemo, truncates, word_pieces

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    first, again = sentences(24, seed=1), sentences(24, seed=2)
    again = [
        s
        for s in again
        if all((w, j == 0) in {(x, i == 0) for t in first for i, x in enumerate(t)} for j, w in enumerate(s))
    ]
    assert again  # sentences made of words already seen, each in the same place (first or not)
    memo = PieceMemo()
    assert word_pieces(tok, first, memo) == word_pieces(tok, first)
    assert all(memo.get(s) is not None for s in again)  # served from memory ...
    assert word_pieces(tok, again, memo) == word_pieces(tok, again)  # ... and the tokenizer's own
    cut = AutoTokenizer.from_pretrained(tiny_encoder)
    cut.backend_tokenizer.enable_truncation(max_length=4)
    long = [["peter", "visits", "paris", "and", "rome", "peter", "visits"]]
    assert truncates(cut) and not truncates(tok)
    warm = PieceMemo()
    word_pieces(tok, long, warm)  # every word of it known
    assert word_pieces(cut, long, warm) == word_pieces(cut, long) != word_pieces(tok, long)

    out = export_model(
        make_student(tiny_encoder, tmp_path / "s", "cnn-crf", char_dim=6, char_filters=5), tmp_path / "x"
    )
    model = Tagger.load(out).backend
    assert model.memo.get(first[0]) is None
    model.scores(first)
    warm_scores = model.scores(again)
    assert all(model.memo.get(s) is not None for s in again)
    assert np.array_equal(warm_scores, Tagger.load(out).backend.scores(again))
