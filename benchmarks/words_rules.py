"""The words rules on CoNLL-2003 (``seqdistill.corpora.words``): for each rule, the share of test
sentences whose raw text (the corpus's words joined by spaces) it splits into other words than
the corpus's, and its speed in words a second (median of ``--repeats`` passes over the test set,
every rule in this one process, one after the other in each pass).

    .venv/bin/python benchmarks/words_rules.py --write docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BEGIN, END = "<!-- words_rules:begin -->", "<!-- words_rules:end -->"
RULES = ("default", "ptb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", default=None, help="Markdown file to write the section into.")
    args = parser.parse_args()

    from seqdistill.corpora import read_corpus
    from seqdistill.corpora.words import split_words

    conll = Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en"
    sentences = [s.words for s in read_corpus(conll / "test.txt", "test", "test").sentences]
    texts = [" ".join(words) for words in sentences]
    n_words = sum(map(len, sentences))
    rows = []
    times = {rule: [] for rule in RULES}
    for _ in range(args.repeats):
        for rule in RULES:
            t = time.perf_counter()
            for text in texts:
                split_words(text, rule)
            times[rule].append(time.perf_counter() - t)
    for rule in RULES:
        differ = sum(split_words(text, rule)[0] != words for text, words in zip(texts, sentences))
        rows.append((rule, differ, n_words / statistics.median(times[rule])))
    base = rows[0][2]
    lines = [
        BEGIN,
        "",
        "Command: `.venv/bin/python benchmarks/words_rules.py --write docs/BENCHMARKS.md`",
        "",
        f"Data: the CoNLL-2003 test set ({len(texts):,} sentences, {n_words:,} words), each sentence's words "
        f"joined by spaces. Machine: {platform.machine()}, {platform.system()}, Python {platform.python_version()}, "
        f"one process; median of {args.repeats} passes.",
        "",
        "| words rule | test sentences split into other words than the corpus's | words/s | speed against default |",
        "|---|---:|---:|---:|",
    ]
    for rule, differ, rate in rows:
        lines.append(f"| {rule} | {differ:,} ({differ / len(texts):.1%}) | {rate:,.0f} | {rate / base:.2f}x |")
    lines += ["", END]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from doc_section import write_section

        write_section(args.write, BEGIN, END, "## Words rules on CoNLL-2003 (issue 37)", text)


if __name__ == "__main__":
    main()
