"""Where two teacher layers of one cache choose different best paths, and whether the more
confident of them is the right one (issue 81: what `mgkd --teachers`' shares should follow).

    .venv/bin/python benchmarks/teachers_disagree.py --cache .data/headlines/cache \
        --teachers mpnet,embeddinggemma [--json out.json]

Per corpus and split of the cache, read from the cache alone (no model runs): the sentences, the share
where the teachers' top paths (``kbest_paths[0]``) differ, which teacher gives its own path the higher
probability there (``kbest_log_probs[0]``), and on gold rows where exactly one teacher's path is the
gold: how often that is the more confident teacher's and how often each teacher's (``--teacher-shares
confidence`` against always taking one teacher). Also each split's mean eq. 2 shares (paper 002,
``losses.teacher_shares``; unlabelled rows share evenly).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--teachers", required=True, help="two teacher layers, comma-separated")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    import numpy as np
    import torch

    from seqdistill.cache_schema import EXAMPLES_LAYER, CacheReader
    from seqdistill.students.losses import teacher_shares

    teachers = args.teachers.split(",")
    if len(teachers) != 2:
        sys.exit(f"--teachers {args.teachers}: name two teacher layers")
    reader = CacheReader(args.cache)
    tag_id = {t: i for i, t in enumerate(reader.manifest.label_schema.tags)}
    fields = {EXAMPLES_LAYER: ["words", "tags", "corpus", "split"]}
    fields |= {t: ["kbest_paths", "kbest_log_probs", "gold_nll"] for t in teachers}
    splits: dict[str, dict] = {}
    for row in reader.iter_examples(fields):
        ex = row[EXAMPLES_LAYER]
        gold = ex.get("tags")
        s = splits.setdefault(
            f"{ex['corpus']}/{ex['split']}",
            {"sentences": 0, "disagree": 0, "more_confident": dict.fromkeys(teachers, 0), "one_right": 0,
             "confident_right": 0, "right": dict.fromkeys(teachers, 0), "eq2": []},
        )  # fmt: skip
        s["sentences"] += 1
        tops = [np.asarray(row[t]["kbest_paths"][0]) for t in teachers]
        log_p = [float(row[t]["kbest_log_probs"][0]) for t in teachers]
        if gold is not None:
            ce = torch.tensor([[float(row[t]["gold_nll"] or 0.0) / max(1, len(ex["words"]))] for t in teachers])
            s["eq2"].append(teacher_shares(ce, torch.tensor([True]), "mt")[:, 0].tolist())
        if np.array_equal(tops[0], tops[1]):
            continue
        s["disagree"] += 1
        confident = int(np.argmax(log_p))
        s["more_confident"][teachers[confident]] += 1
        if gold is None:
            continue
        right = [np.array_equal(top, [tag_id[g] for g in gold]) for top in tops]
        if sum(right) == 1:
            s["one_right"] += 1
            s["confident_right"] += right[confident]
            for t, r in zip(teachers, right):
                s["right"][t] += r
    out = {}
    for name, s in splits.items():
        eq2 = np.mean(s.pop("eq2"), 0).round(4).tolist() if s.get("eq2") else None
        out[name] = s | {"eq2_shares": dict(zip(teachers, eq2)) if eq2 else None}
        line = (
            f"{name}: {s['sentences']:,} sentences, top paths differ on {s['disagree']:,} "
            f"({100 * s['disagree'] / max(1, s['sentences']):.1f}%); the more confident there: {s['more_confident']}"
        )
        if s["one_right"]:
            line += (
                f"; of {s['one_right']} where exactly one is right, the more confident in {s['confident_right']} "
                f"({100 * s['confident_right'] / s['one_right']:.0f}%), each: {s['right']}"
            )
        if eq2:
            line += f"; eq. 2 shares, mean: {out[name]['eq2_shares']}"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
