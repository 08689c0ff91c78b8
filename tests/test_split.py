"""Issue 65: `distill-cache split`, one labelled file into seeded train/dev/test files."""

import pytest
from click.testing import CliRunner

from seqdistill.cli.cache import main as cache_cli
from seqdistill.corpora import CorpusError, read_corpus
from seqdistill.corpora.splits import split_corpus


def _conll(path, docs: list[int]) -> list[list[str]]:
    """A CoNLL file of len(docs) documents with docs[d] sentences each; sentence words are unique."""
    sentences, lines = [], []
    for d, n in enumerate(docs):
        lines.append("-DOCSTART- O\n\n")
        for k in range(n):
            words = [f"d{d}s{k}", "visits", "Rome"]
            sentences.append(words)
            lines.append("".join(f"{w} {t}\n" for w, t in zip(words, ["B-PER", "O", "B-LOC"])) + "\n")
    path.write_text("".join(lines))
    return sentences


def test_documents_stay_whole_and_every_sentence_lands_once(tmp_path):
    sentences = _conll(tmp_path / "all.txt", [3, 1, 4, 2, 5, 1, 2, 3, 2, 2])  # 25 sentences, 10 documents
    report = split_corpus(str(tmp_path / "all.txt"), tmp_path / "out", (0.6, 0.2, 0.2), seed=1)
    seen = []
    for name in ("train", "dev", "test"):
        corpus = read_corpus(tmp_path / "out" / f"{name}.txt", name, name)
        docs = {}
        for s in corpus.sentences:
            docs.setdefault(s.doc_id, set()).add(s.words[0].split("s")[0])
        assert all(len(owners) == 1 for owners in docs.values())  # a file's document is one source document
        assert report[name]["sentences"] == len(corpus.sentences) and report[name]["documents"] == len(docs)
        assert report[name]["entities"] == 2 * len(corpus.sentences)
        assert corpus.sentences[0].tags == ["B-PER", "O", "B-LOC"]
        seen += [s.words for s in corpus.sentences]
    assert sorted(seen) == sorted(sentences)  # every sentence once
    by_doc = {}
    for w in seen:
        by_doc.setdefault(w[0].split("s")[0], []).append(w)
    assert len(by_doc) == 10
    # the same seed gives the same files, another seed other ones
    again = split_corpus(str(tmp_path / "all.txt"), tmp_path / "again", (0.6, 0.2, 0.2), seed=1)
    split_corpus(str(tmp_path / "all.txt"), tmp_path / "other", (0.6, 0.2, 0.2), seed=2)
    text = {d: (tmp_path / d / "test.txt").read_text() for d in ("out", "again", "other")}
    assert text["out"] == text["again"] != text["other"]
    assert again["train"]["sentences"] >= 0.6 * 25  # train is dealt until it holds its share


def test_sentences_are_drawn_by_ratio_without_documents(tmp_path):
    lines = "".join(f"w{i} B-PER\nx O\n\n" for i in range(100))
    (tmp_path / "c.txt").write_text(lines)
    report = split_corpus(str(tmp_path / "c.txt"), tmp_path / "o", (0.8, 0.1, 0.1))
    assert [report[n]["sentences"] for n in ("train", "dev", "test")] == [80, 10, 10]
    assert report["train"]["documents"] is None
    assert "-DOCSTART-" not in (tmp_path / "o" / "dev.txt").read_text()


def test_too_small_a_file_is_refused_and_nothing_is_written(tmp_path):
    _conll(tmp_path / "small.txt", [4, 4])  # two documents for three splits
    with pytest.raises(CorpusError, match="2 documents .* too few .* test would be empty"):
        split_corpus(str(tmp_path / "small.txt"), tmp_path / "o")
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="add up to 1"):
        split_corpus(str(tmp_path / "small.txt"), tmp_path / "o", (0.8, 0.1, 0.2))


def test_the_command_states_the_counts_and_refuses_to_overwrite(tmp_path):
    _conll(tmp_path / "all.txt", [2] * 10)
    args = ["split", str(tmp_path / "all.txt"), "--out", str(tmp_path / "o"), "--ratios", "0.6,0.2,0.2"]
    r = CliRunner().invoke(cache_cli, args)
    assert r.exit_code == 0, r.output
    assert "train: " in r.output and "12 sentences, 6 documents, 36 words, 24 entities" in r.output
    before = (tmp_path / "o" / "train.txt").read_text()
    r = CliRunner().invoke(cache_cli, [*args[:-2], "--ratios", "0.5,0.3,0.2"])
    assert r.exit_code == 1 and "exist; remove them or choose another --out" in r.output
    assert (tmp_path / "o" / "train.txt").read_text() == before
    r = CliRunner().invoke(cache_cli, [*args[:-2], "--ratios", "a,b"])
    assert r.exit_code == 2 and "three numbers" in r.output
