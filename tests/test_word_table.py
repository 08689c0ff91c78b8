"""The teacher's own static word table (issue 83 item 2, ``distill-cache word-table``): the cache's
words but the test split's, each alone through the teacher, PCA, one scale; read by a student as
``--word-vectors DIR``."""

import json
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from seqdistill.pipeline.word_table import (
    WordTableConfig,
    WordTableError,
    build_word_table,
    choose_words,
    is_uncased,
)


def test_choose_words_by_hand():
    counts = Counter({"Paris": 3, "paris": 2, "the": 4, "Rome": 1, "a b": 1, " ": 9})
    # cased: commonest first, ties in first-seen order; a blank word is dropped
    assert choose_words(counts, 10, False) == (["the", "Paris", "paris", "Rome", "a b"], 5)
    # uncased: spellings merged (Paris 3 + paris 2 = 5 > the 4), then the extra list, up to rows
    words, n = choose_words(counts, 5, True, ["ROME", "oslo", "Berlin", "x"])
    assert (words, n) == (["paris", "the", "rome", "a b", "oslo"], 4)
    assert choose_words(counts, 2, True, ["oslo"]) == (["paris", "the"], 2)


def _cache_with_a_test_split(encoder, d):
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.teachers import build_teacher

    build_teacher(encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(d / "teacher")
    train = "Peter B-PER\nvisits O\nParis B-LOC\n\nAnna B-PER\nvisits O\nthe O\nrome B-LOC\n\nthe O\neu O\n\n"
    (d / "train.txt").write_text(train)
    (d / "test.txt").write_text("zagreb B-LOC\nvisits O\n\n")
    (d / "raw.txt").write_text("the eu visits oslo\n")
    specs = [
        CorpusSpec("toy", str(d / "train.txt"), "train", True),
        CorpusSpec("toy", str(d / "test.txt"), "test", True),
        CorpusSpec("raw", str(d / "raw.txt"), "unlabelled", False),
    ]
    build_cache(
        str(d / "cache"),
        str(d / "teacher"),
        specs,
        BuildConfig(device="cpu", k=2),
        teacher_id="tiny",
        log=lambda *a: None,
    )
    return str(d / "cache"), str(d / "teacher")


def test_the_table_is_each_word_alone_through_the_teacher_scaled_once(tiny_encoder, tmp_path):
    from seqdistill.students.word_vectors import read_word_vectors
    from seqdistill.teachers.loading import load_teacher

    cache, teacher_dir = _cache_with_a_test_split(tiny_encoder, tmp_path)
    out = tmp_path / "table"
    report = build_word_table(cache, teacher_dir, str(out), WordTableConfig(dim=8, layer=1), log=lambda *a: None)
    words, table = read_word_vectors(out)
    # the test split's own word is left out; the tiny teacher lowercases, so "Paris" is "paris"
    assert sorted(words) == ["anna", "eu", "oslo", "paris", "peter", "rome", "the", "visits"]
    assert sorted(words[:2]) == ["the", "visits"] and words[2] == "eu"  # the commonest: 3, 3 and 2
    assert (report.words, report.from_corpora, table.shape) == (8, 8, (8, 8))
    assert report.variance_kept == pytest.approx(1.0, abs=1e-5)  # 8 words span at most 7 dimensions
    assert float(np.sqrt(np.mean(table.astype(np.float64) ** 2))) == pytest.approx(1.0, rel=1e-5)
    # against the teacher run word by word, by plain torch: the table's pairwise distances are the
    # states' up to the one scale (PCA is a rotation of the centred states when it keeps them all)
    teacher = load_teacher(teacher_dir, device="cpu")
    with torch.inference_mode():
        states = np.stack([teacher.encode([[w]], hidden_layers=[1]).hidden[1][0, 0].float().numpy() for w in words])
    d_states = np.linalg.norm(states[:, None] - states[None], axis=-1)
    d_table = np.linalg.norm(table[:, None] - table[None], axis=-1)
    scale = d_table.sum() / d_states.sum()
    np.testing.assert_allclose(d_table, scale * d_states, atol=1e-3 * d_table.max())
    meta = json.loads((out / "word_table.json").read_text())
    assert meta["layer"] == 1 and meta["words"] == 8 and meta["config"]["exclude_splits"] == ["test"]
    # with no split left out, the test's word is in
    again = build_word_table(
        cache, teacher_dir, str(out), WordTableConfig(dim=4, exclude_splits=[]), log=lambda *a: None
    )
    assert "zagreb" in read_word_vectors(out)[0] and again.words == 9
    with pytest.raises(WordTableError, match="no words outside the splits train, test, unlabelled"):
        build_word_table(cache, teacher_dir, str(out), WordTableConfig(exclude_splits=["train", "test", "unlabelled"]))
    assert read_word_vectors(out)[1].shape == (9, 4)  # the table before stays whole


def test_a_word_list_extends_the_vocabulary_and_bad_options_write_nothing(tiny_encoder, tmp_path):
    from seqdistill.cli.cache import main

    cache, teacher_dir = _cache_with_a_test_split(tiny_encoder, tmp_path)
    (tmp_path / "list.txt").write_text("Berlin 0.1 0.2\nthe 1 2\nlisbon\n")
    out = tmp_path / "table"
    run = CliRunner().invoke(
        main,
        [
            "word-table",
            cache,
            "--teacher",
            teacher_dir,
            "--out",
            str(out),
            "--dim",
            "4",
            "--words",
            str(tmp_path / "list.txt"),
            "--rows",
            "10",
        ],
    )
    assert run.exit_code == 0, run.output
    assert (out / "words.txt").read_text().split("\n")[-3:] == ["berlin", "lisbon", ""]
    assert "8 from the cache, 2 from --words" in run.output
    for args, says in (
        (["--layer", "3"], "--layer 3: the teacher has layers 0..2"),
        (["--dim", "20"], "--dim 20: the vocabulary holds 8 words"),
        (["--rows", "0"], "--rows 0"),
        (["--words", str(tmp_path / "missing.txt")], "missing.txt: no such word list"),
    ):
        bad = tmp_path / "bad"
        run = CliRunner().invoke(main, ["word-table", cache, "--teacher", teacher_dir, "--out", str(bad), *args])
        assert run.exit_code != 0 and says in run.output, (args, run.output)
        assert not bad.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bad")] == []


def test_uncased_is_read_from_the_tokenizer(tiny_encoder, tmp_path):
    from transformers import AutoTokenizer, BertTokenizer

    lower = AutoTokenizer.from_pretrained(tiny_encoder)
    assert is_uncased(lower)
    vocab = dict(lower.get_vocab())
    vocab.update({"P": len(vocab), "L": len(vocab) + 1})
    BertTokenizer(vocab=vocab, do_lower_case=False).save_pretrained(tmp_path)
    assert not is_uncased(AutoTokenizer.from_pretrained(tmp_path))
    assert not is_uncased(None)
