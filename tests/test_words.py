"""The words rules (seqdistill.corpora.words): every script, with character offsets."""

import pytest

from seqdistill.corpora.words import implied_rule, split_words, splitter


def _check_offsets(text, words, offsets):
    assert [text[s:e] for s, e in offsets] == words
    assert all(a[1] <= b[0] for a, b in zip(offsets, offsets[1:]))  # in order, not overlapping


def test_chinese_raw_text_is_one_word_per_ideograph():
    text = "北京是中国的首都。李明在上海工作。"
    words, offsets = split_words(text)
    assert words == list("北京是中国的首都。李明在上海工作。")
    assert offsets[9] == (9, 10) and offsets[-1] == (16, 17)
    _check_offsets(text, words, offsets)


def test_japanese_kana_and_kanji_are_words_of_their_own_by_default():
    text = "東京タワーに行った。"
    words, offsets = split_words(text)
    assert words == ["東", "京", "タ", "ワ", "ー", "に", "行", "っ", "た", "。"]
    _check_offsets(text, words, offsets)


def test_mixed_scripts_keep_latin_words_and_numbers_whole():
    text = "我在Google工作, since 2019-08-22 (3.5 年)."
    words, offsets = split_words(text)
    assert words == ["我", "在", "Google", "工", "作", ",", "since", "2019-08-22", "(", "3.5", "年", ")", "."]
    _check_offsets(text, words, offsets)


def test_emoji_with_modifiers_flags_and_joiners_stay_one_word():
    text = "I ❤️ NY 🇺🇸👍🏽 👨‍👩‍👧!"
    words, offsets = split_words(text)
    assert words == ["I", "❤️", "NY", "🇺🇸", "👍🏽", "👨\u200d👩\u200d👧", "!"]
    _check_offsets(text, words, offsets)


def test_combining_marks_stay_in_their_word():
    text = "हिन्दी भाषा, Ελληνικά, café"
    words, _ = split_words(text)
    assert words == ["हिन्दी", "भाषा", ",", "Ελληνικά", ",", "café"]


def test_english_rule_is_unchanged():
    words, offsets = split_words("U.S.-based Smith's 1996-08-22 don't $3.5")
    assert words == ["U.S", ".", "-", "based", "Smith's", "1996-08-22", "don't", "$", "3.5"]
    _check_offsets("U.S.-based Smith's 1996-08-22 don't $3.5", words, offsets)


def test_ptb_rule_gives_conll_2003s_words():
    """``ptb``: clitics, acronyms, initials, numbers with separators, list numbers, dashes."""
    text = "1. Germany's U.S.-based J. Smith don't --\n2. 3,000 fans , 1/2 ... .500 at 1:18.48 p.m. in 1996. Corp. they'll've"
    words, offsets = split_words(text, "ptb")
    assert words == (
        ["1.", "Germany", "'s", "U.S.", "-", "based", "J.", "Smith", "do", "n't", "--"]
        + ["2.", "3,000", "fans", ",", "1/2", "...", ".500", "at", "1:18.48", "p.m.", "in", "1996", "."]
        + ["Corp", ".", "they", "'ll", "'ve"]
    )
    _check_offsets(text, words, offsets)
    assert split_words("Germany 's view", "ptb")[0] == ["Germany", "'s", "view"]
    assert split_words("in Group C. Then", "ptb")[0] == ["in", "Group", "C.", "Then"]  # the named ambiguity


def test_mecab_gives_ipadic_morphemes_with_offsets():
    pytest.importorskip("fugashi")
    text = "東京都に住む李明さんは Googleで働いています。\n次の行"
    words, offsets = split_words(text, "mecab")
    assert words[:4] == ["東京", "都", "に", "住む"] and "Google" in words and words[-3:] == ["次", "の", "行"]
    _check_offsets(text, words, offsets)
    assert offsets[words.index("Google")] == (text.index("Google"), text.index("Google") + 6)


def test_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="words rule 'jieba' is not one of default, ptb, mecab"):
        splitter("jieba")


def test_the_rule_a_corpus_implies():
    assert implied_rule([["EU", "rejects", "German", "call"]]) == "default"
    assert (
        implied_rule([["Germany", "'s", "view"], ["We", "do", "n't"]] + [["EU", "rejects", "German", "call"]] * 400)
        == "ptb"
    )
    assert implied_rule([["Germany", "'s", "view"]] + [["EU", "rejects", "German", "call"]] * 800) == "default"
    assert implied_rule([list("北京是中国的首都")]) == "default"  # characters: the default rule gives them
    assert implied_rule([["東京", "都", "に", "住む", "李", "明", "さん", "は"]]) == "mecab"  # IPAdic morphemes
    assert implied_rule([["北京", "是", "中国", "的", "首都"]]) == "default"  # Chinese words: no segmenter shipped


JAPANESE = [  # MeCab IPAdic morphemes, as the Japanese NER corpus of DATA.md has them
    [("東京", "B-LOC"), ("都", "I-LOC"), ("に", "O"), ("住む", "O"), ("李", "B-PER"), ("明", "I-PER"), ("さん", "O")],
    [("大阪", "B-LOC"), ("で", "O"), ("働い", "O"), ("て", "O"), ("い", "O"), ("ます", "O"), ("。", "O")],
]


def test_a_student_records_the_rule_its_corpus_implies_and_front_ends_apply_it(tiny_encoder, tmp_path):
    pytest.importorskip("fugashi")
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig
    from seqdistill.teachers import build_teacher

    corpus = tmp_path / "ja.txt"
    corpus.write_text("\n\n".join("\n".join(f"{w}\tX\t{t}" for w, t in s) for s in JAPANESE * 5) + "\n")
    build_teacher(tiny_encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(tmp_path / "teacher")
    specs = [CorpusSpec("ja", str(corpus), "train", True), CorpusSpec("ja", str(corpus), "dev", True)]
    build_cache(
        str(tmp_path / "cache"), str(tmp_path / "teacher"), specs, BuildConfig(device="cpu"), log=lambda *a: None
    )
    cfg = MGKDConfig(epochs=1, max_steps=1, device="cpu", hidden_size=8, k=3, chars=True)
    train_student(str(tmp_path / "cache"), tmp_path / "s", cfg, log=lambda *a: None)
    text = "東京都に住む李明さんは大阪で働いています。"
    want = split_words(text, "mecab")
    for model in (tmp_path / "s", export_model(tmp_path / "s", tmp_path / "onnx")):
        tagger = Tagger.load(model)
        assert tagger.words == "mecab"
        (s,) = tagger(text)
        assert (s.words, s.offsets) == want and s.words[:4] == ["東京", "都", "に", "住む"]
        assert all(text[e.char_start : e.char_end] == e.text == "".join(s.words[e.start : e.end]) for e in s.spans)
    assert Tagger.load(tmp_path / "s", words="default")(text)[0].words[:2] == ["東", "京"]  # the user's choice wins
