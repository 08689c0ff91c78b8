"""BILOU layers per entity type (paper 003): the automaton's Viterbi against brute force, and
nested spans through tag layers and back."""

import itertools
import math
import random

import pytest
import torch

from seqdistill.bilou import (
    BILOU_TAGS,
    decode_layers,
    is_valid,
    layers_from_spans,
    spans_from_layers,
    transition_scores,
)


def _brute_force(logp: torch.Tensor) -> tuple[list[int], float]:
    """Best valid sequence under log p(tags) = sum of emissions + equiprobable transitions."""
    trans, start, end = transition_scores()
    best, arg = -math.inf, None
    n = logp.shape[0]
    for seq in itertools.product(range(5), repeat=n):
        s = start[seq[0]] + logp[0, seq[0]] + end[seq[-1]]
        for i in range(1, n):
            s = s + trans[seq[i - 1], seq[i]] + logp[i, seq[i]]
        if s > best:
            best, arg = float(s), list(seq)
    return arg, best


def test_transitions_follow_figure_2():
    trans, start, end = transition_scores()
    allowed = {(BILOU_TAGS[a], BILOU_TAGS[b]) for a in range(5) for b in range(5) if trans[a, b] > -math.inf}
    assert allowed == {
        ("O", "O"),
        ("O", "B"),
        ("O", "U"),
        ("B", "I"),
        ("B", "L"),
        ("I", "I"),
        ("I", "L"),
        ("L", "O"),
        ("L", "B"),
        ("L", "U"),
        ("U", "O"),
        ("U", "B"),
        ("U", "U"),
    }
    for a in range(5):  # equiprobable: each state's allowed successors sum to probability 1
        assert torch.exp(trans[a]).sum().item() == pytest.approx(1.0)
    assert [BILOU_TAGS[i] for i in range(5) if start[i] > -math.inf] == ["O", "B", "U"]
    assert [BILOU_TAGS[i] for i in range(5) if end[i] > -math.inf] == ["O", "L", "U"]


def test_viterbi_equals_brute_force_and_is_always_valid():
    g = torch.Generator().manual_seed(0)
    lengths = [1, 2, 3, 4, 5]
    logits = torch.randn(len(lengths), 5, 3, 5, generator=g) * 3  # 3 entity types
    mask = torch.arange(5)[None] < torch.tensor(lengths)[:, None]
    tags = decode_layers(logits, mask)
    for b, n in enumerate(lengths):
        assert (tags[b, n:] == -1).all()
        for e in range(3):
            got = tags[b, :n, e].tolist()
            assert is_valid(got)
            want, _ = _brute_force(torch.log_softmax(logits[b, :n, e], -1))
            assert got == want


def test_adversarial_logits_still_decode_to_valid_layers():
    # the argmax of every word is an invalid sequence (I at the start, B at the end, O then L)
    logits = torch.full((1, 4, 1, 5), -5.0)
    for i, t in enumerate([2, 0, 3, 1]):
        logits[0, i, 0, t] = 5.0
    tags = decode_layers(logits, torch.ones(1, 4, dtype=torch.bool))[0, :, 0].tolist()
    assert is_valid(tags)


def test_nested_spans_round_trip_through_layers():
    types = ["PER", "ORG", "LOC"]
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 12)
        spans = []
        for t in types:  # non-overlapping spans within a type, free overlap across types
            i = 0
            while i < n:
                if rng.random() < 0.4:
                    j = rng.randint(i + 1, min(n, i + 4))
                    spans.append((i, j, t))
                    i = j
                else:
                    i += 1
        layers = layers_from_spans(spans, n, types)
        assert all(is_valid([row[e] for row in layers]) for e in range(len(types)))
        assert spans_from_layers(layers, types) == sorted(spans)


def test_layers_refuse_what_they_cannot_hold():
    with pytest.raises(ValueError, match="two PER entities overlap"):
        layers_from_spans([(0, 2, "PER"), (1, 3, "PER")], 4, ["PER"])
    with pytest.raises(ValueError, match="not one of PER"):
        layers_from_spans([(0, 1, "ORG")], 2, ["PER"])
    with pytest.raises(ValueError, match="outside the sentence"):
        layers_from_spans([(1, 5, "PER")], 3, ["PER"])
    # nesting across types is what the layers are for: "[Bank of [England]LOC]ORG"
    layers = layers_from_spans([(0, 3, "ORG"), (2, 3, "LOC")], 3, ["ORG", "LOC"])
    assert [[BILOU_TAGS[t] for t in row] for row in layers] == [["B", "O"], ["I", "O"], ["L", "U"]]


def test_nested_jsonl_round_trips_through_layers_and_flattens_for_build(tmp_path):
    import json

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.corpora import CorpusError, read_corpus
    from seqdistill.pipeline.build import CorpusSpec, scan_corpora

    rows = [
        {"words": ["Bank", "of", "England", "said"], "entities": [[0, 3, "ORG"], [2, 3, "LOC"]]},
        {"words": ["Anna", "Smith", "of", "Rome"], "entities": [[0, 2, "PER"], [0, 1, "PER_FIRST"], [3, 4, "LOC"]]},
        {"words": ["nothing", "here"], "entities": []},
    ]
    path = tmp_path / "nested.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    corpus = read_corpus(path, "nested", "train")
    assert corpus.nested and corpus.entity_types() == ["LOC", "ORG", "PER", "PER_FIRST"]
    types = corpus.entity_types()
    for sentence, layers in zip(corpus.sentences, corpus.layers(types)):
        assert spans_from_layers(layers, types) == sorted(sentence.entities)
    schema = LabelSchema("IOB2", ("LOC", "ORG", "PER", "PER_FIRST"))
    [flat] = scan_corpora([CorpusSpec("nested", str(path), "train", True)], "IOB2", schema)
    assert flat.labelled and flat.nested  # the outermost entities as tags, every entity kept
    sentences = list(flat.sentences())
    assert sentences[0].tags == ["B-ORG", "I-ORG", "I-ORG", "O"]
    assert sentences[1].tags == ["B-PER", "I-PER", "O", "B-LOC"]
    assert [s.entities for s in sentences] == [s.entities for s in corpus.sentences]
    overlapping = tmp_path / "same-type.jsonl"
    overlapping.write_text(
        json.dumps(rows[0])
        + "\n"
        + json.dumps({"words": ["a", "b", "c"], "entities": [[0, 2, "X"], [1, 3, "X"]]})
        + "\n"
    )
    with pytest.raises(CorpusError, match="same-type.jsonl:2: two X entities overlap"):
        scan_corpora([CorpusSpec("o", str(overlapping), "train", True)], "IOB2", schema)
    bad = tmp_path / "bad.jsonl"
    for line, match in (
        (json.dumps({"words": ["a", "b"], "entities": [[1, 3, "X"]]}), "does not fit"),
        (json.dumps({"words": ["a"], "entities": [[0, 1]]}), r"is not \[start, end, type\]"),
        (json.dumps({"words": ["a"], "entities": [], "tags": ["O"]}), "not both"),
    ):
        bad.write_text(json.dumps({"words": ["x"], "entities": []}) + "\n" + line + "\n")
        with pytest.raises(CorpusError, match=rf"bad.jsonl:2: .*{match}"):
            read_corpus(bad, "bad", "train")
    overlap = tmp_path / "overlap.jsonl"
    overlap.write_text(json.dumps({"words": ["a", "b", "c"], "entities": [[0, 2, "X"], [1, 3, "X"]]}) + "\n")
    with pytest.raises(CorpusError, match="overlap.jsonl:1: two X entities overlap"):
        read_corpus(overlap, "o", "train").layers(["X"])


def test_broken_layers_are_read_leniently():
    B_, I_, L_, U_, O_ = (BILOU_TAGS.index(t) for t in "BILUO")
    assert spans_from_layers([[B_], [I_], [B_], [L_]], ["X"]) == [(0, 2, "X"), (2, 4, "X")]  # B while open
    assert spans_from_layers([[B_], [U_], [I_], [O_]], ["X"]) == [(0, 1, "X"), (1, 2, "X"), (2, 3, "X")]
    assert spans_from_layers([[L_], [O_]], ["X"]) == [(0, 1, "X")]
