"""``distill-eval --predictions``: a model's predictions kept on disk as they are made, so that a
slow teacher killed part-way through a test set continues where it stopped (deploy/evaluate.py).

The tagger here is a small rule (capitalised words are B-PER, and ``(i, i + 1, "PER")`` spans)
that counts what it is asked to decode; the command line runs the real chain on a trained
student in tests/test_students.py."""

import json
import os
import random
import signal

import pytest
from conftest import in_child

from seqdistill.deploy.evaluate import predict_resumable, predictions_file


class RuleTagger:
    scheme = "BIO"

    def __init__(self, kill_after: int | None = None):
        self.asked, self.kill_after = 0, kill_after

    def _count(self, sentences):
        if self.kill_after is not None and self.asked >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a run killed mid-test-set
        self.asked += len(sentences)

    def predict(self, sentences, batch_size=64):
        self._count(sentences)
        return [["B-PER" if w[0].isupper() else "O" for w in s] for s in sentences]

    def predict_spans(self, sentences, batch_size=64):
        self._count(sentences)
        return [[(i, i + 1, "PER") for i, w in enumerate(s) if w[0].isupper()] for s in sentences]


def sentences(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = ["anna", "Anna", "rome", "Rome", "visits", "the", "Ö", "ß"]
    return [[rng.choice(vocab) for _ in range(rng.randint(1, 9))] for _ in range(n)]


def test_a_killed_run_keeps_its_finished_chunks_and_the_rerun_decodes_only_the_rest(tmp_path):
    words = sentences(600)
    path = tmp_path / "p" / "teacher.jsonl"
    expected = RuleTagger().predict(words)
    # killed by SIGKILL when asked for its third chunk of 100: 200 sentences were written
    code = in_child(lambda: predict_resumable(RuleTagger(kill_after=200), words, path, nested=False, chunk=100), {})
    assert code == -signal.SIGKILL
    assert len(path.read_text().splitlines()) == 1 + 200
    with open(path, "ab") as f:  # and a line cut short, as a kill inside a write leaves
        f.write(b'{"tags": ["B-PER", "O')
    tagger = RuleTagger()
    assert predict_resumable(tagger, words, path, nested=False, chunk=100) == expected
    assert tagger.asked == 400
    lines = path.read_text().splitlines()
    assert len(lines) == 601 and json.loads(lines[0])["sentences"] == 600
    assert [json.loads(line)["tags"] for line in lines[1:]] == expected
    again = RuleTagger()  # complete: read back, nothing decoded
    assert predict_resumable(again, words, path, nested=False, chunk=100) == expected and again.asked == 0


def test_nested_predictions_come_back_as_span_tuples(tmp_path):
    words = sentences(30, seed=1)
    path = tmp_path / "spans.jsonl"
    first = predict_resumable(RuleTagger(), words, path, nested=True, chunk=8)
    assert first == RuleTagger().predict_spans(words)
    again = RuleTagger()
    assert predict_resumable(again, words, path, nested=True, chunk=8) == first and again.asked == 0
    assert all(isinstance(s, tuple) for p in first for s in p)


def test_predictions_of_other_text_a_model_or_a_damaged_line_are_refused_by_name(tmp_path):
    words = sentences(20)
    path = tmp_path / "p.jsonl"
    predict_resumable(RuleTagger(), words, path, nested=False, model="m1", data="a.txt", chunk=8)
    # the same text under another path continues
    assert predict_resumable(RuleTagger(), words, path, nested=False, model="m1", data="b.txt") == RuleTagger().predict(
        words
    )
    other = [list(s) for s in words]
    other[7][0] = "Zürich"
    with pytest.raises(ValueError, match=r"p\.jsonl: line 1 is not the header.*delete the file"):
        predict_resumable(RuleTagger(), other, path, nested=False, model="m1")
    with pytest.raises(ValueError, match="line 1 is not the header"):
        predict_resumable(RuleTagger(), words, path, nested=False, model="m2")
    with pytest.raises(ValueError, match="line 1 is not the header"):
        predict_resumable(RuleTagger(), words, path, nested=True, model="m1")
    lines = path.read_text().splitlines()
    lines[4] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl, line 5: not a prediction line"):
        predict_resumable(RuleTagger(), words, path, nested=False, model="m1")


def test_predictions_for_the_first_sentences_of_a_text_continue_into_the_whole_text(tmp_path):
    words = sentences(600, seed=2)
    path = tmp_path / "teacher.jsonl"
    # a run over the first 300 sentences, killed after 200 of them
    code = in_child(
        lambda: predict_resumable(RuleTagger(kill_after=200), words[:300], path, nested=False, chunk=100), {}
    )
    assert code == -signal.SIGKILL and len(path.read_text().splitlines()) == 1 + 200
    tagger = RuleTagger()
    assert predict_resumable(tagger, words, path, nested=False, data="test.txt", chunk=100) == RuleTagger().predict(
        words
    )
    assert tagger.asked == 400  # the 200 kept sentences are not decoded again
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert len(lines) == 601 and header["sentences"] == 600 and header["data"] == "test.txt"
    assert not path.with_name("teacher.jsonl.part").exists()
    again = RuleTagger()
    assert predict_resumable(again, words, path, nested=False, chunk=100) == RuleTagger().predict(words)
    assert again.asked == 0
    # a file for the whole text is not read as a shorter text's, nor one whose first sentences differ
    with pytest.raises(ValueError, match="line 1 is not the header"):
        predict_resumable(RuleTagger(), words[:300], path, nested=False)
    other = tmp_path / "other.jsonl"
    predict_resumable(RuleTagger(), words[:300], other, nested=False)
    changed = [list(s) for s in words]
    changed[299][-1] = "Zürich"
    with pytest.raises(ValueError, match=r"other\.jsonl: line 1 is not the header"):
        predict_resumable(RuleTagger(), changed, other, nested=False)
    assert len(other.read_text().splitlines()) == 301  # the refused file is left as it was


def test_each_model_path_gets_its_own_file():
    a, b = predictions_file("d", ".data/g300/teacher"), predictions_file("d", ".data/g100/teacher")
    assert a.name == ".data_g300_teacher.jsonl" and a != b
    assert predictions_file("d", "/abs/s p/kd-s14").name == "abs_s_p_kd-s14.jsonl"
