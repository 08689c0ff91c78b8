"""A hashed word table (issue 83, `distill-train mgkd --word-vectors SOURCE --hash-rows N`): no word
list, a word the mean of the rows its keys hash to, fitted to the source's vectors."""

import json

import numpy as np
import pytest
import torch

from seqdistill.students.word_vectors import HashedWordVectors
from seqdistill.tokenization import HASH_PROBE, WordHashing, fnv1a32


def test_fnv1a_and_the_keys_of_a_word_by_hand():
    # FNV-1a 32's published test vectors
    assert (fnv1a32(b""), fnv1a32(b"a"), fnv1a32(b"foobar")) == (0x811C9DC5, 0xE40C292C, 0xBF9CF968)
    h = WordHashing(rows=1000, minn=3, maxn=4, hashes=2)
    assert h.keys("Paris") == ["<paris>", "<pa", "par", "ari", "ris", "is>", "<par", "pari", "aris", "ris>"]
    assert h.keys("É") == ["<é>"]  # its one 3-gram is the whole key, kept once
    rows = h.word_rows("Paris")
    assert rows[:2] == [1 + fnv1a32(bytes([k]) + b"<paris>") % 1000 for k in range(2)]
    assert len(rows) == 2 * 10 and all(1 <= r <= 1000 for r in rows)
    assert h.word_rows("PARIS") == rows  # lowercased
    batch = h.batch_rows([["Paris", "x"], ["y"]])
    assert batch.shape == (2, 2, 20) and (batch[0, 1, 2:] == 0).all() and (batch[1, 1] == 0).all()
    assert WordHashing(1000, 3, 4, 2).fingerprint() == h.fingerprint() != WordHashing(999, 3, 4, 2).fingerprint()
    assert len(HASH_PROBE) > 5


def test_the_fit_reproduces_the_source_and_a_new_word_gets_its_ngrams_vector():
    rng = np.random.default_rng(0)
    stems = ["paris", "london", "berlin", "madrid", "vienna", "prague", "dublin", "lisbon"]
    pairs = [(s, s + suffix) for s in stems for suffix in ("", "ian", "er", "s")]
    words = [w for _, w in pairs]
    # a source whose vectors share a direction per stem, as real vectors of related words do
    base = {s: rng.normal(size=16) for s in stems}
    vectors = np.stack([base[s] for s, _ in pairs]).astype(np.float32)
    vectors += 0.1 * rng.normal(size=vectors.shape).astype(np.float32)
    table = HashedWordVectors(WordHashing(rows=4000), 16)
    err = table.fit(words, vectors)
    assert err < 0.05  # few collisions among 4,000 rows: nearly exact
    got = table(table.rows([words])).squeeze(0).numpy()
    cos = (got * vectors).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(vectors, axis=1)
    assert cos.min() > 0.9  # every source word near its own vector (the rarer, less weighted, less so)
    # a word no source had: the mean of its rows, by hand, and nearest to its stem's words
    (ids,) = table.rows([["Parisians"]])[0]
    by_hand = table.embed.weight[ids[ids > 0]].mean(0)
    new = table(table.rows([["Parisians"]]))[0, 0]
    torch.testing.assert_close(new, by_hand)
    assert float(new.norm()) > 0
    cos = {s: float(torch.cosine_similarity(new, torch.from_numpy(base[s]).float(), 0)) for s in stems}
    assert max(cos, key=cos.get) == "paris"


def test_an_export_is_fed_each_distinct_word_once_by_hand():
    """WordHashing.distinct_rows: the distinct words in order of first appearance, each word's rows
    once (row 0 the padding word), and each word's row of them; the mean over them is the mean over
    the padded [B, L, K] rows, word by word."""
    h = WordHashing(rows=50, minn=3, maxn=4, hashes=2)
    batch = [["Paris", "x", "Paris"], ["paris"]]
    ids, index = h.distinct_rows(batch)
    own = [h.word_rows(w) for w in ("Paris", "x", "paris")]
    K = max(len(r) for r in own)
    assert ids.shape == (4, K) and ids.dtype == np.int64 and (ids[0] == 0).all()
    for u, r in enumerate(own, 1):
        assert ids[u, : len(r)].tolist() == r and (ids[u, len(r) :] == 0).all()
    assert index.tolist() == [[1, 2, 1], [3, 0, 0]]
    table = HashedWordVectors(h, 3)
    table.load_state_dict({"embed.weight": torch.randn(51, 3, generator=torch.Generator().manual_seed(0))})
    flat = torch.nn.functional.embedding(torch.from_numpy(index), table(torch.from_numpy(ids)))
    torch.testing.assert_close(flat, table(table.rows(batch)))


def test_row_0_pads_whatever_a_saved_table_holds_there():
    """The mean is a sum over a word's rows divided by the count of real ones (row 0 pads): a saved
    table with something in row 0 loads with row 0 zero, and each word's vector is still the mean of
    its own rows, by hand; a padding word's is 0."""
    table = HashedWordVectors(WordHashing(rows=50), 3)
    weights = torch.arange(51 * 3, dtype=torch.float32).reshape(51, 3) + 1.0  # row 0 is not zero
    table.load_state_dict({"embed.weight": weights})
    assert float(table.embed.weight[0].abs().sum()) == 0
    rows = table.rows([["paris", "x"], ["a"]])  # the second sentence's second word pads
    got = table(rows)
    for b, j, word in ((0, 0, "paris"), (0, 1, "x"), (1, 0, "a")):
        own = table.hashing.word_rows(word)
        torch.testing.assert_close(got[b, j], weights[own].mean(0))
    assert float(got[1, 1].abs().sum()) == 0


def test_fewer_rows_fit_worse():
    rng = np.random.default_rng(1)
    words = [f"w{i}x{i * 7 % 13}" for i in range(300)]
    vectors = rng.normal(size=(300, 4)).astype(np.float32)
    errors = [HashedWordVectors(WordHashing(rows=r), 4).fit(words, vectors) for r in (50, 400, 4000)]
    assert errors[0] > errors[1] > errors[2]


def test_a_student_with_a_hashed_table_trains_exports_and_tags_alike(tiny_encoder, tmp_path, glove_dir):
    from conftest import toy_cache

    from seqdistill.deploy.export import export_model
    from seqdistill.inference import ExportError, Tagger
    from seqdistill.students.archs import load_student
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    cache = toy_cache(tiny_encoder, tmp_path, k=4, shard_size=16)
    run = MGKDConfig(k=3, epochs=1, max_steps=3, device="cpu", word_vectors=str(glove_dir), hash_rows=8)
    train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert (config["word_hash_rows"], config["word_vectors_dim"], config["word_vectors_rows"]) == (8, 6, 0)
    model, _ = load_student(tmp_path / "s")
    assert (
        model.word_vectors.embed.weight.shape == (9, 6) and float(model.word_vectors.embed.weight[1:].abs().sum()) > 0
    )
    sentence = [["peter", "visits", "Reykjavik"]]  # a word no source had still gets a vector
    rows = model.word_vectors.rows(sentence)
    assert (rows[0, 2] > 0).any() and float(model.word_vectors(rows)[0, 2].abs().sum()) > 0
    torch_tags = Tagger.load(tmp_path / "s").predict(sentence)
    assert len(torch_tags[0]) == 3
    # the export: the table in the graph, int8, no word list; the same tags as torch's
    out = export_model(tmp_path / "s", tmp_path / "e", quantize="int8")
    meta = json.loads((out / "export.json").read_text())
    assert meta["format_version"] == 5 and meta["word_hashing"]["rows"] == 8 and "word_vectors" not in meta
    assert not (out / "word_vectors.txt").exists()
    sentences = [["peter", "visits", "Reykjavik"], ["anna", "visits", "Rome", "and", "OSLO"], ["x"]]
    assert Tagger.load(out).predict(sentences) == Tagger.load(tmp_path / "s").predict(sentences)
    # a format-4 export (every word's rows padded to [B, L, K]) is refused by name
    (out / "export.json").write_text(json.dumps({**meta, "format_version": 4}))
    with pytest.raises(ExportError, match="a hashed word table of format 4.*export the model again"):
        Tagger.load(out)
    # an export whose hashing differs from this runtime's is refused at load
    meta["word_hashing"]["fingerprint"] = "0" * 64
    (out / "export.json").write_text(json.dumps(meta))
    with pytest.raises(ExportError, match="word_hashing's fingerprint is not this runtime's"):
        Tagger.load(out)


def test_train_word_vectors_moves_the_rows_the_training_words_use(tiny_encoder, tmp_path, glove_dir):
    """--train-word-vectors: the table starts from the source (or its hashed fit) and trains; the rows
    of words the training text never shows keep their vectors, row 0 stays zero; without the flag
    nothing moves."""
    from conftest import toy_cache

    from seqdistill.students.archs import load_student
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig
    from seqdistill.students.word_vectors import read_word_vectors

    cache = toy_cache(tiny_encoder, tmp_path, k=4, shard_size=16)
    words, vectors = read_word_vectors(glove_dir)
    tables = {}
    for name, extra in (("frozen", {}), ("trained", {"train_word_vectors": True}),
                        ("hashed", {"train_word_vectors": True, "hash_rows": 8})):  # fmt: skip
        run = MGKDConfig(k=3, epochs=1, max_steps=4, lr=0.05, device="cpu", word_vectors=str(glove_dir), **extra)
        train_student(cache, tmp_path / name, run, log=lambda *a: None)
        tables[name] = load_student(tmp_path / name)[0].word_vectors.embed.weight.detach()
    torch.testing.assert_close(tables["frozen"][1:], torch.from_numpy(vectors))  # frozen: the source, exactly
    moved = ((tables["trained"][1:] - torch.from_numpy(vectors)).abs().sum(1) > 1e-6).tolist()
    # the toy corpora's words are these six; berlin, madrid, london and oslo are never seen
    assert [w for w, m in zip(words, moved) if m] == ["the", "peter", "paris", "rome", "anna", "visits"]
    assert float(tables["trained"][0].abs().sum()) == float(tables["hashed"][0].abs().sum()) == 0
    fitted = load_student(tmp_path / "hashed")[0]  # trained from its fit: its rows are not the fit's any more
    fitted.word_vectors.fit(words, vectors)
    assert not torch.allclose(fitted.word_vectors.embed.weight, tables["hashed"])
    with pytest.raises(ValueError, match="--train-word-vectors trains the table of --word-vectors"):
        MGKDConfig(train_word_vectors=True)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"hash_rows": 0}, r"--hash-rows 0: give 1 or more rows"),
        ({"hash_rows": 4, "word_vectors": None}, r"--hash-rows hashes a source's word vectors: give --word-vectors"),
        ({"hash_rows": 4, "hash_ngrams": (5, 3)}, r"--hash-ngrams \(5, 3\)"),
    ],
)
def test_bad_hash_settings_are_refused_by_name(glove_dir, kw, message):
    from seqdistill.students.recipes.mgkd import MGKDConfig

    with pytest.raises(ValueError, match=message):
        MGKDConfig(**{"word_vectors": str(glove_dir), **kw})


def test_as_many_rows_as_the_source_has_words_is_refused_with_nothing_written(tiny_encoder, tmp_path, glove_dir):
    from conftest import toy_cache

    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    cache = toy_cache(tiny_encoder, tmp_path, k=4, shard_size=16)
    run = MGKDConfig(k=3, epochs=1, device="cpu", word_vectors=str(glove_dir), hash_rows=10)
    with pytest.raises(ValueError, match=r"--hash-rows 10: .* gives 10 words, .* hashing gains nothing"):
        train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    assert not (tmp_path / "s").exists()
    # --word-vectors-rows fits the table to the source's first words: 4 rows for its first 6 words
    run = MGKDConfig(
        k=3, epochs=1, max_steps=1, device="cpu", word_vectors=str(glove_dir), hash_rows=6, word_vectors_rows=6
    )
    with pytest.raises(ValueError, match=r"--hash-rows 6: .* gives 6 words \(--word-vectors-rows\)"):
        train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    run = MGKDConfig(
        k=3, epochs=1, max_steps=1, device="cpu", word_vectors=str(glove_dir), hash_rows=4, word_vectors_rows=6
    )
    train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    assert json.loads((tmp_path / "s" / "config.json").read_text())["word_hash_rows"] == 4
