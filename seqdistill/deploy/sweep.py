"""One cache, a whole ablation table (issue 11, first step): ``distill-train sweep`` runs a grid of
``distill-train`` runs over one cache, ``distill-train report`` turns them into a Markdown table.

A grid is TOML: ``[base]`` holds options every run shares, ``[grid]`` lists the values of the axes;
keys are ``distill-train`` options without the dashes (``losses``, ``k``, ``recipe``, ``seed``,
``hidden-size`` ...), flags are ``true``/``false``::

    [base]
    recipe = "mgkd"
    epochs = 10
    [grid]
    losses = ["hard", "hard,seq-ce,fuzzy"]
    k = [1, 5, 10]
    seed = [1, 2, 3]

Each point of the cartesian product is one run, saved as a single ``distill-train`` would save it
under ``OUT/<axis=value,...>``. Every point goes through the loader of ``distill-train --config``
(``students.config``) before anything runs, so a key that is no option of the point's recipe, or a
value it cannot take, stops the sweep at once with the key named; each run is then
``distill-train --config OUT/<run>/run.toml``; a run whose ``training.json`` exists is skipped, so a killed sweep
resumes by running the same command. Runs go one after the other or, with ``jobs > 1``, in that
many processes at once. After the training, each finished run's size and speed are measured one
run at a time in the sweep's own process (so no timing competes with a training): parameters
with and without the embedding matrix and the median ms/sentence at batch 1 and 32 on the cache's
first ``SPEED_SENTENCES`` dev sentences, saved as ``speed.json`` beside ``training.json``.

The report averages the best dev F1 over seeds (mean ± sample std) and gives the median latency
and the parameters of each row; with matplotlib (the ``plots`` extra) it also draws dev F1 against
every numeric axis (the papers' F1-against-K and F1-against-unlabelled-data figures; a sampled
amount of unlabelled data is the ``unlabelled-sentences`` axis), one line per value of the other
axes, and dev F1 against latency and against parameters (paper 001, Fig. 1), one point per row;
the teacher's F1 dashed when given.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomli_w

SEED = "seed"
SPEED_SENTENCES = 256


def load_grid(path) -> tuple[dict, dict[str, list]]:
    """(base options, axes) of a grid file; raises ValueError naming the file and key at fault."""
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:
        raise ValueError("grid files are TOML, read with Python 3.11's tomllib: use Python 3.11 or newer") from None
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, ValueError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise ValueError(f"{path}: {e}") from None
    base, axes = data.get("base", {}), data.get("grid", {})
    unknown = set(data) - {"base", "grid"}
    if unknown:
        raise ValueError(f"{path}: unknown tables {sorted(unknown)}; a grid has [base] and [grid]")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path}: [grid] {key} must be a non-empty list of values")
    if not axes:
        raise ValueError(f"{path}: [grid] lists no axis")
    return base, axes


def expand(base: dict, axes: dict[str, list]) -> list[dict]:
    """Every point of the grid: ``{"name", "params"}`` with params = base + the point's values."""
    runs = []
    keys = list(axes)
    for values in itertools.product(*(axes[k] for k in keys)):
        point = dict(zip(keys, values))
        name = ",".join(f"{k}={_text(v).replace(',', '+')}" for k, v in point.items())  # "," parts axes
        runs.append({"name": re.sub(r"[^A-Za-z0-9._=,+-]", "_", name), "params": {**base, **point}})
    return runs


def _text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def check_runs(runs: list[dict], grid) -> None:
    """Every run's options through the recipe's config loader (``distill-train --config``'s)."""
    from ..students.config import make_config
    from ..students.recipes import get

    for run in runs:
        params = dict(run["params"])
        try:
            recipe = get(str(params.pop("recipe", "mgkd")))
            make_config(recipe.config, params, f"{grid} (run {run['name']})")
        except ValueError as e:
            raise ValueError(str(e)) from None


def run_sweep(cache: str, grid: str, out_dir, jobs: int = 1, speed: bool = True, log=print) -> list[dict]:
    """Run every unfinished point of ``grid`` over ``cache``; return the runs with their status."""
    base, axes = load_grid(grid)
    runs = expand(base, axes)
    check_runs(runs, grid)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(
        json.dumps({"cache": str(cache), "grid": str(grid), "axes": axes, "runs": runs}, indent=1) + "\n"
    )

    def one(run: dict) -> dict:
        d = out_dir / run["name"]
        if (d / "training.json").exists():
            return {**run, "status": "skipped"}
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.toml").write_text(tomli_w.dumps({"recipe": "mgkd", **run["params"]}))
        cmd = [
            sys.executable,
            "-m",
            "seqdistill.cli.train",
            "--config",
            str(d / "run.toml"),
            "--cache",
            str(cache),
            "--out",
            str(d),
        ]
        (d / "speed.json").unlink(missing_ok=True)  # a run trained again is measured again
        with open(d / "sweep.log", "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        return {**run, "status": "done" if rc == 0 else f"failed (exit {rc}; see {d / 'sweep.log'})"}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, runs))
    for r in results:
        log(f"{r['name']}: {r['status']}")
    if speed:
        measure_speed(cache, [out_dir / r["name"] for r in results if not r["status"].startswith("failed")], log)
    return results


def measure_speed(cache: str, run_dirs: list[Path], log=print) -> None:
    """``speed.json`` for every run that has a student and none yet: parameters (all, and without
    the largest embedding matrix) and median ms/sentence at batch 1 and 32 (``distill-eval``'s
    measure) on the cache's first ``SPEED_SENTENCES`` dev sentences."""
    from ..cache_schema import CacheReader
    from ..inference import Tagger, latency
    from ..students.common import read_split

    todo = [d for d in run_dirs if (d / "config.json").exists() and not (d / "speed.json").exists()]
    if not todo:
        return
    reader = CacheReader(cache)  # local caches; a sweep over object storage passes its options to each run only
    dev = [f"{c.name}/{c.split}" for c in reader.manifest.corpora if c.labelled and c.split in ("dev", "valid")]
    if not dev:
        log("no dev corpus in the cache: speed not measured")
        return
    words = read_split(reader, dev)[0][:SPEED_SENTENCES]
    for d in todo:
        try:
            tagger = Tagger.load(d)
        except Exception as e:  # a student that cannot be loaded loses its speed, not the sweep
            log(f"{d.name}: speed not measured ({type(e).__name__}: {e})")
            continue
        record = {
            "params": tagger.params,
            "params_without_embeddings": tagger.params_without_embeddings,
            "ms_per_sentence_batch1": latency(tagger, words, 1, 50),
            "ms_per_sentence_batch32": latency(tagger, words, 32, 10),
            "sentences": len(words),
        }
        (d / "speed.json").write_text(json.dumps(record, indent=1) + "\n")
        log(
            f"{d.name}: {record['params']:,} parameters, {record['ms_per_sentence_batch32']:.3f} ms/sentence at batch 32"
        )


def report(out_dir) -> str:
    """A Markdown table of a sweep: one row per point of the grid without the seed axis, the best
    dev F1 as mean ± std over the seeds that finished; parameters and median ms/sentence at batch 32
    where the runs' speed was measured."""
    _, axes, groups = _groups(Path(out_dir))
    speeds = _speeds(Path(out_dir))
    with_speed = any(speeds.values())
    lines = [
        "| " + " | ".join(axes) + " | runs | dev F1 (mean ± std) |" + (" params | ms/sent b32 |" if with_speed else ""),
        "|" + "---|" * len(axes) + "---:|---:|" + ("---:|---:|" if with_speed else ""),
    ]
    for key, f1s in groups.items():
        if not f1s:
            cell = "—"
        elif len(f1s) == 1:
            cell = f"{f1s[0]:.2f}"
        else:
            cell = f"{statistics.mean(f1s):.2f} ± {statistics.stdev(f1s):.2f}"
        row = "| " + " | ".join(_text(k) for k in key) + f" | {len(f1s)} | {cell} |"
        if with_speed:
            sp = speeds.get(key)
            row += f" {sp['params']:,} | {sp['ms']:.3f} |" if sp else " — | — |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _groups(out_dir: Path) -> tuple[dict, list[str], dict[tuple, list[float]]]:
    sweep = json.loads((out_dir / "sweep.json").read_text())
    axes = [k for k in sweep["axes"] if k != SEED]
    groups: dict[tuple, list[float]] = {}
    for run in sweep["runs"]:
        key = tuple(run["params"][k] for k in axes)
        path = out_dir / run["name"] / "training.json"
        groups.setdefault(key, [])
        if path.exists() and (f1 := json.loads(path.read_text()).get("best_dev_f1")) is not None:
            groups[key].append(100 * f1)
    return sweep, axes, groups


def _speeds(out_dir: Path) -> dict[tuple, dict]:
    """Per row of the report: the median ms/sentence at batch 32 over its seeds and the
    parameters (the same for every seed)."""
    sweep = json.loads((out_dir / "sweep.json").read_text())
    axes = [k for k in sweep["axes"] if k != SEED]
    found: dict[tuple, list[dict]] = {}
    for run in sweep["runs"]:
        path = out_dir / run["name"] / "speed.json"
        if path.exists():
            found.setdefault(tuple(run["params"][k] for k in axes), []).append(json.loads(path.read_text()))
    return {
        k: {
            "params": v[0]["params"],
            "params_without_embeddings": v[0]["params_without_embeddings"],
            "ms": statistics.median(r["ms_per_sentence_batch32"] for r in v),
        }
        for k, v in found.items()
    }


def plot(out_dir, teacher_f1: float | None = None) -> list[Path]:
    """``f1_vs_<axis>.png`` for every axis whose values are all numbers: mean dev F1 (error bars:
    std over seeds) against the axis, one line per combination of the other axes; with measured
    speed, ``f1_vs_latency.png`` and ``f1_vs_params.png``: one labelled point per report row,
    x log-scaled where it spans more than a decade."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ValueError("plots need matplotlib: pip install 'seqdistill[plots]'") from None
    out_dir = Path(out_dir)
    sweep, axes, groups = _groups(out_dir)
    written = []
    for i, axis in enumerate(axes):
        values = sweep["axes"][axis]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        others = sorted({k[:i] + k[i + 1 :] for k in groups}, key=str)
        for rest in others:
            xs, ys, es = [], [], []
            for v in sorted(values):
                f1s = groups.get(rest[:i] + (v,) + rest[i:], [])
                if f1s:
                    xs.append(v)
                    ys.append(statistics.mean(f1s))
                    es.append(statistics.stdev(f1s) if len(f1s) > 1 else 0.0)
            label = ", ".join(f"{a}={_text(x)}" for a, x in zip(axes[:i] + axes[i + 1 :], rest)) or "students"
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
        if teacher_f1 is not None:
            ax.axhline(teacher_f1, linestyle="--", color="grey", label="teacher")
        ax.set_xlabel(axis)
        ax.set_ylabel("dev F1")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"f1_vs_{re.sub(r'[^A-Za-z0-9_-]', '_', axis)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    speeds = _speeds(out_dir)
    for name, x, label in (("latency", "ms", "ms/sentence at batch 32"), ("params", "params", "parameters")):
        points = [(speeds[k][x], statistics.mean(f1s), k) for k, f1s in groups.items() if f1s and k in speeds]
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.scatter([p[0] for p in points], [p[1] for p in points])
        for px, py, key in points:
            ax.annotate(
                ", ".join(_text(v) for v in key), (px, py), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
        if teacher_f1 is not None:
            ax.axhline(teacher_f1, linestyle="--", color="grey", label="teacher")
            ax.legend(fontsize=7)
        xs = [p[0] for p in points]
        wide = min(xs) > 0 and max(xs) / min(xs) > 10  # a log axis only where the sizes span decades
        if wide:
            ax.set_xscale("log")
        ax.set_xlabel(label + (" (log)" if wide else ""))
        ax.set_ylabel("dev F1")
        fig.tight_layout()
        path = out_dir / f"f1_vs_{name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written
