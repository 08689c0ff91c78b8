import itertools
import random

import numpy as np
import pytest

from seqdistill.cache_schema import LabelSchema, TagError
from seqdistill.cache_schema.labels import (
    SCHEMES,
    check_sequence,
    convert_tags,
    detect_scheme,
    spans_to_tags,
    tags_to_spans,
)


def test_schema_tag_order_and_full_tag_set():
    s = LabelSchema("iob2", ("PER", "LOC"))
    assert s.scheme == "IOB2"
    assert s.tags == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    assert LabelSchema("BILOU", ("X",)).tags == ("O", "B-X", "I-X", "L-X", "U-X")
    assert LabelSchema("BIOES", ("X",)).tags == ("O", "B-X", "I-X", "E-X", "S-X")
    assert LabelSchema("sBIO", ("PER", "LOC")).tags == ("O", "I", "LOC", "PER")
    assert s.encode(["B-PER", "I-PER", "O"]) == [3, 4, 0]
    assert s.decode([3, 4, 0]) == ["B-PER", "I-PER", "O"]
    with pytest.raises(TagError, match="not in the label schema"):
        s.encode(["B-ORG"])
    with pytest.raises(TagError, match="do not match"):
        LabelSchema("IOB2", ("PER",), ("O", "I-PER", "B-PER"))
    with pytest.raises(TagError, match="unknown tag scheme"):
        LabelSchema("IOB3", ("PER",))
    assert LabelSchema.from_json(s.to_json()) == s


@pytest.mark.parametrize(
    "tags, scheme, bad",
    [
        (["O", "I-PER"], "IOB2", 1),
        (["I-PER"], "IOB2", 0),
        (["B-PER", "I-LOC"], "IOB2", 1),
        (["B-PER", "I-PER", "O"], "IOB2", None),
        (["I-PER", "B-PER"], "IOB1", None),
        (["O", "B-PER"], "IOB1", 1),
        (["B-PER"], "IOB1", 0),
        (["B-PER"], "BIOES", 0),  # must end with E or S
        (["B-PER", "E-PER", "S-LOC"], "BIOES", None),
        (["B-PER", "O"], "BIOES", 1),
        (["U-PER", "B-LOC", "L-LOC"], "BILOU", None),
        (["PER", "I", "LOC", "O"], "sBIO", None),
        (["I"], "sBIO", 0),
        (["O", "I"], "sBIO", 1),
        (["X-PER"], "IOB2", 0),
        (["B-"], "IOB2", 0),
    ],
)
def test_check_sequence(tags, scheme, bad):
    problem = check_sequence(tags, scheme)
    assert (problem is None) == (bad is None)
    if bad is not None:
        assert problem[0] == bad


@pytest.mark.parametrize("scheme", SCHEMES)
def test_allowed_masks_agree_with_check_sequence_by_enumeration(scheme):
    """A sequence is valid iff its start, every transition and its end are allowed (all sequences
    of length 1..4 over the full tag set of two types)."""
    schema = LabelSchema(scheme, ("A", "B"))
    start, trans, end = schema.allowed()
    n_valid = 0
    for length in range(1, 5):
        for ids in itertools.product(range(schema.num_tags), repeat=length):
            by_mask = start[ids[0]] and end[ids[-1]] and all(trans[a, b] for a, b in zip(ids, ids[1:]))
            valid = check_sequence(schema.decode(ids), scheme) is None
            assert by_mask == valid, schema.decode(ids)
            n_valid += valid
    assert n_valid > 0


def _random_spans(rng: random.Random, length: int, types=("A", "B")):
    spans, i = [], 0
    while i < length:
        if rng.random() < 0.5:
            n = rng.randint(1, min(3, length - i))
            spans.append((i, i + n, rng.choice(types)))
            i += n
        else:
            i += 1
    return spans


@pytest.mark.parametrize("scheme", SCHEMES)
def test_spans_round_trip_and_conversion(scheme):
    rng = random.Random(0)
    for _ in range(300):
        length = rng.randint(1, 8)
        spans = _random_spans(rng, length)
        tags = spans_to_tags(spans, length, scheme)
        assert check_sequence(tags, scheme) is None, tags
        if scheme == "sBIO":  # adjacent entities stay apart; sBIO keeps the type on the first word only
            assert [(s, e) for s, e, _ in tags_to_spans(tags, scheme)] == [(s, e) for s, e, _ in spans]
        else:
            assert tags_to_spans(tags, scheme) == spans
        for target in SCHEMES:
            converted = convert_tags(tags, scheme, target)
            assert check_sequence(converted, target) is None
            assert [(s, e) for s, e, _ in tags_to_spans(converted, target)] == [(s, e) for s, e, _ in spans]


def test_iob1_uses_b_only_between_adjacent_same_type_entities():
    assert spans_to_tags([(0, 2, "PER"), (2, 3, "PER"), (4, 5, "LOC")], 5, "IOB1") == [
        "I-PER",
        "I-PER",
        "B-PER",
        "O",
        "I-LOC",
    ]
    assert convert_tags(["B-PER", "B-PER", "I-PER"], "IOB2", "IOB1") == ["I-PER", "B-PER", "I-PER"]


def test_detect_scheme():
    assert detect_scheme([["B-PER", "I-PER", "O"]]) == "IOB2"
    assert detect_scheme([["I-PER", "I-PER", "B-PER"]]) == "IOB1"
    assert detect_scheme([["S-PER", "O"]]) == "BIOES"
    assert detect_scheme([["U-PER", "O"]]) == "BILOU"
    assert detect_scheme([["PER", "I", "O"]]) == "sBIO"
    assert detect_scheme([["O", "O"]]) == "IOB2"


def test_allowed_masks_shapes():
    start, trans, end = LabelSchema("IOB2", ("PER",)).allowed()
    assert start.tolist() == [True, True, False]
    assert trans.tolist() == [[True, True, False], [True, True, True], [True, True, True]]
    assert end.dtype == np.bool_ and end.all()


# -- BMES and BMEWO (Chinese NER corpora; issue 21) --------------------------------------------------


def test_bmes_and_bmewo_schemas_parse_and_detect():
    assert LabelSchema("bmes", ("ORG",)).tags == ("O", "B-ORG", "M-ORG", "E-ORG", "S-ORG")
    assert LabelSchema("BMEWO", ("ORG",)).tags == ("O", "B-ORG", "M-ORG", "E-ORG", "W-ORG")
    assert detect_scheme([["B-ORG", "M-ORG", "E-ORG", "S-PER", "O"]]) == "BMES"
    assert detect_scheme([["B-ORG", "M-ORG", "E-ORG"], ["O"]]) == "BMES"
    assert detect_scheme([["B-ORG", "M-ORG", "E-ORG", "W-PER", "O"]]) == "BMEWO"
    assert detect_scheme([["W-PER", "O"]]) == "BMEWO"
    # no M- and no W-: the same strings mean the same spans in BIOES
    assert detect_scheme([["B-ORG", "E-ORG", "S-PER"]]) == "BIOES"
    assert tags_to_spans(["B-ORG", "M-ORG", "E-ORG", "W-PER", "O"], "BMEWO") == [(0, 3, "ORG"), (3, 4, "PER")]


@pytest.mark.parametrize(
    "tags, scheme, bad, reason",
    [
        (["B-ORG", "M-ORG", "E-ORG", "S-PER", "O"], "BMES", None, None),
        (["B-ORG", "E-ORG", "W-PER", "O"], "BMEWO", None, None),
        (["M-ORG", "E-ORG"], "BMES", 0, "a sentence cannot start with 'M-ORG' in BMES"),
        (["B-ORG", "M-ORG"], "BMES", 1, "a sentence cannot end with 'M-ORG' in BMES"),
        (["B-ORG", "O"], "BMES", 1, "'B-ORG' cannot be followed by 'O' in BMES"),
        (["B-ORG", "E-PER"], "BMES", 1, "'B-ORG' cannot be followed by 'E-PER' in BMES"),
        (["S-ORG", "M-ORG", "E-ORG"], "BMES", 1, "'S-ORG' cannot be followed by 'M-ORG' in BMES"),
        (["B-ORG", "I-ORG", "E-ORG"], "BMES", 1, "ill-formed BMES tag 'I-ORG': expected 'O' or 'B/M/E/S-TYPE'"),
        (["S-ORG"], "BMEWO", 0, "ill-formed BMEWO tag 'S-ORG': expected 'O' or 'B/M/E/W-TYPE'"),
        (["W-ORG", "M-ORG"], "BMEWO", 1, "'W-ORG' cannot be followed by 'M-ORG' in BMEWO"),
        (["B-ORG", "M-ORG", "E-ORG"], "BIOES", 1, "ill-formed BIOES tag 'M-ORG'"),
    ],
)
def test_bmes_and_bmewo_refuse_ill_formed_sequences_by_name(tags, scheme, bad, reason):
    problem = check_sequence(tags, scheme)
    if bad is None:
        assert problem is None
    else:
        assert problem[0] == bad and reason in problem[1]
    if bad is not None:
        with pytest.raises(TagError, match=f"position {bad}: "):
            convert_tags(tags, scheme, "IOB2")


def test_bmes_and_bmewo_round_trip_through_iob2_and_bioes():
    bmes = ["B-ORG", "M-ORG", "M-ORG", "E-ORG", "O", "S-PER", "B-LOC", "E-LOC", "S-LOC"]
    iob2 = ["B-ORG", "I-ORG", "I-ORG", "I-ORG", "O", "B-PER", "B-LOC", "I-LOC", "B-LOC"]
    bioes = ["B-ORG", "I-ORG", "I-ORG", "E-ORG", "O", "S-PER", "B-LOC", "E-LOC", "S-LOC"]
    bmewo = ["B-ORG", "M-ORG", "M-ORG", "E-ORG", "O", "W-PER", "B-LOC", "E-LOC", "W-LOC"]
    assert convert_tags(bmes, "BMES", "IOB2") == iob2
    assert convert_tags(bmes, "BMES", "BIOES") == bioes
    assert convert_tags(iob2, "IOB2", "BMES") == bmes
    assert convert_tags(bioes, "BIOES", "BMEWO") == bmewo
    assert convert_tags(bmewo, "BMEWO", "BMES") == bmes
    assert convert_tags(convert_tags(bmewo, "BMEWO", "IOB2"), "IOB2", "BMEWO") == bmewo
    assert spans_to_tags(tags_to_spans(bmes, "BMES"), len(bmes), "BMES") == bmes


def test_bmes_scores_equal_their_bioes_spelling():
    from seqdistill.metrics import span_scores

    gold = [["B-ORG", "M-ORG", "E-ORG", "O", "S-PER"]]
    pred = [["B-ORG", "M-ORG", "E-ORG", "O", "O"]]
    bioes = lambda seqs: [[t.replace("M-", "I-") for t in s] for s in seqs]
    want = span_scores(bioes(gold), bioes(pred), "BIOES")
    assert span_scores(gold, pred, "BMES") == want and want["recall"] == 0.5
    w = lambda seqs: [[t.replace("S-", "W-") for t in s] for s in seqs]
    assert span_scores(w(gold), w(pred), "BMEWO") == want
