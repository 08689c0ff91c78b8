"""What each way of fine-tuning a large teacher costs per step on this machine (issue 35): every
weight, every weight but the input embeddings (``--freeze-embeddings``), or LoRA adapters
(``--lora-rank 16``), for a SenTScore teacher over Gemma 3 270M (or any ``--pretrained`` source).

    .venv/bin/python benchmarks/teacher_step_cost.py --pretrained .data/gemma/gemma-3-270m-q4_k_m.gguf \
        --write docs/BENCHMARKS.md

Each mode runs in a process of its own (peak resident memory is a per-process figure): the model
is loaded, the mode applied, then ``--steps`` AdamW steps on batches of ``--batch`` CoNLL-2003
training sentences of 8 to 20 words (the teacher's SenT' loss, teacher forcing); the first step is
a warm-up, the median of the others is reported, with the trainable parameters and the process's
peak resident memory (model, gradients, AdamW moments, activations). F1 is not measured here:
docs/RESULTS.md has the fine-tuned teachers.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODES = {
    "full": [],
    "frozen-embeddings": ["freeze"],
    "lora-16": ["lora"],
    "lora-16 + frozen-embeddings": ["lora", "freeze"],
}


def one(mode: str, pretrained: str, steps: int, batch: int) -> dict:
    import importlib.util

    import torch

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.corpora import read_corpus
    from seqdistill.teachers.adapters import attach_lora, freeze_embeddings, trainable
    from seqdistill.teachers.kinds.sentscore import build_sentscore_teacher

    teacher = build_sentscore_teacher(pretrained, LabelSchema("sBIO", ("LOC", "MISC", "ORG", "PER")))
    if "lora" in MODES[mode]:
        attach_lora(teacher, 16)
    if "freeze" in MODES[mode]:
        freeze_embeddings(teacher)
    train = Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en/train.txt"
    sents = [s for s in read_corpus(str(train), "conll", "train").sentences if 8 <= len(s.words) <= 20]
    sents = sents[: batch * steps]
    teacher.train()
    opt = torch.optim.AdamW([p for p in teacher.parameters() if p.requires_grad], lr=1e-5)
    times = []
    for i in range(steps):
        b = sents[i * batch : (i + 1) * batch]
        sbio = [[t[2:] if t.startswith("B-") else "I" if t.startswith("I-") else "O" for t in s.tags] for s in b]
        tags = torch.full((len(b), max(len(s) for s in sbio)), -1)
        for j, s in enumerate(sbio):
            tags[j, : len(s)] = torch.tensor(teacher.schema.encode(s))
        t = time.perf_counter()
        teacher.loss([s.words for s in b], tags).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t)
    n_train, n_all = trainable(teacher)
    return {
        "mode": mode,
        "trainable": n_train,
        "params": n_all,
        "step_s": statistics.median(times[1:]),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pretrained", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--mode", choices=list(MODES), default=None, help="one mode, in this process (used by the run)")
    ap.add_argument("--write", default=None)
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(one(args.mode, args.pretrained, args.steps, args.batch)))
        return
    rows = []
    for mode in MODES:
        cmd = [sys.executable, __file__, "--pretrained", args.pretrained, "--steps", str(args.steps)]
        out = subprocess.run([*cmd, "--batch", str(args.batch), "--mode", mode], capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr[-2000:])
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    from doc_section import write_section
    from serve_load import machine

    BEGIN, END = "<!-- teacher_step_cost:begin -->", "<!-- teacher_step_cost:end -->"
    lines = [
        BEGIN,
        "",
        f"Command: `.venv/bin/python benchmarks/teacher_step_cost.py {' '.join(sys.argv[1:])}`",
        "",
        f"Model: {Path(args.pretrained).name} as a SenTScore teacher (fp32). Data: CoNLL-2003 training sentences of "
        f"8 to 20 words, batches of {args.batch}; median of {args.steps - 1} AdamW steps after a warm-up. "
        f"Machine: {machine()}, {rows[0]['threads']} torch threads; each mode in its own process.",
        "",
        "| mode | trainable parameters | s/step | peak resident memory, GB |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['trainable'] / 1e6:.1f}M of {r['params'] / 1e6:.1f}M | {r['step_s']:.1f} | "
            f"{r['peak_rss_mb'] / 1024:.1f} |"
        )
    lines += ["", END]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## Fine-tuning a large teacher: what each choice costs (issue 35)", text)


if __name__ == "__main__":
    main()
