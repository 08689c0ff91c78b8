"""Corpora read in passes (corpora/streamed.py, issue 54): the same sentences, fingerprint and errors
as ``read_corpus`` in every format, whatever the block and batch sizes, and a build whose shards do
not depend on it."""

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqdistill.cache_schema import LabelSchema
from seqdistill.corpora import CorpusError, read_corpus
from seqdistill.corpora import parquet as parquet_reader
from seqdistill.corpora import read as read_module
from seqdistill.corpora.read import CorpusSource, sniff, split_lines
from seqdistill.corpora.streamed import scan_corpus

CONLL = "-DOCSTART- O\n\nAnna B-PER\nlives O\nin O\nRome B-LOC\n\nBob B-PER\nSmith I-PER\n\n"
SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


def _old_decode_lines(raw: bytes) -> list[str]:
    """What the reader split lines into before it streamed (the whole file, split once)."""
    return [line.decode("utf-8").rstrip("\r") for line in raw.split(b"\n")] if raw else []


@pytest.mark.parametrize(
    "raw", [b"", b"a", b"a\n", b"a\r\nb\r\n", b"\n\n", b"x y\n\nz w", "é ü\n日本\n".encode(), b"a\n\r\n b\n\n"]
)
@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_split_lines_equals_splitting_the_whole_file_at_any_block_size(raw, block):
    blocks = [raw[i : i + block] for i in range(0, len(raw), block)]
    digest = hashlib.sha256()
    assert list(split_lines(blocks, "f", digest)) == _old_decode_lines(raw)
    assert digest.hexdigest() == hashlib.sha256(raw).hexdigest()


def test_split_lines_names_the_line_of_bytes_that_are_not_utf8_across_blocks():
    raw = b"ok\nfine\nbad \xe9 byte\n"
    blocks = [raw[i : i + 2] for i in range(0, len(raw), 2)]
    with pytest.raises(CorpusError, match=r"f:3: bytes that are not UTF-8 at column 5"):
        list(split_lines(blocks, "f"))


def _old_sniff(lines: list[str]) -> str:
    """The sniffing rule as it read a whole list of lines."""
    body = [line.split() for line in lines if line.strip()][:200]
    if any(cols and cols[0] == "-DOCSTART-" for cols in body):
        return "conll"
    has_blank = any(not line.strip() for line in lines[:-1])
    widths = {len(c) for c in body}
    return "conll" if has_blank and len(widths) == 1 and 2 <= widths.pop() <= 10 else "text"


@pytest.mark.parametrize(
    "lines",
    [
        ["a b", "c d", ""],  # the only blank line is the last: text
        ["a b", "", "c d"],
        ["a b", "", "c d", ""],
        ["one two three"] * 250 + ["", "x y z"],  # the blank line after the first 200 lines counts
        ["a b"] * 199 + ["-DOCSTART-"],
        ["a b"] * 200 + ["-DOCSTART-"],  # beyond the first 200 non-blank lines: not seen
        ["a"] + [""] * 3 + ["b"],
        [],
    ],
)
def test_sniff_reading_lines_as_they_come_equals_the_whole_file_rule(lines):
    assert sniff("corpus.txt", iter(lines), labelled=False) == _old_sniff(lines)


def _files(tmp_path):
    """One small corpus in each line and row format, with what ``read_corpus`` is given."""
    conll = tmp_path / "c.conll"
    conll.write_text(CONLL)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(
        json.dumps({"words": ["Anna", "sings"], "tags": ["B-PER", "O"], "doc_id": 3})
        + "\n\n"
        + json.dumps({"words": ["in", "Rome"], "tags": ["O", "B-LOC"]})
        + "\n"
    )
    nested = tmp_path / "n.jsonl"
    nested.write_text(json.dumps({"words": ["Rome", "Bank"], "entities": [[0, 2, "PER"], [0, 1, "LOC"]]}) + "\n")
    text = tmp_path / "c.txt"
    text.write_text("Anna lives in Rome\n\nBob sings\n")
    table = pa.table(
        {
            "tokens": [["Anna", "sings"], ["-DOCSTART-"], [], ["in", "Rome"], ["Bob"]] * 3,
            "ner_tags": [["B-PER", "O"], ["O"], [], ["O", "B-LOC"], ["B-PER"]] * 3,
        }
    )
    parquet = tmp_path / "c.parquet"
    pq.write_table(table, parquet, row_group_size=4)
    spans = tmp_path / "s.jsonl"
    spans.write_text(json.dumps({"text": "Anna in Rome", "spans": [{"start": 8, "end": 12, "label": "LOC"}]}) + "\n")
    return {
        "conll": (conll, True),
        "jsonl": (jsonl, True),
        "nested": (nested, True),
        "text": (text, False),
        "parquet": (parquet, True),
        "spans": (f"spans:{spans}", True),
        "conll-unlabelled": (conll, False),
    }


@pytest.mark.parametrize("kind", ["conll", "jsonl", "nested", "text", "parquet", "spans", "conll-unlabelled"])
def test_a_streamed_corpus_gives_what_read_corpus_gives(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(parquet_reader, "BATCH_ROWS", 2)  # several batches, a -DOCSTART- across them
    path, labelled = _files(tmp_path)[kind]
    whole = read_corpus(path, "c", "train", labelled=labelled)
    if whole.nested:
        whole = whole.with_flat_tags("IOB2")
    source = CorpusSource.of(path, "c", "train", "auto", labelled, 0, -1, None)
    streamed = scan_corpus(source, "IOB2")
    schema = LabelSchema("IOB2", ("LOC", "PER"))
    streamed.check(schema)
    assert streamed.info() == whole.info()
    assert list(streamed.sentences()) == whole.sentences
    assert list(streamed.example_rows()) == whole.example_rows()


def test_a_streamed_corpus_is_converted_to_the_build_scheme(tmp_path):
    path = tmp_path / "c.conll"
    path.write_text(CONLL)
    streamed = scan_corpus(CorpusSource.of(path, "c", "train", "auto", True, 0, -1, None), "BILOU")
    assert streamed.scheme == "IOB2"
    assert [s.tags for s in streamed.sentences()] == [["U-PER", "O", "O", "U-LOC"], ["B-PER", "L-PER"]]


@pytest.mark.parametrize(
    "content, match",
    [
        ("a B-PER\n\nb I-LOC\n", r"c.conll:3: .*I-LOC"),  # a transition IOB2 forbids, found by the check pass
        ("a B-MISC\n", r"c.conll:1: tag 'B-MISC' is not in the label schema"),
        ("", "holds no sentences"),
    ],
)
def test_a_streamed_corpus_names_the_line_of_its_first_problem(tmp_path, content, match):
    path = tmp_path / "c.conll"
    path.write_text(content)
    with pytest.raises(CorpusError, match=match):
        scan_corpus(CorpusSource.of(path, "c", "train", "auto", True, 0, -1, None), "IOB2").check(SCHEMA)


def test_a_file_that_changes_between_passes_is_refused(tmp_path):
    path = tmp_path / "c.conll"
    path.write_text(CONLL)
    streamed = scan_corpus(CorpusSource.of(path, "c", "train", "auto", True, 0, -1, None), "IOB2")
    path.write_text(CONLL.replace("Anna", "Anne"))
    with pytest.raises(CorpusError, match="changed while the build read it"):
        list(streamed.sentences())


def test_the_reader_holds_a_block_not_the_file(tmp_path, monkeypatch):
    """A pass over a corpus reads it in blocks: the largest read is one block, whatever the size
    of the file (the memory of a build does not grow with its corpora)."""
    path = tmp_path / "big.conll"
    path.write_text("word O\n\n" * 5000)  # 40 kB
    sizes = []
    real = read_module.file_blocks

    def spy(p, size=4096):
        for block in real(p, size):
            sizes.append(len(block))
            yield block

    monkeypatch.setattr(read_module, "file_blocks", spy)
    source = CorpusSource.of(path, "c", "train", "conll", True, 0, -1, None)
    streamed = scan_corpus(source, "IOB2")
    assert streamed.examples == 5000 and len(sizes) >= 10 and max(sizes) <= 4096
    assert streamed.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
