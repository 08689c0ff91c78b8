"""distill-train sweep and report (issue 11): a grid over one cache, resumable, tabulated."""

import json
import os
import subprocess
import sys

import pytest

from conftest import toy_cache
from seqdistill.students.sweep import cli_args, expand, load_grid, report


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
unlabelled = false
[grid]
losses = ["hard", "hard,seq-ce"]
k = [1, 2]
seed = [1, 2]
"""


def test_grid_expands_to_runs_with_their_options(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(GRID)
    base, axes = load_grid(path)
    runs = expand(base, axes)
    assert [r["name"] for r in runs][:3] == ["losses=hard,k=1,seed=1", "losses=hard,k=1,seed=2",
                                             "losses=hard,k=2,seed=1"]
    assert len(runs) == 8 and runs[-1]["params"] == {**base, "losses": "hard,seq-ce", "k": 2, "seed": 2}
    assert cli_args({"unlabelled": False, "k": 2}) == ["--no-unlabelled", "--k", "2"]
    (tmp_path / "bad.toml").write_text("[grid]\nk = 3\n")
    with pytest.raises(ValueError, match="bad.toml: \\[grid\\] k must be a non-empty list"):
        load_grid(tmp_path / "bad.toml")


def _sweep(cache, grid, out):
    cmd = [sys.executable, "-m", "seqdistill.students.cli", "sweep", "--cache", cache, "--grid", str(grid),
           "--out", str(out), "--jobs", "2"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})


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
    assert len(rows) == 4  # one row per (losses, k), seeds averaged
    vals = [100 * f1[f"losses=hard,k=1,seed={s}"] for s in (1, 2)]
    assert rows[0].startswith("| hard | 1 | 2 | ") and f"{sum(vals) / 2:.2f} ± " in rows[0]
    from seqdistill.students.sweep import plot

    paths = plot(out, teacher_f1=90.0)
    assert [p.name for p in paths] == ["f1_vs_k.png"]  # the only numeric axis besides the seed
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 5000
