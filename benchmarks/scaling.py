"""How the cost of stage one and stage two grows with the work (issue 54, item 6).

    .venv/bin/python benchmarks/scaling.py [--sizes 10000,100000,1000000] [--out .data/scaling]

For each size N: a synthetic labelled corpus of N sentences (seeded; 3 to 14 words drawn from 60
word forms, entities tagged), then, each in its own child process so that peak memory is its own:

* build: `distill-cache build` with a tiny random CRF teacher (BERT, 2 layers of 32 units, from a
  config), K=4 and marginals, so that the host path, not the forward, dominates;
* verify: `distill-cache verify` (every checksum and the shards' agreement with the manifest);
* epoch: one epoch of `distill-train mgkd` over the cache (a BiLSTM-CRF student of 32 units,
  batch 32), every sentence of the train split once.

Each figure is words/s, seconds and peak RSS (the child's maximum resident set size). The seconds
are the phase's own: each child first runs its phase once on a warm-up corpus of 200 sentences
(its own cache and student), then on the N sentences, timed. The warm-up pays what every process
pays once whatever N is: the imports, the lazy ones too (transformers imports BERT's modules
when the first teacher loads, about 1.7 s here, and torch its compiler stack when the first
optimizer is made, about 1.5 s), so that the figure at 10k is the tool's own work and can be
compared with 1M's; its seconds are printed beside (--no-warm-up times the first run, as the
figures before 2026-11-28 did). Sizes already measured are kept in --out/N.json and skipped when
the command runs again (a long run resumes); --fresh measures them again. Prints the table
docs/BENCHMARKS.md holds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WORDS = [
    f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "su", "ta") for b in ("r", "n", "s", "t", "l", "d", "m", "p", "x", "z")
]
NAMES, PLACES = ["peter", "anna", "rome", "paris"], ["rome", "paris", "eu"]
WARM_UP = 200  # sentences of each child's first, untimed run


def corpus(path: Path, n: int, seed: int = 0) -> int:
    """N CoNLL sentences of 3 to 14 words, a PER and a LOC entity in most; returns the words."""
    rng = random.Random(seed)
    words = 0
    with open(path, "w") as f:
        for _ in range(n):
            length = rng.randint(3, 14)
            sent = [(rng.choice(WORDS), "O") for _ in range(length)]
            if rng.random() < 0.8:
                sent[rng.randrange(length)] = (rng.choice(NAMES), "B-PER")
            if rng.random() < 0.6:
                sent[rng.randrange(length)] = (rng.choice(PLACES), "B-LOC")
            f.write("".join(f"{w} {t}\n" for w, t in sent) + "\n")
            words += length
    return words


def tiny_teacher(d: Path) -> str:
    from behaviour_fingerprint import tiny_bert

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers import build_teacher

    if not (d / "teacher" / "teacher.json").exists():
        encoder = tiny_bert(d / "encoder")
        build_teacher(encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(d / "teacher")
    return str(d / "teacher")


def phase(name: str, d: Path, teacher: str) -> float:
    """Run one phase over ``d`` (its train.txt, its cache) in this process; returns its seconds."""
    from seqdistill.cache_schema import verify_cache
    from seqdistill.cli.train import entry
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache

    cache = d / "cache"
    t0 = time.perf_counter()
    if name == "build":
        spec = CorpusSpec("synthetic", str(d / "train.txt"), "train", True)
        build_cache(str(cache), teacher, [spec], BuildConfig(k=4, device="cpu"), log=lambda *a: None)
    elif name == "verify":
        problems = verify_cache(str(cache))
        if problems:
            raise SystemExit(f"verify found problems: {problems[:3]}")
    else:  # one epoch of a small MGKD student
        args = ["mgkd", "--cache", str(cache), "--out", str(d / "student"), "--epochs", "1"]
        args += ["--hidden-size", "32", "--batch-size", "32", "--k", "4"]
        try:
            entry(args)
        except SystemExit as e:
            if e.code:
                raise
    return time.perf_counter() - t0


def run_phase(name: str, d: Path, teacher: str, warm_up: bool) -> dict:
    """The child: one phase over ``d``, after a warm-up run over ``d.parent / "warm"`` (see the
    module's docstring); returns its seconds, the warm-up's and the peak RSS."""
    import resource

    first = phase(name, d.parent / "warm", teacher) if warm_up else None
    seconds = phase(name, d, teacher)
    return {
        "seconds": round(seconds, 2),
        "warm_up_seconds": None if first is None else round(first, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def measure(n: int, work: Path, warm_up: bool) -> dict:
    d = work / str(n)
    for where in (d, work / "warm"):
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
    words = corpus(d / "train.txt", n)
    corpus(work / "warm" / "train.txt", WARM_UP, seed=1)
    teacher = tiny_teacher(work)
    result = {"sentences": n, "words": words}
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1"}
    for name in ("build", "verify", "epoch"):
        cmd = [sys.executable, __file__, "--phase", name, "--dir", str(d), "--teacher", teacher]
        cmd += [] if warm_up else ["--no-warm-up"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode:
            raise SystemExit(f"{name} of {n:,} sentences failed ({p.returncode}):\n{p.stderr[-3000:]}")
        figures = json.loads(p.stdout.strip().splitlines()[-1])
        figures["words_per_s"] = round(words / figures["seconds"])
        result[name] = figures
        print(
            f"  {n:>9,} {name:<6} {figures['seconds']:8.1f} s {figures['words_per_s']:>10,} words/s "
            f"{figures['peak_rss_mib']:8,} MiB (warm-up {figures['warm_up_seconds']} s)",
            flush=True,
        )
    shutil.rmtree(d)  # the cache of 1M sentences is large; the figures are what is kept
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--out", default=str(ROOT / ".data" / "scaling"))
    ap.add_argument("--fresh", action="store_true", help="measure sizes already measured again")
    ap.add_argument("--no-warm-up", action="store_true", help="time each phase's first run in its process")
    ap.add_argument("--phase", choices=("build", "verify", "epoch"), help=argparse.SUPPRESS)  # the child's
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--teacher", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.phase, Path(args.dir), args.teacher, not args.no_warm_up)))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        path = out / f"{n}.json"
        if path.exists() and not args.fresh:
            rows.append(json.loads(path.read_text()))
            continue
        result = measure(n, out / "work", not args.no_warm_up)
        path.write_text(json.dumps(result, indent=1) + "\n")
        rows.append(result)
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs; teacher: tiny random BERT (2x32) + CRF, K=4")
    print(f"| sentences | words | phase | seconds | words/s | peak RSS (MiB) | warm-up ({WARM_UP} sentences), s |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        for name in ("build", "verify", "epoch"):
            p = r[name]
            print(
                f"| {r['sentences']:,} | {r['words']:,} | {name} | {p['seconds']} | {p['words_per_s']:,} | "
                f"{p['peak_rss_mib']:,} | {p.get('warm_up_seconds')} |"
            )


if __name__ == "__main__":
    main()
