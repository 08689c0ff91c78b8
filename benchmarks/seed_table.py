"""Mean ± std over seeds of the models one `distill-eval --json` run scored (docs/RESULTS.md).

    .venv/bin/python benchmarks/seed_table.py EVAL.json [EVAL2.json ...] [--reference te]

A model directory named ``NAME-sSEED`` is seed SEED of variant NAME, and ``NAME-sSEED-EXPORT`` (an
export of it, ``sru++-s13-int8``) seed SEED of variant ``NAME-EXPORT``; one without the suffix is the
default seed of the example scripts (13). Test F1 comes from the JSON; dev F1 (the best epoch) from
each model's ``training.json`` where there is one. ``--metric macro_f1`` reads the macro F1 instead
(paper 003's measure; dev: ``best_dev_macro_f1``). When the JSON holds exactly one teacher, each
variant's mean is also given as a share of the teacher's (issue 82's "95% of the teacher"). With
``--reference``, every other variant also gets its difference to the reference paired by seed (mean ±
std of the per-seed differences), which is tighter than comparing two means when a seed moves both
runs the same way. The std is the sample std (n - 1), as in `distill-train report`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

DEFAULT_SEED = 13  # the example scripts' seed when SEED is not set
TEACHER_SEED = -1  # a teacher's one row: no seed, no paired difference


def variant_and_seed(model: str) -> tuple[str, int]:
    name = Path(model).name
    m = re.fullmatch(r"(.+)-s(\d+)(-[a-z0-9]+)?", name)
    return (m.group(1) + (m.group(3) or ""), int(m.group(2))) if m else (name, DEFAULT_SEED)


def cell(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def table(records: list[dict], reference: str | None = None, metric: str = "f1") -> str:
    test: dict[str, dict[int, float]] = {}
    dev: dict[str, dict[int, float]] = {}
    for r in records:
        if r.get("kind") == "teacher":  # a teacher is one model, not a seed of a student variant
            variant, seed = f"teacher: {Path(r['model']).name}", TEACHER_SEED
        else:
            variant, seed = variant_and_seed(r["model"])
        test.setdefault(variant, {})[seed] = 100 * r[metric]
        training = Path(r["model"]) / "training.json"
        if training.exists() and (f1 := json.loads(training.read_text()).get(f"best_dev_{metric}")) is not None:
            dev.setdefault(variant, {})[seed] = 100 * f1
    if reference is not None and reference not in test:
        raise SystemExit(f"--reference {reference}: no model of that variant in the JSON (have: {', '.join(test)})")
    teachers = [v for v, by_seed in test.items() if list(by_seed) == [TEACHER_SEED]]
    teacher = test[teachers[0]][TEACHER_SEED] if len(teachers) == 1 else None
    f1 = "macro F1" if metric == "macro_f1" else "F1"
    head = f"| variant | seeds | dev {f1} | test {f1} | test {f1} per seed |"
    head += (" of the teacher |" if teacher else "") + (f" Δ {reference} (paired) |" if reference else "")
    lines = [head, "|---|---|---:|---:|---|" + ("---:|" if teacher else "") + ("---:|" if reference else "")]
    for variant, by_seed in test.items():
        seeds = sorted(by_seed)
        dev_f1 = dev.get(variant, {})
        row = (
            f"| {variant} | {'—' if seeds == [TEACHER_SEED] else ', '.join(map(str, seeds))}"
            f" | {cell([dev_f1[s] for s in seeds if s in dev_f1])} | {cell([by_seed[s] for s in seeds])}"
            f" | {', '.join(f'{by_seed[s]:.2f}' for s in seeds)} |"
        )
        if teacher:
            row += f" {100 * statistics.mean(by_seed.values()) / teacher:.1f}% |"
        if reference:
            ref = test[reference]
            diffs = [by_seed[s] - ref[s] for s in seeds if s in ref]  # a teacher's seed is in no student's
            row += f" {cell(diffs)} ({len(diffs)}) |" if variant != reference and diffs else " |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("evals", nargs="+", type=Path, help="JSON files written by `distill-eval --json`")
    ap.add_argument("--reference", help="variant to pair the others against by seed (e.g. te)")
    ap.add_argument("--metric", choices=["f1", "macro_f1"], default="f1", help="micro F1 (default) or macro F1")
    args = ap.parse_args()
    records = []
    for path in args.evals:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"{path}: not a distill-eval --json file ({e})") from e
        records += data if isinstance(data, list) else [data]
    print(table(records, args.reference, args.metric), end="")


if __name__ == "__main__":
    main()
