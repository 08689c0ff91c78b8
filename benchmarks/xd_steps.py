"""An XtremeDistil run's stage-wise schedule, step by step, from its ``metrics.jsonl``: each unfreezing
step's losses and trainable groups, the epochs it ran, the epoch it kept (by its metric), whether it
stopped on patience or at its epoch cap, its curve and its time (issue 81, item 3: no step may end at
its cap).

    .venv/bin/python benchmarks/xd_steps.py .data/headlines/xd-s13 [--cap 30]

The engine restarts its epoch count at every step, so a step begins where ``epoch`` falls back to 1.
A step that is still running is marked so. Prints Markdown for docs/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def steps(records: list[dict]) -> list[list[dict]]:
    """The records cut into steps (a new step where the epoch count starts again)."""
    out: list[list[dict]] = []
    for r in records:
        if not out or r["epoch"] <= out[-1][-1]["epoch"]:
            out.append([])
        out[-1].append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a distill-train xtremedistil --out directory")
    ap.add_argument("--cap", type=int, help="epochs a step may run (default: the run's --epochs-per-step)")
    ap.add_argument("--patience", type=int, help="default: the run's --patience")
    args = ap.parse_args()
    path = args.run / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (is {args.run} a distill-train run directory?)")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    config = args.run / "config.toml"
    settings = {}
    if config.is_file():
        import tomllib

        settings = tomllib.loads(config.read_text())
    cap = args.cap or settings.get("epochs-per-step")
    patience = args.patience or settings.get("patience")
    done = (args.run / "training.json").is_file()
    print("| step | losses | trainable | epochs | kept (metric) | ended | curve | minutes |")
    print("|---:|---|---|---:|---|---|---|---:|")
    previous_end = 0.0
    all_steps = steps(records)
    for i, step in enumerate(all_steps, 1):
        metric = step[0].get("selected_on", "val_loss")
        values = [r[metric] for r in step]
        best = (max if metric == "dev_f1" else min)(range(len(values)), key=values.__getitem__)
        last = i == len(all_steps)
        if last and not done:
            ended = "running"
        elif cap and len(step) >= cap:
            ended = "**at its cap**"
        elif patience and len(step) - 1 - best >= patience:
            ended = "patience"
        else:
            ended = "?"
        shown = [f"{100 * v:.2f}" if metric == "dev_f1" else f"{v:.4f}" for v in values]
        minutes = (step[-1]["seconds"] - previous_end) / 60
        previous_end = step[-1]["seconds"]
        print(
            f"| {i} | {', '.join(step[0]['losses'])} | {', '.join(step[0]['groups'])} | {len(step)} "
            f"| {best + 1} ({metric} {shown[best]}) | {ended} | {' '.join(shown)} | {minutes:.0f} |"
        )


if __name__ == "__main__":
    main()
