"""Documents (issue 37): sentences split by pysbd, tagged in batches, offsets into the document."""

import json

import pytest
from click.testing import CliRunner
from conftest import toy_cache

from seqdistill.cli.evaluate import predict_main
from seqdistill.corpora.documents import read_documents, split_sentences
from seqdistill.inference import Tagger


def test_sentence_spans_keep_abbreviations_numbers_and_offsets():
    text = "  Peter visits Paris. He met Dr. Smith at 3.5 p.m. in the U.S. office!  Was it good?\n"
    spans = split_sentences(text)
    assert [text[a:b] for a, b in spans] == [
        "Peter visits Paris.",
        "He met Dr. Smith at 3.5 p.m. in the U.S. office!",
        "Was it good?",
    ]
    ja = "東京に住む。大阪で働く！"
    assert [ja[a:b] for a, b in split_sentences(ja, language="ja")] == ["東京に住む。", "大阪で働く！"]
    assert split_sentences("a b\n\nc d\n", "lines") == [(0, 3), (5, 8)]
    assert split_sentences(" one two ", "none") == [(1, 8)]
    with pytest.raises(ValueError, match="sentence splitter 'nltk' is not one of pysbd, spacy, lines, none"):
        split_sentences("x", "nltk")


def test_spacy_sentencizer_cuts_pretokenized_text_at_final_punctuation_and_line_breaks():
    """spaCy's sentencizer: pre-tokenized CoNLL-style text is cut after each final punctuation
    token and at every line break (a headline and its dateline are sentences of their own, as
    pysbd has them), offsets exact."""
    text = "Germany 's view was clear . EU rejects German call ! Peter Blackburn\n\nBRUSSELS 1996-08-22 \nThe end . "
    expected = [
        "Germany 's view was clear .",
        "EU rejects German call !",
        "Peter Blackburn",
        "BRUSSELS 1996-08-22",
        "The end .",
    ]
    for splitter in ("spacy", "pysbd"):
        spans = split_sentences(text, splitter)
        assert [text[a:b] for a, b in spans] == expected, splitter


@pytest.fixture(scope="module")
def student(tiny_encoder, tmp_path_factory):
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    d = tmp_path_factory.mktemp("docs")
    cache = toy_cache(tiny_encoder, d)
    train_student(
        cache, d / "s", MGKDConfig(epochs=1, max_steps=3, device="cpu", hidden_size=8, k=3), log=lambda *a: None
    )
    return d / "s"


def test_a_document_gives_the_spans_of_its_sentences_with_document_offsets(student):
    tagger = Tagger.load(student)
    sentences = ["peter visits the rome.", "anna visits paris!", "the peter visits the the paris."]
    doc = "  " + "  ".join(sentences) + "\n"
    (tagged,) = tagger.documents(doc)
    one_by_one = tagger(sentences)
    assert [s.text for s in tagged.sentences] == sentences
    assert [s.tags for s in tagged.sentences] == [s.tags for s in one_by_one]
    for s in tagged.sentences:
        assert [doc[a:b] for a, b in s.offsets] == s.words
    assert [(sp.type, doc[sp.char_start : sp.char_end]) for sp in tagged.spans] == [
        (sp.type, sp.text) for s in one_by_one for sp in s.spans
    ]
    assert tagger.documents(["", "   "])[0].sentences == []


def test_predict_documents_from_blank_line_separated_text(student, tmp_path):
    src = tmp_path / "docs.txt"
    src.write_text("peter visits rome. anna visits paris.\nthe end.\n\n\nrome.\n")
    assert read_documents(src) == ["peter visits rome. anna visits paris.\nthe end.", "rome."]
    out = tmp_path / "out.jsonl"
    args = ["--model", str(student), "--input", str(src), "--documents", "pysbd", "--output-format", "jsonl"]
    r = CliRunner().invoke(predict_main, [*args, "--output", str(out)])
    assert r.exit_code == 0, r.output
    docs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [len(d["sentences"]) for d in docs] == [3, 1]
    assert all(d["text"][sp["char_start"] : sp["char_end"]] == sp["text"] for d in docs for sp in d["spans"])
    r = CliRunner().invoke(predict_main, ["--model", str(student), "--input", str(src), "--documents", "pysbd"])
    assert r.output.count("-DOCSTART- O") == 2


def test_documents_against_sentences_on_a_corpus_of_docstart_blocks(student, tmp_path):
    """distill-eval --documents: with one sentence a line (``lines``) the document path finds the
    corpus's sentences and gives exactly their spans; with ``none`` each document is one sentence."""
    from seqdistill.corpora import read_corpus
    from seqdistill.deploy.documents import _layout, compare_documents

    sentences = [
        [("peter", "B-PER"), ("visits", "O"), ("rome", "B-LOC"), (".", "O")],
        [("anna", "B-PER"), ("visits", "O"), ("the", "O"), ("paris", "B-LOC")],
        [("the", "O"), ("peter", "B-PER"), ("visits", "O")],
        [("rome", "B-LOC"), ("the", "O"), ("anna", "B-PER"), ("!", "O")],
        [("paris", "B-LOC")],
    ]
    blocks = (
        ["-DOCSTART- -X- O O"]
        + ["\n".join(f"{w} {t}" for w, t in s) for s in sentences[:3]]
        + ["-DOCSTART- -X- O O"]
        + ["\n".join(f"{w} {t}" for w, t in s) for s in sentences[3:]]
    )
    path = tmp_path / "docs.conll"
    path.write_text("\n\n".join(blocks) + "\n")
    corpus = read_corpus(path, "docs", "test")
    text, offsets, firsts = _layout(corpus.sentences[:3], "lines")
    assert text.splitlines() == ["peter visits rome .", "anna visits the paris", "the peter visits"]
    assert [text[a:b] for a, b in offsets] == [w for s in corpus.sentences[:3] for w in s.words]
    prose, offsets, _ = _layout(corpus.sentences[:4], "pysbd")  # a line break only after no final punctuation
    assert prose == "peter visits rome . anna visits the paris\nthe peter visits\nrome the anna !"
    assert [prose[a:b] for a, b in offsets] == [w for s in corpus.sentences[:4] for w in s.words]
    assert firsts == [0, 4, 8]
    tagger = Tagger.load(student)
    lines = compare_documents(tagger, corpus, "lines", batch_size=2)
    assert (lines["documents"], lines["sentences"], lines["sentences_found"]) == (2, 5, 5)
    assert lines["same_spans"] == 1.0
    assert lines["spans_documents"] == lines["spans_sentences"]
    assert lines["f1_documents"] == lines["f1_sentences"]
    whole = compare_documents(tagger, corpus, "none")
    assert whole["sentences_found"] == 2


def test_eval_words_rule_only_with_documents(tmp_path):
    from seqdistill.cli.evaluate import eval_main

    data = tmp_path / "d.conll"
    data.write_text("Peter B-PER\n")
    r = CliRunner().invoke(eval_main, ["--model", str(tmp_path), "--data", str(data), "--words", "ptb"])
    assert r.exit_code != 0 and "--words goes with --documents" in r.output
