"""distill-train sweep and report (issue 11): a grid over one cache, resumable, tabulated."""

import json
import os
import subprocess
import sys

import pytest
from conftest import toy_cache

from seqdistill.deploy.sweep import check_runs, expand, load_grid, report


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("sweep"), k=4, shard_size=16)


GRID = """
[base]
recipe = "mgkd"
epochs = 1
hidden-size = 8
embedding = "random"
embedding-dim = 8
device = "cpu"
losses = "hard,seq-ce"
[grid]
unlabelled-sentences = [0, 20]
k = [1, 2]
seed = [1, 2]
"""


def test_grid_expands_to_runs_with_their_options(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(GRID)
    base, axes = load_grid(path)
    runs = expand(base, axes)
    assert [r["name"] for r in runs][:3] == [
        "unlabelled-sentences=0,k=1,seed=1",
        "unlabelled-sentences=0,k=1,seed=2",
        "unlabelled-sentences=0,k=2,seed=1",
    ]
    assert len(runs) == 8 and runs[-1]["params"] == {**base, "unlabelled-sentences": 20, "k": 2, "seed": 2}
    check_runs(runs, "grid.toml")  # every point is a valid mgkd config
    with pytest.raises(ValueError, match=r"grid.toml \(run x\): 'k' is not an option of this recipe"):
        check_runs([{"name": "x", "params": {"recipe": "rnn", "k": 2}}], "grid.toml")
    (tmp_path / "bad.toml").write_text("[grid]\nk = 3\n")
    with pytest.raises(ValueError, match="bad.toml: \\[grid\\] k must be a non-empty list"):
        load_grid(tmp_path / "bad.toml")


def _sweep(cache, grid, out):
    cmd = [
        sys.executable,
        "-m",
        "seqdistill.cli.train",
        "sweep",
        "--cache",
        cache,
        "--grid",
        str(grid),
        "--out",
        str(out),
        "--jobs",
        "2",
    ]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
    )


def test_sweep_runs_resumes_and_reports(cache, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    out = tmp_path / "sweep"
    r = _sweep(cache, grid, out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": done") == 8
    f1 = {d.name: json.loads((d / "training.json").read_text())["best_dev_f1"] for d in out.iterdir() if d.is_dir()}
    assert len(f1) == 8
    first = {d: (out / d / "training.json").stat().st_mtime for d in f1}
    r = _sweep(cache, grid, out)  # everything finished: nothing runs again
    assert r.returncode == 0 and r.stdout.count(": skipped") == 8
    assert {d: (out / d / "training.json").stat().st_mtime for d in f1} == first
    table = report(out)
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 4  # one row per (unlabelled-sentences, k), seeds averaged
    vals = [100 * f1[f"unlabelled-sentences=0,k=1,seed={s}"] for s in (1, 2)]
    assert rows[0].startswith("| 0 | 1 | 2 | ") and f"{sum(vals) / 2:.2f} ± " in rows[0]
    # size and speed, measured once per run after the training, a row's latency the median over seeds
    speed = [json.loads((out / f"unlabelled-sentences=0,k=1,seed={s}" / "speed.json").read_text()) for s in (1, 2)]
    assert speed[0]["params"] == speed[1]["params"] > speed[0]["params_without_embeddings"] > 0
    median = sorted(x["ms_per_sentence_batch32"] for x in speed)
    assert rows[0].endswith(f" {speed[0]['params']:,} | {(median[0] + median[1]) / 2:.3f} |")
    # fewer unlabelled sentences, fewer batches: 60 labelled rows (+ 20 sampled) in batches of 32
    steps = {
        n: json.loads((out / f"unlabelled-sentences={n},k=1,seed=1" / "training.json").read_text())["steps"]
        for n in (0, 20)
    }
    assert steps == {0: 2, 20: 3}
    from seqdistill.deploy.sweep import plot

    paths = plot(out, teacher_f1=90.0)
    assert [p.name for p in paths] == [
        "f1_vs_unlabelled-sentences.png",
        "f1_vs_k.png",
        "f1_vs_latency.png",
        "f1_vs_params.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_unlabelled_sample_is_seeded_fixed_and_bounded(cache):
    from seqdistill.cache_schema import CacheReader
    from seqdistill.students.data import CacheStream, StreamConfig, parse_selection

    reader = CacheReader(cache)
    select = parse_selection(["toy/train", "raw"], reader)

    def rows(n, seed, epoch):
        class Rows(list):
            origin = None

        stream = CacheStream(
            reader, {"examples": ["index"]}, select, Rows, StreamConfig(8, 4096, seed, unlabelled_sentences=n)
        )
        stream.set_epoch(epoch)
        return sorted((r["examples"]["corpus"], r["examples"]["index"]) for b in stream for r in b)

    a = rows(15, 1, 0)
    assert sum(c == "toy" for c, _ in a) == 60 and sum(c == "raw" for c, _ in a) == 15  # every labelled row
    assert rows(15, 1, 3) == a  # the same sample every epoch
    assert rows(15, 2, 0) != a  # another seed, another sample
    assert rows(40, 1, 0) == rows(None, 1, 0)  # all 40
    with pytest.raises(
        ValueError,
        match="--unlabelled-sentences 41: the training selection holds 40 unlabelled "
        r"sentences \(raw/unlabelled\)",
    ):
        rows(41, 1, 0)
