"""benchmarks/type_overlaps.py (issue 82): a per-type student's overlapping entities, classed by the gold."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import type_overlaps  # noqa: E402


def test_type_overlaps_are_counted_and_classed_by_the_gold():
    """benchmarks/type_overlaps.py (issue 82): pairs of predicted entities of different types that
    share a word, by how many of the two are gold."""
    gold = [[(0, 3, "ORG"), (2, 3, "LOC")], [(0, 1, "PER")], []]
    pred = [
        [(0, 3, "ORG"), (2, 3, "LOC"), (1, 2, "PER")],  # ORG/LOC both right; ORG/PER one right
        [(0, 1, "PER"), (0, 2, "PER")],  # one type: no overlap counted
        [(0, 2, "LOC"), (1, 3, "MISC")],  # neither
    ]
    assert type_overlaps.overlaps(sorted(pred[0])) == [((0, 3, "ORG"), (1, 2, "PER")), ((0, 3, "ORG"), (2, 3, "LOC"))]
    assert type_overlaps.count_overlaps(gold, pred) == {
        "sentences": 2,
        "pairs": 3,
        "both right": 1,
        "one right": 1,
        "neither": 1,
    }
