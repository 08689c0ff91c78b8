"""benchmarks/seed_table.py: variants and seeds from directory names, means, paired differences and the
share of the teacher, by hand."""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from seed_table import table, variant_and_seed  # noqa: E402


def test_an_exports_suffix_stays_in_its_variant_and_the_seed_is_read_before_it():
    assert variant_and_seed("runs/sru++-s14-int8") == ("sru++-int8", 14)
    assert variant_and_seed("runs/sru++-nodist-s15") == ("sru++-nodist", 15)
    assert variant_and_seed("runs/default") == ("default", 13)


def test_macro_f1_means_paired_differences_and_the_teachers_share_match_a_hand_computation(tmp_path):
    records = [{"model": str(tmp_path / "teacher-int8"), "kind": "teacher", "f1": 0.90, "macro_f1": 0.80}]
    macro = {"a": [0.76, 0.78, 0.77], "a-nodist": [0.72, 0.75, 0.73]}
    for variant, values in macro.items():
        for seed, m in zip((13, 14, 15), values):
            d = tmp_path / f"{variant}-s{seed}-int8"
            d.mkdir()
            (d / "training.json").write_text(json.dumps({"best_dev_f1": 0.9, "best_dev_macro_f1": m + 0.05}))
            records.append({"model": str(d), "kind": "student", "f1": 0.5, "macro_f1": m})
    rows = {r.split(" | ")[0].lstrip("| "): r for r in table(records, "a-nodist-int8", "macro_f1").splitlines()}
    a = rows["a-int8"]
    assert "| 13, 14, 15 | 82.00 ± 1.00 | 77.00 ± 1.00 | 76.00, 78.00, 77.00 |" in a
    assert f"| {100 * 77.0 / 80.0:.1f}% |" in a  # 96.2% of the teacher's 80.00
    diffs = [4.0, 3.0, 4.0]
    assert a.endswith(f"| {statistics.mean(diffs):.2f} ± {statistics.stdev(diffs):.2f} (3) |")
    assert rows["teacher: teacher-int8"].startswith("| teacher: teacher-int8 | — | — | 80.00 |")
    assert "test macro F1" in table(records, metric="macro_f1").splitlines()[0]
    assert "test F1 |" in table(records).splitlines()[0]
