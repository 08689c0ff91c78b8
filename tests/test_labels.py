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
