"""The vocabulary a student keeps (seqdistill.vocabulary, issues 36 and 53): every row of a small
matrix by default; a trimmed one exports the rows of the subwords its corpora use and frequent ones
of their scripts, students keep them and an UNK row, verify checks the set, distill-eval and Tagger
say what reads the UNK row."""

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
from seqdistill.vocabulary import (
    RowIndex,
    char_script,
    choose_rows,
    frequent_subwords,
    kept_subwords,
    letter_counts,
    script_budgets,
    unseen_span_share,
    with_unk_row,
)

TRIMMED = dict(trim_vocabulary=True, frequent_subwords=0)  # the corpora's rows alone: the default before issue 53


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
    trimmed = toy_cache(tiny_encoder, tmp_path_factory.mktemp("trimmed"), **TRIMMED)
    full = toy_cache(tiny_encoder, tmp_path_factory.mktemp("full"), full_vocabulary=True)
    return trimmed, full


def test_a_small_matrix_is_kept_whole_by_default(caches, tiny_encoder, tmp_path):
    """The default (issue 53): a matrix of at most FULL_MATRIX_ROWS rows is exported whole, the same
    bytes as --full-vocabulary; a larger one is trimmed."""
    default = CacheReader(toy_cache(tiny_encoder, tmp_path))
    full = CacheReader(caches[1])
    assert default.read_export("tiny", "embeddings.safetensors") == full.read_export("tiny", "embeddings.safetensors")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    sentences = [["peter", "visits", "paris"]]
    assert choose_rows(tok, sentences, 88).ids is None
    assert choose_rows(tok, sentences, 88, "trimmed", 0).ids.tolist() == kept_subwords(tok, sentences, 88).tolist()
    big = choose_rows(tok, sentences, 70_000, "auto", 0)  # the same tokenizer, as if its matrix had 70,000 rows
    assert big.policy == "trimmed" and big.ids.tolist() == kept_subwords(tok, sentences, 70_000).tolist()
    with pytest.raises(Exception, match="contradict"):
        toy_cache(tiny_encoder, tmp_path / "both", trim_vocabulary=True, full_vocabulary=True)


def test_char_script_names_the_script_of_letters_only():
    assert [char_script(c) for c in "aÉДαあアーｱＡ東々한ب"] == [
        "LATIN",
        "LATIN",
        "CYRILLIC",
        "GREEK",
        "HIRAGANA",
        "KATAKANA",
        "KATAKANA",
        "KATAKANA",
        "LATIN",
        "CJK",
        "CJK",
        "HANGUL",
        "ARABIC",
    ]
    assert [char_script(c) for c in "0.,- \u0301€"] == [None] * 7  # digits, punctuation, a combining mark, symbols
    assert letter_counts(["東京へ", "Tokyo", "2024"]) == {"CJK": 2, "HIRAGANA": 1, "LATIN": 5}


def test_script_budgets_share_rows_by_letters_and_pass_on_what_a_script_cannot_use():
    # by letters alone: 3:1
    assert script_budgets({"CJK": 3, "LATIN": 1}, {"CJK": 100, "LATIN": 100}, 40) == {"CJK": 30, "LATIN": 10}
    # kana has 2 subwords of its share of 20: it keeps both, and 38 go to the others 3:1 (28.5 -> 28, 9.5 -> 9)
    got = script_budgets({"CJK": 3, "HIRAGANA": 4, "LATIN": 1}, {"CJK": 100, "HIRAGANA": 2, "LATIN": 100}, 40)
    assert got == {"HIRAGANA": 2, "CJK": 28, "LATIN": 9}
    # every script fits: each keeps all it has
    assert script_budgets({"CJK": 1, "LATIN": 1}, {"CJK": 3, "LATIN": 4}, 40) == {"CJK": 3, "LATIN": 4}
    assert script_budgets({"LATIN": 1}, {"LATIN": 5}, 0) == {}


@pytest.fixture(scope="module")
def mixed_tokenizer(tmp_path_factory):
    """A WordPiece tokenizer over four scripts, ids in the order a frequency-ranked vocabulary has."""
    from transformers import BertTokenizer, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "of", "東京", "大阪", "です", "ます", "тот"]
    vocab += ["##s", "2024", "japan", "東", "京", "大", "a", "b", "あ", "т", "к"]
    d = tmp_path_factory.mktemp("mixed-tok")
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    return BertTokenizerFast.from_pretrained(d), vocab


def test_frequent_subwords_keep_the_corpora_scripts_single_characters_first_then_by_rank(mixed_tokenizer):
    tok, vocab = mixed_tokenizer
    ids = lambda *ws: sorted(vocab.index(w) for w in ws)  # noqa: E731
    letters = letter_counts(["東京", "the"])  # CJK 2, LATIN 3
    # every candidate of each script: Cyrillic (тот, т, к) and kana (です, ます, あ) are not the corpora's
    assert frequent_subwords(tok, len(vocab), 100, letters).tolist() == ids(
        "the", "of", "東京", "大阪", "##s", "japan", "東", "京", "大", "a", "b"
    )
    # 5 rows, 2 to CJK and 3 to Latin: single characters first ("##s" is one, a continuation), then the lowest ids
    assert frequent_subwords(tok, len(vocab), 5, letters).tolist() == ids("東", "京", "##s", "a", "b")
    assert frequent_subwords(tok, len(vocab), 0, letters).tolist() == []
    # a brute-force reading of the same rule, over every budget
    for n in range(0, 14):
        budgets = script_budgets(letters, {"CJK": 5, "LATIN": 6}, n)
        want = {"CJK": ["東", "京", "大", "東京", "大阪"], "LATIN": ["##s", "a", "b", "the", "of", "japan"]}
        expected = [w for s, ws in want.items() for w in ws[: budgets.get(s, 0)]]
        assert frequent_subwords(tok, len(vocab), n, letters).tolist() == ids(*expected)
    kept = choose_rows(tok, [["東京", "the"]], len(vocab), "trimmed", 4)
    # BERT's tokenizer cuts CJK text into characters: the corpus holds 5 specials, 東, 京 and "the"
    assert kept.scripts == ("CJK", "LATIN") and kept.corpus == 8
    assert kept.ids.tolist() == sorted(
        set(kept_subwords(tok, [["東京", "the"]], len(vocab)).tolist()) | set(ids("東", "京", "##s", "a"))
    )
    assert kept.frequent == 2  # 東 and 京, CJK's two rows, are the corpus's already


def test_unseen_span_share_counts_spans_with_an_unseen_word():
    flags = [[False, True, False, False], [False, False]]
    spans = [[(0, 1, "PER"), (1, 3, "LOC"), (3, 4, "ORG")], [(0, 2, "MISC")]]
    assert unseen_span_share(flags, spans) == pytest.approx(1 / 4)
    assert unseen_span_share(flags, [[], []]) is None


def test_the_cache_exports_the_rows_its_corpora_use_and_full_vocabulary_all(caches, tiny_encoder):
    from transformers import BertModel

    teacher = BertModel.from_pretrained(tiny_encoder).get_input_embeddings().weight.detach().numpy()
    trimmed = load(CacheReader(caches[0]).read_export("tiny", "embeddings.safetensors"))
    full = load(CacheReader(caches[1]).read_export("tiny", "embeddings.safetensors"))
    assert "ids" not in full and full["weight"].shape == teacher.shape
    # the toy corpora's words are whole tokens of the tiny vocabulary: the 5 specials and 6 words
    assert len(trimmed["ids"]) == 11 and trimmed["weight"].shape == (11, 32)
    # stored in the cache's --dtype (fp16 by default), as its other large fields
    assert trimmed["weight"].dtype == np.float16 and full["weight"].dtype == np.float32
    np.testing.assert_array_equal(trimmed["weight"], teacher[trimmed["ids"]].astype(np.float16))
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

    from seqdistill.pipeline.build import BuildError

    target = tmp_path / "target.txt"
    target.write_text("zagreb oslo\n")
    wide = toy_cache(tiny_encoder, tmp_path / "wide", vocabulary_text=(str(target),), **TRIMMED)
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
    cfg = dict(arch="bilstm-crf", epochs=1, max_steps=3, device="cpu", hidden_size=8, k=3)
    train_student(wide, tmp_path / "mgkd", MGKDConfig(train_embeddings=True, **cfg), log=lambda *a: None)
    assert Tagger.load(tmp_path / "mgkd").unseen_share([["peter", "visits", "zagreb"]]) == 0.0
    with pytest.raises(BuildError, match="give one"):
        toy_cache(tiny_encoder, tmp_path / "both", vocabulary_text=(str(target),), full_vocabulary=True)


def test_verify_names_subwords_the_export_does_not_keep(tiny_encoder, tmp_path, monkeypatch):
    import seqdistill.vocabulary as vocabulary

    real = vocabulary.kept_subwords
    monkeypatch.setattr(vocabulary, "kept_subwords", lambda tok, sents, rows: real(tok, sents, rows)[:-2])  # drops two
    cache = toy_cache(tiny_encoder, tmp_path, **TRIMMED)
    r = CliRunner().invoke(cache_cli, ["verify", cache])
    assert r.exit_code == 1
    assert "layer 'tiny' exports/embeddings.safetensors: 2 subwords of the cache's words are not kept" in r.output


def test_students_keep_the_rows_and_read_unseen_subwords_as_the_unk_row(caches, tmp_path):
    cfg = dict(arch="bilstm-crf", epochs=1, max_steps=3, device="cpu", hidden_size=8, k=3)
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
    # one gold span of three holds "zagreb"; the predicted spans are the student's own
    pred = tagger.predict_spans([["peter", "visits", "zagreb"], ["peter", "visits"]])
    want_pred = unseen_span_share([[False, False, True], [False, False]], pred)
    for r in rows:
        assert r["unseen"]["gold_spans"] == pytest.approx(1 / 3)
        assert r["unseen"]["predicted_spans"] == want_pred
        assert r["embedding_rows"] == 12 and r["teacher_rows"] == 88 and r["bytes"] > 0
    assert rows[1]["bytes"] == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    text = format_results(rows)
    assert "20.0% of these words, 33.3% of the gold spans" in text and "| 12 of 88 |" in text
    assert tagger.unseen([["peter", "visits", "zagreb"]], [[(0, 1, "PER"), (2, 3, "LOC")]])["gold_spans"] == 0.5
    assert Tagger.load(tmp_path / "mgkd-full").unseen(seen_unseen) is None


def test_the_warning_fires_on_spans_even_when_few_words_are_unseen():
    """Issue 53's case: 0.5% of the words unseen, but inside gold spans; 1% of the words or 0.5% of
    the gold or predicted spans names the student (deploy/evaluate.py's thresholds)."""
    from seqdistill.deploy.evaluate import unseen_warning

    row = lambda w, g, p: {"model": "m", "unseen": {"words": w, "gold_spans": g, "predicted_spans": p}}  # noqa: E731
    assert unseen_warning(row(0.004, 0.004, 0.004)) is None
    assert "0.6% of the gold spans" in unseen_warning(row(0.004, 0.006, 0.0))
    assert "0.7% of its predicted spans" in unseen_warning(row(0.004, None, 0.007))
    assert "1.0% of these words" in unseen_warning(row(0.01, 0.0, 0.0))
    assert unseen_warning({"model": "m"}) is None  # a model that keeps every row
