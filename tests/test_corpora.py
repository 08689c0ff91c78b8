import json

import pytest
from click.testing import CliRunner

from seqdistill.cli.cache import main as cache_cli
from seqdistill.corpora import CorpusError, derive_label_schema, read_corpus


def test_conll_reader_documents_columns_and_fingerprint(corpus_files):
    conll, _ = corpus_files
    c = read_corpus(conll, "conll", "train")
    assert [s.words for s in c.sentences] == [
        ["EU", "rejects", "German", "call"],
        ["Peter", "Blackburn"],
        ["BRUSSELS", "1996-08-22"],
    ]
    assert c.sentences[1].tags == ["B-PER", "I-PER"]
    assert [s.doc_id for s in c.sentences] == ["1", "1", "2"]
    assert c.sentences[0].line == 3 and c.scheme == "IOB2" and c.labelled
    assert len(c.sha256) == 64
    chunks = read_corpus(conll, "conll", "train", tag_column=2)
    assert chunks.sentences[0].tags == ["B-NP", "B-VP", "B-NP", "I-NP"]
    unl = read_corpus(conll, "conll", "train", labelled=False)
    assert not unl.labelled and unl.sentences[0].tags is None
    info = c.info()
    assert (info.examples, info.words, info.labelled) == (3, 8, True)


def test_jsonl_and_text_readers(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(
        json.dumps({"words": ["Ann", "runs"], "tags": ["B-PER", "O"], "doc_id": 7})
        + "\n\n"
        + json.dumps({"words": ["x"]})
        + "\n"
    )
    with pytest.raises(CorpusError, match=r"a.jsonl:3: .*no tags while others have"):
        read_corpus(p, "j")
    c = read_corpus(p, "j", labelled=False)
    assert [s.words for s in c.sentences] == [["Ann", "runs"], ["x"]] and c.sentences[0].doc_id == "7"
    t = tmp_path / "raw.txt"
    t.write_text("one two  three\n\n  four\n")
    c = read_corpus(t, "raw", "unlabelled", labelled=False)
    assert [s.words for s in c.sentences] == [["one", "two", "three"], ["four"]]
    with pytest.raises(CorpusError, match=r"raw.txt:3: 1 columns where earlier lines have 3 .*unlabelled"):
        read_corpus(t, "raw")  # raw text asked for as labelled data


def test_label_schema_from_corpora_converts_schemes(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("x B-PER\ny I-PER\n\nz B-LOC\n")
    b = tmp_path / "b.conll"
    b.write_text("u S-ORG\nv O\n")
    ca, cb = read_corpus(a, "a"), read_corpus(b, "b")
    assert (ca.scheme, cb.scheme) == ("IOB2", "BIOES")
    schema, (ca2, cb2) = derive_label_schema([ca, cb])
    assert schema.scheme == "IOB2" and schema.entity_types == ("LOC", "ORG", "PER")
    assert cb2.sentences[0].tags == ["B-ORG", "O"]
    schema, converted = derive_label_schema([ca, cb], scheme="BILOU")
    assert converted[0].sentences[0].tags == ["B-PER", "L-PER"]
    cb2.check_labels(schema.__class__("IOB2", ("ORG",)))
    with pytest.raises(CorpusError, match=r"a.txt:4: tag 'B-LOC' is not in the label schema"):
        ca.check_labels(schema.__class__("IOB2", ("PER",)))


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("tag.txt", "a B-PER\nb Q-PER\n", r"tag.txt:2: ill-formed IOB2 tag 'Q-PER'"),
        ("trans.txt", "a B-PER\nb O\nc I-PER\n\nd O\n", r"trans.txt:3: .*'O' cannot be followed by 'I-PER'"),
        ("start.txt", "a O\n\nb I-LOC\nc B-PER\n", r"start.txt:3: a sentence cannot start with 'I-LOC' in IOB2"),
        ("empty.txt", "", r"empty.txt: the file holds no sentences"),
        ("blank.txt", "\n\n\n", r"blank.txt: the file holds no sentences"),
        ("bad.jsonl", '{"words": ["a"]\n', r"bad.jsonl:1: invalid JSON"),
        ("len.jsonl", '{"words": ["a", "b"], "tags": ["O"]}\n', r"len.jsonl:1: 1 tags for 2 words"),
        ("words.jsonl", '{"words": []}\n', r"words.jsonl:1: 'words' must be a non-empty list"),
        ("list.jsonl", '["a"]\n', r"list.jsonl:1: expected an object"),
    ],
)
def test_malformed_inputs_name_file_and_line(tmp_path, name, content, match):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(CorpusError, match=match):
        read_corpus(p, "c")


def test_word_first_and_tag_last_read_lines_of_any_width_other_columns_do_not(tmp_path):
    """MeCab output (the Japanese NER corpus of DATA.md): 12 fields for a known word, 10 for an
    unknown one, between the word and the tag."""
    p = tmp_path / "mecab.txt"
    known = "\t".join(["東京", "OTHER", *["x"] * 9, "B-LOC"])
    unknown = "\t".join(["アジャイル", "KATAK", *["x"] * 7, "I-LOC"])
    p.write_text(f"{known}\n{unknown}\nに\tHIRAG\tO\n\n")
    c = read_corpus(p, "ja")
    assert c.sentences[0].words == ["東京", "アジャイル", "に"] and c.sentences[0].tags == ["B-LOC", "I-LOC", "O"]
    with pytest.raises(CorpusError, match=r"mecab.txt:2: 10 columns where earlier lines have 12"):
        read_corpus(p, "ja", tag_column=11)  # a named column must mean the same on every line
    with pytest.raises(CorpusError, match=r"mecab.txt:2: 10 columns where earlier lines have 12"):
        read_corpus(p, "ja", word_column=1)


def test_explicit_iob1_scheme_is_enforced(tmp_path):
    p = tmp_path / "iob1.txt"
    p.write_text("a I-LOC\nb B-PER\n")
    with pytest.raises(CorpusError, match=r"iob1.txt:2: 'I-LOC' cannot be followed by 'B-PER' in IOB1"):
        read_corpus(p, "c", scheme="IOB1")
    p.write_text("a I-LOC\nb B-LOC\n")
    assert read_corpus(p, "c").scheme == "IOB1"


def test_non_utf8_bytes_name_the_line(tmp_path):
    p = tmp_path / "latin.txt"
    p.write_bytes("a O\n\nb O\nM\xfcller B-PER\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin.txt:4: bytes that are not UTF-8 at column 2"):
        read_corpus(p, "c")


def test_missing_file_and_bad_names(tmp_path):
    with pytest.raises(CorpusError, match="no such file"):
        read_corpus(tmp_path / "nope.txt", "c")
    (tmp_path / "a.txt").write_text("a O\n")
    with pytest.raises(CorpusError, match="corpus name '../x' is not a valid name"):
        read_corpus(tmp_path / "a.txt", "../x")
    with pytest.raises(CorpusError, match="tag column 5 does not exist"):
        read_corpus(tmp_path / "a.txt", "c", tag_column=5)


def test_check_corpus_command(corpus_files, tmp_path):
    conll, _ = corpus_files
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(conll)])
    assert r.exit_code == 0, r.output
    assert "3 sentences, 8 words" in r.output and "LOC, MISC, ORG, PER" in r.output
    bad = tmp_path / "bad.txt"
    bad.write_text("a B-PER\nb O\nc I-PER\n")
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(bad), "--scheme", "IOB2"])
    assert r.exit_code == 1 and "bad.txt:3:" in r.output


def test_scheme_names_are_case_insensitive(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("x B-PER\ny I-PER\n")
    schema, (c,) = derive_label_schema([read_corpus(p, "a")], "bioes")
    assert schema.scheme == "BIOES" and c.sentences[0].tags == ["B-PER", "E-PER"]
    with pytest.raises(CorpusError, match="unknown tag scheme 'iob9'"):
        derive_label_schema([read_corpus(p, "a")], "iob9")


BMES = """南 B-LOC
京 E-LOC
市 O
长 O
江 B-LOC
大 M-LOC
桥 E-LOC

张 S-PER
三 O
在 O
中 B-ORG
国 M-ORG
银 M-ORG
行 E-ORG
"""


def test_check_corpus_reads_bmes_and_bmewo(tmp_path):
    """A BMES corpus (Chinese NER, a character per line) used to stop at check-corpus with
    "ill-formed BIOES tag 'M-ORG'"."""
    p = tmp_path / "resume.bmes"
    p.write_text(BMES, encoding="utf-8")
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(p)])
    assert r.exit_code == 0, r.output
    assert "2 sentences, 14 words" in r.output and "scheme BMES, entity types: LOC, ORG, PER" in r.output
    c = read_corpus(p, "c")
    assert c.scheme == "BMES"
    schema, (iob2,) = derive_label_schema([c], "IOB2")
    assert iob2.sentences[1].tags == ["B-PER", "O", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG"]
    schema, (back,) = derive_label_schema([iob2], "BMES")  # and written back
    assert [s.tags for s in back.sentences] == [s.tags for s in c.sentences]
    assert schema.tags[:5] == ("O", "B-LOC", "M-LOC", "E-LOC", "S-LOC")
    w = tmp_path / "w.txt"
    w.write_text(BMES.replace("S-PER", "W-PER"), encoding="utf-8")
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(w)])
    assert r.exit_code == 0 and "scheme BMEWO" in r.output, r.output
    bad = tmp_path / "bad.txt"
    bad.write_text(BMES.replace("桥 E-LOC", "桥 O"), encoding="utf-8")
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(bad)])
    assert r.exit_code == 1 and "bad.txt:7: 'M-LOC' cannot be followed by 'O' in BMES" in r.output
    r = CliRunner().invoke(cache_cli, ["check-corpus", str(p), "--scheme", "BIOES"])
    assert r.exit_code == 1 and "resume.bmes:6: ill-formed BIOES tag 'M-LOC'" in r.output
