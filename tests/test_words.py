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


def test_mecab_gives_ipadic_morphemes_with_offsets():
    pytest.importorskip("fugashi")
    text = "東京都に住む李明さんは Googleで働いています。\n次の行"
    words, offsets = split_words(text, "mecab")
    assert words[:4] == ["東京", "都", "に", "住む"] and "Google" in words and words[-3:] == ["次", "の", "行"]
    _check_offsets(text, words, offsets)
    assert offsets[words.index("Google")] == (text.index("Google"), text.index("Google") + 6)


def test_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="words rule 'jieba' is not one of default, mecab"):
        splitter("jieba")


def test_the_rule_a_corpus_implies():
    assert implied_rule([["EU", "rejects", "German", "call"]]) == "default"
    assert implied_rule([list("北京是中国的首都")]) == "default"  # characters: the default rule gives them
    assert implied_rule([["東京", "都", "に", "住む", "李", "明", "さん", "は"]]) == "mecab"  # IPAdic morphemes
    assert implied_rule([["北京", "是", "中国", "的", "首都"]]) == "default"  # Chinese words: no segmenter shipped
