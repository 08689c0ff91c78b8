"""F1 against ms a sentence, one picture per `benchmarks/peers.py` run (issue 84).

    .venv/bin/python benchmarks/plot_peers.py --json .data/peers/conll-gemma.json --out docs/peers-conll.png
    .venv/bin/python benchmarks/plot_peers.py --benchmarks docs/BENCHMARKS.md --section conll-gemma \
        --out docs/peers-conll.png --title "CoNLL-2003 test"

The rows come from ``peers.py --json`` (its rows: name -> f1, bytes, ms_b1, ms_b32) or, when that
file is gone, from the run's table as ``peers.py --write`` committed it (the section between
``<!-- peers:NAME:begin -->`` and ``<!-- peers:NAME:end -->``): the same figures, rounded as printed.

One family per model name without its "(seed N)": its seeds' mean F1 and median ms. Each family is
drawn at batch 1 (filled) and batch 32 (hollow) with a line between the two, ms on a log axis (the
teacher is 100x the students). spaCy's rows are stars, the teacher's squares, the students' circles;
rows timed but not scored ("speed only") are left out. Size on disk is in each label. matplotlib
(the ``plots`` extra), Agg backend: no screen needed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

SEED = re.compile(r"(.*) \(seed (\d+)\)")
ROW = re.compile(
    r"^\| (?P<name>.+?) \| (?P<f1>[^|]+?) \| (?P<b1>[\d.]+) \([^)]*\) \| (?P<b32>[\d.]+) \([^)]*\) \| "
    r"(?P<mb>[\d.]+) MB \|$"
)


def rows_from_json(path: str) -> dict[str, dict]:
    """``peers.py --json``'s rows: name -> {f1 (None: speed only), mb, ms_b1, ms_b32}."""
    return rows_from_peers(json.loads(Path(path).read_text()))


def rows_from_peers(raw: dict[str, dict]) -> dict[str, dict]:
    """The rows ``peers.compare`` returns (and ``--json`` writes) as this script reads them."""
    return {
        name: {"f1": v["f1"], "mb": v["bytes"] / 1e6, "ms_b1": v["ms_b1"], "ms_b32": v["ms_b32"]}
        for name, v in raw.items()
    }


def rows_from_markdown(path: str, section: str) -> dict[str, dict]:
    """The rows of the table ``peers.py --write`` put in ``path``'s section ``section``."""
    text = Path(path).read_text()
    begin, end = f"<!-- peers:{section}:begin -->", f"<!-- peers:{section}:end -->"
    if begin not in text or end not in text:
        found = sorted(set(re.findall(r"<!-- peers:(.+?):begin -->", text)))
        raise SystemExit(f"{path}: no section {section!r} (sections: {', '.join(found) or 'none'})")
    body = text[text.index(begin) : text.index(end)]
    rows = {}
    for line in body.splitlines():
        m = ROW.match(line.strip())
        if m:
            f1 = m["f1"].strip()
            rows[m["name"]] = {
                "f1": None if "speed only" in f1 else float(f1),
                "mb": float(m["mb"]),
                "ms_b1": float(m["b1"]),
                "ms_b32": float(m["b32"]),
            }
    if not rows:
        raise SystemExit(f"{path}: section {section!r} holds no peers table")
    return rows


def families(rows: dict[str, dict]) -> dict[str, dict]:
    """Rows grouped by name without "(seed N)": mean F1, median ms, the seeds' count; scored rows only."""
    groups: dict[str, list[dict]] = {}
    for name, v in rows.items():
        if v["f1"] is None:
            continue
        m = SEED.fullmatch(name)
        groups.setdefault(m.group(1) if m else name, []).append(v)
    return {
        name: {
            "f1": statistics.mean(v["f1"] for v in vs),
            "ms_b1": statistics.median(v["ms_b1"] for v in vs),
            "ms_b32": statistics.median(v["ms_b32"] for v in vs),
            "mb": statistics.median(v["mb"] for v in vs),
            "seeds": len(vs),
        }
        for name, vs in groups.items()
    }


def kind(name: str) -> str:
    low = name.lower()
    return "spacy" if low.startswith("spacy") else "teacher" if low.startswith("teacher") else "student"


def plot(groups: dict[str, dict], out: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marker = {"spacy": "*", "teacher": "s", "student": "o"}
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, g) in enumerate(sorted(groups.items(), key=lambda kv: kv[1]["ms_b1"])):
        c, m = colours[i % len(colours)], marker[kind(name)]
        size = 160 if m == "*" else 60
        seeds = f", {g['seeds']} seeds" if g["seeds"] > 1 else ""
        label = f"{name} ({g['mb']:.1f} MB{seeds})"
        ax.plot([g["ms_b1"], g["ms_b32"]], [g["f1"], g["f1"]], color=c, linewidth=1, zorder=1)
        ax.scatter([g["ms_b1"]], [g["f1"]], marker=m, s=size, color=c, label=label, zorder=2)
        ax.scatter([g["ms_b32"]], [g["f1"]], marker=m, s=size, facecolors="white", edgecolors=c, zorder=2)
    ax.set_xscale("log")
    ax.set_xlabel("ms a sentence, one thread (filled: batch 1, hollow: batch 32; log scale)")
    ax.set_ylabel("test F1")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--json", help="peers.py --json output")
    src.add_argument("--benchmarks", help="a Markdown file peers.py --write wrote a section of")
    ap.add_argument("--section", help="with --benchmarks: the section's name (peers.py's setting or --section)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="F1 against speed")
    args = ap.parse_args()
    if args.benchmarks and not args.section:
        ap.error("--benchmarks needs --section")
    rows = rows_from_json(args.json) if args.json else rows_from_markdown(args.benchmarks, args.section)
    plot(families(rows), args.out, args.title)
    print(args.out)


if __name__ == "__main__":
    main()
