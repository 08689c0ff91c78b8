"""Raw text to words with character offsets: the words rules every front end uses (``Tagger``,
``distill-predict --format text``, the spaCy component, ``distill-serve``).

``default`` (decisions, named here):

* a word is a run of letters, marks, digits or underscores, joined across a single inner hyphen,
  apostrophe or period ("1996-08-22", "don't", "3.5", "हिन्दी": marks stay in their word);
* **every CJK ideograph and every kana character is a word of its own** (the rule of BERT's basic
  tokenizer for Chinese, extended to Japanese kana): "北京是首都" -> 北 京 是 首 都, and a Latin word
  between them stays whole ("我在Google工作" -> 我 在 Google 工 作);
* every other character that is not a space is a word of its own ("(", ",", "$", "."), taken as a
  whole grapheme cluster, so that an emoji with its modifiers, a flag or a ZWJ family stays one
  word ("👍🏽", "🇺🇸").

It is the CoNLL-2003 convention of words and punctuation apart. Known differences from CoNLL's own
tokens: a final abbreviation period is split off ("U.S." -> "U.S", "."), and a clitic is split at
its apostrophe ("'s" -> "'", "s"). Character classes come from the ``regex`` package (Unicode
scripts and grapheme clusters, which the standard ``re`` lacks; transformers already depends on it).

``ptb``: English words as the Penn Treebank tokenised them, the convention of CoNLL-2003 and
OntoNotes. 27% of CoNLL-2003's test sentences come out of ``default`` as other words than the
corpus's, so a model trained on them saw other words than raw text gives it (``distill-eval
--documents``, docs/RESULTS.md). Over ``default`` (decisions, named here):

* a clitic is a word of its own: "Smith's" -> "Smith", "'s"; "don't" -> "do", "n't"; also
  "'m", "'d", "'ll", "'re", "'ve" (either apostrophe, any case), standing alone ("Germany 's") too;
* letters with periods keep their periods: "U.S." and "p.m." (two or more letters each followed by a
  period), and a capital initial followed by a period before a capitalised word ("J. Smith"); a
  final period of any other abbreviation ("Corp.") is split off as in ``default``;
* a number with inner commas, slashes, colons or periods is one word ("3,000", "1/2", "22/11/96",
  "1:18.48"), and so is a number written with a leading period (".500");
* a number and a period opening a line (or a text) are one word: the list items and result tables
  of news text ("1. Steffi Graf"); elsewhere the period is split off ("in 1996.");
* runs of two or more hyphens or periods are one word ("--", "...").

Known differences from CoNLL-2003's tokens (3.6% of its test sentences): a sign before a number
("+44" -> "+", "44"), abbreviations with one period ("Corp." -> "Corp", "."), table cells ("10="),
and an initial that ends a sentence ("in Group C. The" keeps "C."). ``ptb`` is implied by a corpus
whose words hold stand-alone clitics (``implied_rule``).

``mecab``: Japanese morphemes from MeCab with the IPAdic dictionary, through ``fugashi`` (the
maintained Python binding, wheels with MeCab inside) and the ``ipadic`` package (``pip install
seqdistill[ja]``). IPAdic because it is the dictionary Japanese NER corpora such as the IREX-typed
one in DATA.md were segmented with: a model sees at inference the words it was trained on.

A model directory records the rule its training corpus implies (``implied_rule``); the front ends
apply it. Pre-split input (a list of words) keeps its words as given; its text is the words joined
by one space, and offsets point into that text (``join_words``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

import regex

RULES = ("default", "ptb", "mecab")
CJK = r"\p{Han}\p{Hiragana}\p{Katakana}"
LETTERS = rf"[[\w\p{{M}}]--[{CJK}]]"
WORD = regex.compile(rf"[{CJK}]|{LETTERS}+(?:[-'.’]{LETTERS}+)*|(?!\s)\X", regex.V1)
CLITIC = r"(?:['’](?:[sSmMdD]|[lL][lL]|[rR][eE]|[vV][eE])|[nN]['’][tT])"
PTB_WORD = regex.compile(
    rf"{CLITIC}(?!{LETTERS})"  # a clitic standing alone: "Germany 's"
    rf"|(?:\p{{L}}\.){{2,}}(?!{LETTERS})"  # U.S., p.m.
    rf"|\p{{Lu}}\.(?=\s+\p{{Lu}})"  # J. Smith
    r"|(?m:^)\d+\.(?=\s)"  # a list number opening a line: "1. Steffi Graf"
    r"|\d+(?:[,/:.]\d+)+|(?<![\w.])\.\d+"  # 3,000  1/2  1:18.48  .500
    r"|-{2,}|\.{2,}"
    rf"|{LETTERS}+(?:[-'.’]{LETTERS}+)*|(?!\s)\X",
    regex.V1,
)
ENDS_IN_CLITIC = regex.compile(rf"{CLITIC}$")
STANDALONE_CLITIC = regex.compile(rf"^{CLITIC}$")
KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")
HAN_OR_KANA = regex.compile(rf"[{CJK}]")


def split_words(text: str, rule: str = "default") -> tuple[list[str], list[tuple[int, int]]]:
    """The words of ``text`` by ``rule`` and each word's ``(start, end)`` character offsets into it."""
    return splitter(rule)(text)


def splitter(rule: str) -> Callable[[str], tuple[list[str], list[tuple[int, int]]]]:
    """The function that splits a text by ``rule`` (one of ``RULES``)."""
    if rule == "default":
        return _default_words
    if rule == "ptb":
        return _ptb_words
    if rule == "mecab":
        return _mecab_words(_mecab())
    raise ValueError(f"words rule {rule!r} is not one of {', '.join(RULES)}")


def _default_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    words, offsets = [], []
    for m in WORD.finditer(text):
        words.append(m.group())
        offsets.append(m.span())
    return words, offsets


def _ptb_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    words, offsets = [], []
    for m in PTB_WORD.finditer(text):
        start, end = m.span()
        tail = []  # clitics split off the end, last first: "they'll've" -> they 'll 've
        while (c := ENDS_IN_CLITIC.search(text, start, end)) and c.start() > start and text[c.start() - 1].isalpha():
            tail.append((c.start(), end))
            end = c.start()
        for a, b in [(start, end), *reversed(tail)]:
            words.append(text[a:b])
            offsets.append((a, b))
    return words, offsets


@lru_cache(maxsize=1)
def _mecab():
    try:
        import fugashi
        import ipadic
    except ImportError:
        raise ImportError(
            "the mecab words rule needs fugashi and ipadic: pip install 'seqdistill[ja]' (or pass pre-split words)"
        ) from None
    return fugashi.GenericTagger(ipadic.MECAB_ARGS)


def _mecab_words(tagger):
    def split(text: str) -> tuple[list[str], list[tuple[int, int]]]:
        words, offsets, pos = [], [], 0
        for line in text.splitlines(keepends=True):  # MeCab reads one line at a time
            for node in tagger(line):
                start = text.find(node.surface, pos)
                if start < 0:  # MeCab normalised the surface: keep the text's own characters
                    start = pos + len(node.white_space)
                end = start + len(node.surface)
                words.append(text[start:end])
                offsets.append((start, end))
                pos = end
        return words, offsets

    return split


def join_words(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The text of pre-split words (joined by one space) and each word's offsets into it."""
    offsets, pos = [], 0
    for w in words:
        offsets.append((pos, pos + len(w)))
        pos += len(w) + 1
    return " ".join(words), offsets


def implied_rule(sentences: Iterable[list[str]], limit: int = 20_000) -> str:
    """The words rule a corpus implies, from its first ``limit`` words: ``mecab`` when its words
    hold kana (Japanese) and at least 1% of them are CJK words of several characters, which the
    default rule would split into characters (the corpus was segmented into morphemes); ``ptb``
    when at least one word in 1,000 is a stand-alone clitic ("'s", "n't": the corpus was tokenised
    the Penn Treebank way, as CoNLL-2003 was); otherwise ``default``. A Chinese corpus segmented
    into multi-character words implies a Chinese segmenter, which seqdistill does not ship: it gets
    ``default``, so pass such text pre-split."""
    n = several = clitics = 0
    kana = False
    for words in sentences:
        for w in words:
            n += 1
            if HAN_OR_KANA.search(w):
                kana = kana or bool(KANA.search(w))
                several += len(w) > 1
            clitics += bool(STANDALONE_CLITIC.match(w))
        if n >= limit:
            break
    if kana and several >= max(1, n // 100):
        return "mecab"
    return "ptb" if clitics >= max(1, n // 1000) else "default"
