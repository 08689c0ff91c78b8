"""A student in a web page (issue 57): the page's transfer size, its time to first tag, and ms per
sentence at batch 1 and 32 in Chromium (onnxruntime-web, WASM, one thread) and in Node
(onnxruntime-node, one thread) beside Python's ONNX Runtime (one thread) on the same sentences; and
the differences of both JavaScript runtimes from Python's ``Tagger`` over a golden set.

    .venv/bin/python benchmarks/web_page.py --model .data/demo/mgkd-onnx-int8 \
        --test .data/demo/test.txt --out .data/web --write docs/BENCHMARKS.md

Needs ``npm ci --prefix js`` and Chromium (``apt-get install chromium``). The model: ``make demo``'s
MGKD int8 export (``--model`` may be any student, teacher or export; it is made a web folder with
``distill-export --web``). The golden set: the first ``--golden`` sentences of ``--test`` (pre-split,
as the corpus gives them) and the raw texts of tests/test_web.py (accents, emoji, CJK,
right-to-left, clitics). The timed sentences: ``--sentences`` of the test set. ``--rounds`` rounds,
each Python then Node then a fresh Chromium page; medians over rounds. A screenshot of the page
tagging a paragraph goes to ``--screenshot``. ``--write FILE`` replaces the section between the
markers in FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from doc_section import write_section  # noqa: E402
from test_web import GOLDEN_TEXTS  # noqa: E402

from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.deploy.web import export_web  # noqa: E402
from seqdistill.inference import Tagger  # noqa: E402
from seqdistill.inference.tagger import latency  # noqa: E402

BEGIN, END = "<!-- web_page:begin -->", "<!-- web_page:end -->"
PARAGRAPH = (
    "Peter Blackburn, a spokesman for the European Commission in Brussels, said on Thursday that Germany "
    "would not follow the advice of the U.S. Department of Agriculture.\n"
    "Angela Merkel met Emmanuel Macron in Paris before flying to New York for the United Nations General "
    "Assembly. Lionel Messi scored twice as Inter Miami beat Orlando City 3-1 in Florida on Saturday."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True, help="CoNLL test file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--golden", type=int, default=1000)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--screenshot", default="docs/web-page.png")
    ap.add_argument("--write", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = out / "page"
    if not (folder / "web.json").is_file():
        export_web(args.model, folder)
    sents = [s.words for s in read_corpus(args.test, "test", "test").sentences]
    tagger = Tagger.load(folder, threads=1)
    inputs = [*sents[: args.golden], *GOLDEN_TEXTS]
    golden = {"inputs": inputs, "answers": [s.to_json() for s in tagger(inputs)]}
    (out / "golden.json").write_text(json.dumps(golden, ensure_ascii=False))
    timed = sents[: args.sentences]
    (out / "sentences.json").write_text(json.dumps({"sentences": timed, "paragraph": PARAGRAPH}, ensure_ascii=False))
    rounds = []
    for r in range(args.rounds):
        python = {str(b): latency(tagger, timed, b) for b in (1, 32)}  # keyed as the JSON of the others
        command = ["node", str(ROOT / "benchmarks" / "web_page.mjs"), str(folder), str(out / "sentences.json")]
        if r == 0:
            command += ["--golden", str(out / "golden.json"), "--screenshot", str(ROOT / args.screenshot)]
        js = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        js["python"] = {"ms_per_sentence": python}
        rounds.append(js)
        print(
            f"round {r}: python {python}, node {js['node']['ms_per_sentence']}, chromium {js['chromium']['ms_per_sentence']}"
        )
    (out / "rounds.json").write_text(json.dumps(rounds, indent=1))
    text = report(args, rounds, len(inputs))
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## A student in a web page (issue 57)", text)


def report(args, rounds: list[dict], n_golden: int) -> str:
    def med(get) -> float:
        return statistics.median(get(r) for r in rounds)

    first = rounds[0]
    files = first["files"]
    served = {r["url"].split("/", 3)[3] or "index.html": r for r in first["chromium"]["requests"]}
    encodings = sorted({str(r["encoding"]) for r in served.values()})
    rows = []
    for rel, size in sorted(files.items(), key=lambda kv: -kv[1]["raw"]):
        if rel not in served:
            continue
        rows.append(
            f"| `{rel}` | {size['raw'] / 1e6:.2f} | {size['gzip'] / 1e6:.2f} | {size['br'] / 1e6:.2f} | {served[rel]['body'] / 1e6:.2f} |"
        )
    total_raw = sum(files[rel]["raw"] for rel in served if rel in files)
    lines = [
        BEGIN,
        "",
        f"Command: `.venv/bin/python benchmarks/web_page.py --model {args.model} --test {args.test} --out {args.out}"
        f"{' --write ' + args.write if args.write else ''}`",
        "",
        f"Data: the first {args.sentences:,} sentences of CoNLL-2003 test (eng.testb), pre-split; the golden set: the first "
        f"{args.golden:,} and the {n_golden - args.golden} raw texts of tests/test_web.py. Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, no GPU; Chromium {chromium_version()} headless (Debian), Node {node_version()}; one "
        f"thread in every runtime. {args.rounds} rounds (Python, then Node, then a fresh page), medians over rounds.",
        "",
        f"**Differences from Python's Tagger** over the {n_golden:,} golden inputs (tags, spans, UTF-16 offsets; "
        f"scores to 1e-4): Node {len(first['node']['differences'])}, Chromium {len(first['chromium']['differences'])}. "
        f"The largest span-score difference: Node {first['node']['largest_score_difference']:.1e}, "
        f"Chromium {first['chromium']['largest_score_difference']:.1e}.",
        "",
        "| ms per sentence | batch 1 | batch 32 |",
        "|---|---:|---:|",
        *(
            f"| {name} | {med(lambda r, k=key: r[k]['ms_per_sentence']['1']):.2f} "
            f"| {med(lambda r, k=key: r[k]['ms_per_sentence']['32']):.2f} |"
            for name, key in (
                ("Python, ONNX Runtime (`Tagger`)", "python"),
                ("Node, onnxruntime-node", "node"),
                ("Chromium, onnxruntime-web (WASM)", "chromium"),
            )
        ),
        "",
        f"Chromium against Python at batch 1: "
        f"{med(lambda r: r['chromium']['ms_per_sentence']['1'] / r['python']['ms_per_sentence']['1']):.2f}x "
        f"(median of the rounds' ratios); at batch 32: "
        f"{med(lambda r: r['chromium']['ms_per_sentence']['32'] / r['python']['ms_per_sentence']['32']):.2f}x.",
        "",
        f"**The page loaded**: model ready {med(lambda r: r['chromium']['ready_ms']):,.0f} ms after navigation (every file "
        f"fetched and its sha256 checked, the WASM compiled, the session made); the first tag of a {len(PARAGRAPH)}-character "
        f"paragraph then took {med(lambda r: r['chromium']['first_tag_ms']):,.0f} ms, "
        f"{med(lambda r: r['chromium']['first_tag_after_navigation_ms']):,.0f} ms after navigation.",
        "",
        f"**Transferred**: {first['chromium']['transferred'] / 1e6:.2f} MB in {len(served)} requests, bodies and headers, "
        f"served by js/bin/serve.js with the encoding Chromium asked for ({', '.join(encodings)}); "
        f"{total_raw / 1e6:.2f} MB uncompressed. Per file (MB):",
        "",
        "| file | raw | gzip -9 | brotli 9 | transferred |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        END,
    ]
    return "\n".join(lines)


def chromium_version() -> str:
    return subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout.split()[1]


def node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
