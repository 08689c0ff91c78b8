"""A trimmed vocabulary (seqdistill.vocabulary, issue 36): the cache exports the embedding rows of
the subwords its corpora use, students keep them and an UNK row, verify checks the set."""

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import toy_cache
from safetensors.numpy import load

from seqdistill.cache_schema import CacheReader
from seqdistill.cli.cache import main as cache_cli
from seqdistill.deploy.export import export_model
from seqdistill.inference import Tagger
from seqdistill.students.archs import load_student
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import MGKDConfig
from seqdistill.vocabulary import RowIndex, kept_subwords, with_unk_row


def test_kept_subwords_are_every_sentences_own_tokens_and_the_specials(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    sentences = [["Peter", "visits", "Zagreb", "."], ["the", "eu", ",", "1996-08-22"], []]
    want = set(tok.all_special_ids)
    for words in sentences:  # one call per word, through the Python tokenizer: no batching, no backend
        for w in words:
            want |= set(tok(w, add_special_tokens=False)["input_ids"])
    got = kept_subwords(tok, iter(sentences), len(tok), batch_size=1)
    assert got.tolist() == sorted(want)
    assert kept_subwords(tok, iter(sentences), 5).tolist() == [i for i in sorted(want) if i < 5]  # rows of the matrix


def test_row_index_maps_kept_ids_to_rows_and_the_rest_to_the_unk_row():
    index = RowIndex(10)
    index.fill(torch.tensor([0, 3, 7]))
    assert index(torch.tensor([[7, 3, 0, 1, 9]])).tolist() == [[2, 1, 0, 3, 3]]
    assert "row_of_id" in index.state_dict() and not RowIndex(0).state_dict()  # untrimmed: nothing stored
    assert torch.equal(RowIndex(0)(torch.tensor([5, 2])), torch.tensor([5, 2]))
    with pytest.raises(ValueError, match="outside the teacher's 10 rows"):
        index.fill(torch.tensor([2, 10]))
    w = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert with_unk_row(w).tolist() == [[1.0, 2.0], [3.0, 6.0], [2.0, 4.0]]


@pytest.fixture(scope="module")
def caches(tiny_encoder, tmp_path_factory):
    trimmed = toy_cache(tiny_encoder, tmp_path_factory.mktemp("trimmed"))
    full = toy_cache(tiny_encoder, tmp_path_factory.mktemp("full"), full_vocabulary=True)
    return trimmed, full


def test_the_cache_exports_the_rows_its_corpora_use_and_full_vocabulary_all(caches, tiny_encoder):
    from transformers import BertModel

    teacher = BertModel.from_pretrained(tiny_encoder).get_input_embeddings().weight.detach().numpy()
    trimmed = load(CacheReader(caches[0]).read_export("tiny", "embeddings.safetensors"))
    full = load(CacheReader(caches[1]).read_export("tiny", "embeddings.safetensors"))
    assert "ids" not in full and full["weight"].shape == teacher.shape
    # the toy corpora's words are whole tokens of the tiny vocabulary: the 5 specials and 6 words
    assert len(trimmed["ids"]) == 11 and trimmed["weight"].shape == (11, 32)
    np.testing.assert_array_equal(trimmed["weight"], teacher[trimmed["ids"]])
    r = CliRunner().invoke(cache_cli, ["verify", caches[0]])
    assert r.exit_code == 0, r.output


def test_vocabulary_text_widens_the_kept_rows_without_rows_in_the_cache(caches, tiny_encoder, tmp_path):
    """`build --vocabulary-text FILE`: the subwords of FILE's words are kept too (the student reads
    "zagreb" through its own row, not the UNK row), the cache's examples are the same, and the
    export names the file; with --full-vocabulary it is refused."""
    import hashlib
    import json
    import tempfile

    from safetensors import safe_open
    from transformers import AutoTokenizer

    from seqdistill.cache_build.build import BuildError

    target = tmp_path / "target.txt"
    target.write_text("zagreb oslo\n")
    wide = toy_cache(tiny_encoder, tmp_path / "wide", vocabulary_text=(str(target),))
    reader, base = CacheReader(wide), CacheReader(caches[0])
    same = [(c.name, c.split, c.sha256, c.examples) for c in base.manifest.corpora]
    assert [(c.name, c.split, c.sha256, c.examples) for c in reader.manifest.corpora] == same
    ids = load(reader.read_export("tiny", "embeddings.safetensors"))["ids"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder)
    extra = kept_subwords(tokenizer, [["zagreb", "oslo"]], 10**6)
    base_ids = load(base.read_export("tiny", "embeddings.safetensors"))["ids"]
    assert set(ids.tolist()) == set(base_ids.tolist()) | set(extra.tolist()) and len(ids) > len(base_ids)
    with tempfile.TemporaryDirectory() as tmp:
        with safe_open(str(Path(reader.export_dir("tiny", tmp)) / "embeddings.safetensors"), "np") as f:
            sources = json.loads(f.metadata()["vocabulary_text"])
    assert sources == [
        {"file": "target.txt", "sha256": hashlib.sha256(target.read_bytes()).hexdigest(), "sentences": 1}
    ]
    cfg = dict(epochs=1, max_steps=3, device="cpu", hidden_size=8, k=3)
    train_student(wide, tmp_path / "mgkd", MGKDConfig(train_embeddings=True, **cfg), log=lambda *a: None)
    assert Tagger.load(tmp_path / "mgkd").unseen_share([["peter", "visits", "zagreb"]]) == 0.0
    with pytest.raises(BuildError, match="give one"):
        toy_cache(tiny_encoder, tmp_path / "both", vocabulary_text=(str(target),), full_vocabulary=True)


def test_verify_names_subwords_the_export_does_not_keep(tiny_encoder, tmp_path, monkeypatch):
    import seqdistill.cache_build.build as build

    real = build.kept_subwords
    monkeypatch.setattr(build, "kept_subwords", lambda tok, sents, rows: real(tok, sents, rows)[:-2])  # drops two
    cache = toy_cache(tiny_encoder, tmp_path)
    r = CliRunner().invoke(cache_cli, ["verify", cache])
    assert r.exit_code == 1
    assert "layer 'tiny' exports/embeddings.safetensors: 2 subwords of the cache's words are not kept" in r.output


def test_students_keep_the_rows_and_read_unseen_subwords_as_the_unk_row(caches, tmp_path):
    cfg = dict(epochs=1, max_steps=3, device="cpu", hidden_size=8, k=3)
    train_student(caches[0], tmp_path / "mgkd", MGKDConfig(train_embeddings=True, **cfg), log=lambda *a: None)
    train_student(caches[1], tmp_path / "mgkd-full", MGKDConfig(train_embeddings=True, **cfg), log=lambda *a: None)
    small, tok = load_student(tmp_path / "mgkd")
    big, _ = load_student(tmp_path / "mgkd-full")
    assert small.embed.weight.shape == (12, 32) and big.embed.weight.shape == (88, 32)
    assert small.config.teacher_vocab_size == 88 and small.vocab.row_of_id.shape == (88,)
    # two words the cache never saw ("zagreb", "oslo": char pieces only) read the same UNK row
    tagger = Tagger.load(tmp_path / "mgkd")
    a = tagger.backend.scores([["peter", "visits", "zagreb"]])
    b = tagger.backend.scores([["peter", "visits", "oslo"]])
    np.testing.assert_array_equal(a, b)
    full = Tagger.load(tmp_path / "mgkd-full").backend
    assert not np.array_equal(full.scores([["peter", "visits", "zagreb"]]), full.scores([["peter", "visits", "oslo"]]))
    # the export keeps the map: same tags and scores on seen and unseen words, and says what it kept
    out = export_model(tmp_path / "mgkd", tmp_path / "onnx", quantize="int8")
    onnx = Tagger.load(out)
    sents = [["peter", "visits", "zagreb"], ["anna", "visits", "the", "rome"], ["xyz", "qq", "paris"]]
    assert onnx.predict(sents) == tagger.predict(sents)
    assert onnx.backend.vocabulary == {"kept": 11, "teacher": 88, "unseen": "unk-row"} == tagger.backend.vocabulary
    assert onnx.backend.words == tagger.backend.words == "default"
    # what distill-eval reports: the share of words read through the UNK row, torch and ONNX alike
    seen_unseen = [["peter", "visits", "zagreb"], ["peter", "visits", "oslo"]]
    assert tagger.unseen_share(seen_unseen) == onnx.unseen_share(seen_unseen) == pytest.approx(2 / 6)
    assert tagger.unseen_share([["peter", "visits"]]) == 0.0
    assert Tagger.load(tmp_path / "mgkd-full").unseen_share(seen_unseen) is None
    from seqdistill.deploy.evaluate import evaluate_taggers, format_results

    (tmp_path / "test.txt").write_text("peter B-PER\nvisits O\nzagreb B-LOC\n\npeter B-PER\nvisits O\n\n")
    rows = evaluate_taggers([str(tmp_path / "mgkd"), str(out)], str(tmp_path / "test.txt"), with_latency=False)
    assert [r["unseen_words"] for r in rows] == [pytest.approx(1 / 5)] * 2
    assert "20.0% of these words have a subword outside its trimmed vocabulary" in format_results(rows)
