"""benchmarks/plot_peers.py (issue 84): the rows of a committed peers table or of peers.py's JSON,
grouped by model family over seeds, and drawn."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import plot_peers  # noqa: E402

SECTION = """## A run
<!-- peers:toy:begin -->
```sh
.venv/bin/python benchmarks/peers.py --setting toy
```

| model | test F1 | ms/sentence b1 | ms/sentence b32 | size on disk |
|---|---:|---:|---:|---:|
| teacher, ONNX int8 | 91.60 | 62.62 (36.38x spaCy) | 63.54 (83.14x spaCy) | 320.4 MB |
| spaCy NER, gold | 81.23 | 1.72 (1.00x spaCy) | 0.76 (1.00x spaCy) | 6.7 MB |
| student (seed 13) | 90.00 | 0.60 (0.35x spaCy) | 0.40 (0.53x spaCy) | 5.0 MB |
| student (seed 14) | 89.00 | 0.70 (0.41x spaCy) | 0.44 (0.58x spaCy) | 5.0 MB |
| student (seed 15) | 88.00 | 0.65 (0.38x spaCy) | 0.42 (0.55x spaCy) | 5.0 MB |
| GLiNER of gliner_medium's size | — (speed only) | 90.00 (52.3x spaCy) | 80.00 (105.3x spaCy) | 700.0 MB |
<!-- peers:toy:end -->
"""


def test_a_committed_table_gives_the_same_rows_as_the_json(tmp_path):
    md = tmp_path / "B.md"
    md.write_text(SECTION)
    rows = plot_peers.rows_from_markdown(str(md), "toy")
    assert rows["teacher, ONNX int8"] == {"f1": 91.60, "mb": 320.4, "ms_b1": 62.62, "ms_b32": 63.54}
    assert rows["GLiNER of gliner_medium's size"]["f1"] is None and len(rows) == 6
    raw = {
        n: {"f1": v["f1"], "bytes": v["mb"] * 1e6, "ms_b1": v["ms_b1"], "ms_b32": v["ms_b32"]} for n, v in rows.items()
    }
    (tmp_path / "rows.json").write_text(json.dumps(raw))
    back = plot_peers.rows_from_json(str(tmp_path / "rows.json"))
    assert back.keys() == rows.keys() and all(back[n] == pytest.approx(rows[n]) for n in rows if rows[n]["f1"])
    with pytest.raises(SystemExit, match=r"no section 'other' \(sections: toy\)"):
        plot_peers.rows_from_markdown(str(md), "other")


def test_seeds_make_one_family_and_the_picture_is_drawn(tmp_path):
    md = tmp_path / "B.md"
    md.write_text(SECTION)
    groups = plot_peers.families(plot_peers.rows_from_markdown(str(md), "toy"))
    assert set(groups) == {"teacher, ONNX int8", "spaCy NER, gold", "student"}  # speed-only rows left out
    assert groups["student"]["f1"] == pytest.approx(89.0) and groups["student"]["seeds"] == 3
    assert groups["student"]["ms_b1"] == pytest.approx(0.65) and groups["student"]["ms_b32"] == pytest.approx(0.42)
    assert [plot_peers.kind(n) for n in sorted(groups)] == ["spacy", "student", "teacher"]
    png = tmp_path / "p.png"
    plot_peers.plot(groups, str(png), "toy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
