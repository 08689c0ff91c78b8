"""Pretrained word vectors as a student's word feature (students/word_vectors.py, --word-vectors)."""

import json

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import toy_cache
from safetensors.torch import load_file

from seqdistill.deploy.export import export_model
from seqdistill.inference import ExportError, Tagger
from seqdistill.students.archs import load_student
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import MGKDConfig
from seqdistill.students.sizes import parameter_counts
from seqdistill.students.word_vectors import WordVectors, WordVectorsError, read_word_vectors


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("wv"), k=4, shard_size=16)


def _glove(path, words, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(len(words), dim)).astype(np.float32)
    path.write_text("".join(f"{w} " + " ".join(f"{x:.6f}" for x in v) + "\n" for w, v in zip(words, vectors)))
    return vectors


def test_the_text_format_the_npy_directories_and_the_first_rows(tmp_path):
    vectors = _glove(tmp_path / "g.txt", ["the", "paris", "Étoile"])
    words, got = read_word_vectors(tmp_path / "g.txt")
    assert words == ["the", "paris", "Étoile"] and np.allclose(got, vectors, atol=1e-6)
    assert read_word_vectors(tmp_path / "g.txt", rows=2)[0] == ["the", "paris"]
    (tmp_path / "w2v.txt").write_text("2 3\n" + (tmp_path / "g.txt").read_text().split("\n", 1)[1])
    assert read_word_vectors(tmp_path / "w2v.txt")[0] == ["paris", "Étoile"]  # word2vec's header skipped
    for kind in ("txt", "parquet"):
        d = tmp_path / kind
        d.mkdir()
        np.save(d / "emb.npy", vectors)
        if kind == "txt":
            (d / "words.txt").write_text("the\nparis\nÉtoile\n")
        else:
            pq.write_table(pa.table({"index": ["the", "paris", "Étoile"]}), d / "words.parquet")
        words, got = read_word_vectors(d, rows=2)
        assert words == ["the", "paris"] and np.array_equal(got, vectors[:2])


@pytest.mark.parametrize(
    "text, message",
    [
        ("a 1 2\nb 1 x\n", r"g.txt, line 2: expected a word and its numbers"),
        ("a 1 2\nb 1 2 3\n", r"g.txt, line 2: 3 numbers where the first line has 2"),
        ("a 1 2\na 3 4\n", r"the word 'a' is listed twice"),
        ("", r"holds no word vectors"),
    ],
)
def test_a_bad_text_file_is_named_with_its_line(tmp_path, text, message):
    (tmp_path / "g.txt").write_text(text)
    with pytest.raises(WordVectorsError, match=message):
        read_word_vectors(tmp_path / "g.txt")


def test_a_directory_must_pair_one_matrix_with_its_words(tmp_path):
    np.save(tmp_path / "emb.npy", np.zeros((3, 2), np.float32))
    with pytest.raises(WordVectorsError, match="exactly one .npy matrix and one .parquet or .txt"):
        read_word_vectors(tmp_path)
    (tmp_path / "words.txt").write_text("a\nb\n")
    with pytest.raises(WordVectorsError, match=r"shape \(3, 2\) for the 2 words"):
        read_word_vectors(tmp_path)
    with pytest.raises(WordVectorsError, match="no such file or directory"):
        read_word_vectors(tmp_path / "missing.txt")


def test_words_are_looked_up_as_written_then_lowercased():
    words, vectors = ["Paris", "paris", "rome"], np.arange(6, dtype=np.float32).reshape(3, 2)
    table = WordVectors(*WordVectors.sizes(words, vectors).values())  # rows, dim, bytes
    table.fill(words, vectors)
    rows = table.rows([["Paris", "PARIS", "Rome", "london"], ["rome"]])
    assert rows.tolist() == [[1, 2, 3, 0], [3, 0, 0, 0]]  # as written; lowercased; unknown and padding: 0
    assert table(rows)[0, 3].abs().sum() == 0 and torch.equal(table(rows)[0, 0], torch.tensor([0.0, 1.0]))
    again = WordVectors(3, 2, table.words.numel())
    again.load_state_dict(table.state_dict())  # the words travel in the state dict
    assert torch.equal(again.rows([["Paris", "PARIS", "Rome", "london"]]), rows[:1])


def test_a_student_with_word_vectors_keeps_them_frozen_and_loads_with_its_words(cache, tmp_path):
    vectors = _glove(tmp_path / "g.txt", ["the", "visits", "paris", "rome", "peter", "anna"], dim=5)
    cfg = MGKDConfig(
        word_vectors=str(tmp_path / "g.txt"),
        word_vectors_rows=5,  # "anna" is left out: a zero vector
        chars=False,  # the tiny model's char table (257 x 30) would be its largest embedding
        projection=8,
        width=16,
        dilations=(1, 2),
        losses=("hard", "seq-ce"),
        k=4,
        epochs=8,
        lr=0.02,
        batch_size=8,
        device="cpu",
    )
    summary = train_student(cache, tmp_path / "s", cfg, log=lambda *a: None)
    assert summary["best_dev_f1"] > 0.9
    model, tokenizer = load_student(tmp_path / "s")
    total, without = parameter_counts(model)  # both word tables count as embeddings, as the export ships them:
    rows, dim = model.embed.weight.shape  # the teacher's table with the projection folded in, [V, 8]
    assert total == sum(p.numel() for p in model.parameters()) - rows * dim - 8 * dim + rows * 8
    assert total - without == rows * 8 + 6 * 5  # that table, and 5 words + row 0
    c = model.config
    assert (c.word_vectors_rows, c.word_vectors_dim) == (5, 5) and model.input.in_features == 8 + 5 + c.char_filters
    state = load_file(str(tmp_path / "s" / "model.safetensors"))
    assert torch.allclose(state["word_vectors.embed.weight"][1:], torch.from_numpy(vectors[:5]))  # frozen
    assert state["word_vectors.embed.weight"][0].abs().sum() == 0
    sents = [["anna", "visits", "Paris"], ["peter", "visits", "the", "rome"]]
    inputs = model.inputs(tokenizer, sents)
    assert inputs.word_ids.tolist() == [[0, 2, 3, 0], [5, 2, 1, 4]]
    with torch.no_grad():
        before = model(inputs)
        model.word_vectors.embed.weight.zero_()
        assert not torch.allclose(before, model(inputs))  # the feature reaches the emissions
    # the export: the table int8 in the graph, its words beside it, the same tags as torch
    out = export_model(tmp_path / "s", tmp_path / "int8", quantize="int8")
    meta = json.loads((out / "export.json").read_text())
    assert meta["format_version"] == 3 and meta["word_vectors"]["rows"] == 5 and "word_ids" in _graph_inputs(out)
    assert (out / "word_vectors.txt").read_text(encoding="utf-8").split("\n") == [
        "the",
        "visits",
        "paris",
        "rome",
        "peter",
    ]
    graph = onnx.load(str(out / "model.onnx")).graph
    table = next(t for t in graph.initializer if list(t.dims) == [6, 5])
    assert table.data_type == onnx.TensorProto.INT8  # per-row int8, as the teacher's table
    sents += [["Peter", "visits", "ROME", "anna", "the"]]
    assert Tagger.load(out).predict(sents) == Tagger.load(tmp_path / "s").predict(sents)


def _graph_inputs(d) -> set[str]:
    return {i.name for i in onnx.load(str(d / "model.onnx")).graph.input}


def test_an_export_whose_word_list_is_not_its_table_is_refused(tiny_encoder, tmp_path):
    """The export, untouched, tags as the torch student does, a word of each table row included; a
    word list with another number of words than the table's rows (checksum updated, as a hand edit
    would) is refused by name; a runtime of format 2 would refuse the export by its version; an
    export without word vectors keeps format 2."""
    from test_export import VECTOR_WORDS, make_student, sentences

    from seqdistill.inference.onnx_runtime import sha256_file

    src = make_student(tiny_encoder, tmp_path / "s", "cnn-crf", word_vectors=VECTOR_WORDS)
    out = export_model(src, tmp_path / "e")
    sents = sentences(16, seed=3) + [["Paris", "é"], VECTOR_WORDS, [w.upper() for w in VECTOR_WORDS]]
    tags = Tagger.load(out).predict(sents)
    assert [len(t) for t in tags] == [len(s) for s in sents] and tags == Tagger.load(src).predict(sents)
    words = out / "word_vectors.txt"
    words.write_text(words.read_text(encoding="utf-8") + "\nextra", encoding="utf-8")
    meta = json.loads((out / "export.json").read_text())
    meta["files"]["word_vectors.txt"] = sha256_file(words)
    (out / "export.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match=r"word_vectors.txt: 13 lines \(13 distinct words\) for a table of 12 rows"):
        Tagger.load(out)
    meta["word_vectors"]["file"] = "../x"  # a list from outside the directory is never read
    (out / "export.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match=r"word_vectors.file '\.\./x' is not among its checked files"):
        Tagger.load(out)
    plain = export_model(make_student(tiny_encoder, tmp_path / "p", "cnn-crf"), tmp_path / "pe")
    assert json.loads((plain / "export.json").read_text())["format_version"] == 2
    assert not (plain / "word_vectors.txt").exists() and "word_ids" not in _graph_inputs(plain)


def test_negative_rows_are_refused():
    with pytest.raises(ValueError, match="--word-vectors-rows"):
        MGKDConfig(word_vectors_rows=-1)


def test_an_export_keeps_the_first_rows_it_is_asked_for(tiny_encoder, tmp_path):
    """``--word-vectors-rows N``: the export's table and word list hold the first N words, and its
    tags are the torch student's with the rows past N zeroed (what an unknown word reads)."""
    from test_export import VECTOR_WORDS, make_student, sentences

    src = make_student(tiny_encoder, tmp_path / "s", "cnn-crf", word_vectors=VECTOR_WORDS, projection=4, width=8)
    out = export_model(src, tmp_path / "e", quantize="none", word_vectors_rows=4)
    meta = json.loads((out / "export.json").read_text())
    assert (meta["word_vectors"]["rows"], meta["word_vectors"]["trained_rows"]) == (4, 12)
    assert (out / "word_vectors.txt").read_text(encoding="utf-8").split("\n") == VECTOR_WORDS[:4]
    tagger = Tagger.load(src)
    with torch.no_grad():
        tagger.backend.module.word_vectors.embed.weight[5:] = 0.0
    sents = sentences(16, seed=3) + [["Paris", "café", "東京", "ROME", "the", "peter"]]
    assert Tagger.load(out).predict(sents) == tagger.predict(sents)
    total, _ = parameter_counts(load_student(src)[0])
    assert meta["params"] == total - 8 * 4  # the 8 rows left out, 4 wide
    with pytest.raises(ValueError, match=r"--word-vectors-rows 13: give 1 to 12"):
        export_model(src, tmp_path / "e13", word_vectors_rows=13)
    plain = make_student(tiny_encoder, tmp_path / "p", "cnn-crf")
    with pytest.raises(ValueError, match="the student has no word vectors"):
        export_model(plain, tmp_path / "pe", word_vectors_rows=4)
    assert not (tmp_path / "e13").exists() and not (tmp_path / "pe").exists()


def test_word_vectors_dropout_zeroes_whole_words_in_training_only(cache, tmp_path):
    """--word-vectors-dropout P: in training each word's vector is zero with probability P (whole
    vectors, not coordinates); in eval, and at P = 0, the vectors pass untouched with no draw. A
    training setting: the run's config records it, the student's config does not."""
    _glove(tmp_path / "g.txt", ["the", "visits", "paris", "rome", "peter", "anna"], dim=5)
    run = MGKDConfig(word_vectors=str(tmp_path / "g.txt"), word_vectors_dropout=0.5, chars=False, projection=8,
                     width=16, dilations=(1,), k=3, epochs=1, max_steps=2, device="cpu")  # fmt: skip
    train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    assert "\nword-vectors-dropout = 0.5\n" in (tmp_path / "s" / "config.toml").read_text()
    assert "dropout" not in {k for k in json.loads((tmp_path / "s" / "config.json").read_text()) if "word" in k}
    model, _ = load_student(tmp_path / "s")
    assert model.word_vectors_dropout == 0.0  # a loaded student never drops
    vectors = torch.randn(64, 50, 5) + 3.0  # no coordinate is 0 by chance
    model.word_vectors_dropout = 0.5
    model.train()
    torch.manual_seed(0)
    out = model._dropped(vectors)
    zero, kept = (out == 0).all(-1), (out == vectors).all(-1)
    assert bool((zero | kept).all()) and 0.45 < float(zero.float().mean()) < 0.55
    model.eval()
    assert model._dropped(vectors) is vectors
    model.train()
    model.word_vectors_dropout = 0.0
    state = torch.get_rng_state()
    assert model._dropped(vectors) is vectors and torch.equal(torch.get_rng_state(), state)
    for bad in ({"word_vectors_dropout": 1.0}, {"word_vectors_dropout": -0.1}, {"word_vectors": None}):
        with pytest.raises(ValueError, match="--word-vectors-dropout"):
            MGKDConfig(**{"word_vectors": "g.txt", "word_vectors_dropout": 0.3, **bad})
