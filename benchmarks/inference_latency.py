"""Inference latency of teachers and students in torch and in ONNX Runtime (fp32, int8), and the
F1 of each export beside its torch model (issue 19).

    .venv/bin/python benchmarks/inference_latency.py --teacher .data/bench/teacher \
        --mgkd .data/bench/mgkd --mpnet .data/models/all-mpnet-base-v2 \
        --test .data/bench/test.txt --out .data/bench/latency --write docs/BENCHMARKS.md

Models: the MiniLM-L6 CRF teacher (``--teacher``) and an MPNet-base CRF teacher (built over
``--mpnet`` with an untrained head: speed does not depend on the weights) in torch and ONNX fp32;
the MGKD BiLSTM-CRF (``--mgkd``, trained), the XtremeDistil 50x100 and 100x200 students and the
CNN+SRU++ student (untrained, sized as their recipes build them over the teacher's vocabulary, or
trained ones given with ``--student``) in torch, ONNX fp32 and ONNX int8.

Measure: CoNLL-2003 test sentences, tokenization and decoding included (``Tagger.predict_batch``),
one process, the models interleaved (each batch goes through every model before the next batch),
medians in ms per sentence (batches of 32: a sample sorted by length and cut in 32s, as the
Tagger batches a corpus), at 1 thread and at all threads (a fresh session per setting; torch's
thread count is process-wide). Then the cost of each stage of the MGKD int8 export (inputs,
``session.run``, numpy decoding), and the F1 of every trained model on the full test set in each
runtime. ``--write FILE`` replaces the section between the markers in FILE.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doc_section import write_section  # noqa: E402

from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.deploy.evaluate import score_tagger  # noqa: E402
from seqdistill.deploy.export import export_model  # noqa: E402
from seqdistill.inference import Tagger  # noqa: E402

BEGIN, END = "<!-- inference_latency:begin -->", "<!-- inference_latency:end -->"


def build_students(teacher_dir: Path, out: Path) -> dict[str, Path]:
    """Untrained XtremeDistil 50x100 / 100x200 and CNN+SRU++ students over the teacher's vocabulary."""
    from seqdistill.students.archs import architectures as student_architectures
    from seqdistill.students.archs.bilstm_tagger import TaggerConfig
    from seqdistill.students.base import StudentConfig, init_embeddings, save_student
    from seqdistill.students.common import TeacherExports
    from seqdistill.teachers import load_teacher

    teacher = load_teacher(teacher_dir)
    emb = teacher.encoder.get_input_embeddings().weight.detach()
    schema, tok = teacher.schema, teacher.tokenizer
    hidden = teacher.encoder.config.hidden_size
    specs = {
        "xtremedistil-50x100": TaggerConfig(
            schema.to_json(), emb.shape[0], 50, "svd", False, 100, 1, 0.2, projection_dim=hidden
        ),
        "xtremedistil-100x200": TaggerConfig(
            schema.to_json(), emb.shape[0], 100, "svd", False, 200, 1, 0.2, projection_dim=hidden
        ),
        "cnn-sru++": StudentConfig(
            schema.to_json(),
            emb.shape[0],
            emb.shape[1],
            "teacher",
            True,
            emb.shape[1] // 4,
            4,
            0.1,
            arch="rnn-tagger",
            extra={"entity_types": list(schema.entity_types), "cell": "sru++"},
        ),
    }
    dirs = {}
    for name, cfg in specs.items():
        d = out / name
        if not (d / "model.safetensors").exists():
            torch.manual_seed(0)
            model = student_architectures()[cfg.arch](cfg)
            init_embeddings(model, TeacherExports(tok, emb))
            save_student(model.eval(), tok, d)
        dirs[name] = d
    return dirs


def exported(src: Path, out: Path, quantize: str) -> Path:
    d = out / f"{src.name}-onnx-{quantize}"
    return d if (d / "export.json").exists() else export_model(src, d, quantize=quantize)


def interleaved(taggers: dict[str, Tagger], batches: list[list[list[str]]]) -> dict[str, float]:
    """Median ms per sentence of each tagger over the batches, every batch through every model in turn."""
    times = {n: [] for n in taggers}
    for t in taggers.values():
        t.predict_batch(batches[0])  # warm-up
    for batch in batches:
        for n, t in taggers.items():
            t0 = time.perf_counter()
            t.predict_batch(batch)
            times[n].append((time.perf_counter() - t0) * 1000 / len(batch))
    return {n: statistics.median(v) for n, v in times.items()}


def stage_costs(tagger: Tagger, batches: list[list[list[str]]]) -> dict[str, float]:
    """Median ms per sentence in building the graph's inputs, in ``session.run`` and in decoding."""
    from seqdistill.inference.onnx_runtime import bag_inputs

    b = tagger.backend
    costs = {"inputs": [], "graph": [], "decode": []}
    for batch in batches:
        t0 = time.perf_counter()
        feed = bag_inputs(b.tokenizer, batch)
        t1 = time.perf_counter()
        scores = b.session.run(None, feed)[0]
        t2 = time.perf_counter()
        b.decoder(scores, np.array([len(s) for s in batch]))
        t3 = time.perf_counter()
        for k, dt in zip(costs, (t1 - t0, t2 - t1, t3 - t2)):
            costs[k].append(dt * 1000 / len(batch))
    return {k: statistics.median(v) for k, v in costs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True, help="MiniLM-L6 CRF teacher directory")
    ap.add_argument("--mgkd", required=True, help="trained MGKD BiLSTM-CRF student")
    ap.add_argument("--mpnet", default=None, help="MPNet-base encoder directory (a CRF head is added untrained)")
    ap.add_argument("--student", action="append", default=[], help="another trained student (repeatable)")
    ap.add_argument("--test", required=True, help="CoNLL-2003 test file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch1", type=int, default=200, help="sentences timed one at a time")
    ap.add_argument("--batch32", type=int, default=12, help="batches of 32 timed")
    ap.add_argument("--threads", default="1,0", help="thread settings (0: all cores)")
    ap.add_argument("--no-f1", action="store_true")
    ap.add_argument("--write", default=None, help="replace the marked section of this Markdown file")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    teacher, mgkd = Path(args.teacher), Path(args.mgkd)

    models: dict[str, Path] = {
        "MiniLM-L6 CRF teacher | torch": teacher,
        "MiniLM-L6 CRF teacher | ONNX fp32": exported(teacher, out, "none"),
    }
    if args.mpnet:
        from seqdistill.teachers import build_teacher, load_teacher

        mp = out / "mpnet-crf"
        if not (mp / "teacher.json").exists():
            build_teacher(args.mpnet, load_teacher(teacher).schema, "crf").save(mp)
        models["MPNet-base CRF teacher | torch"] = mp
        models["MPNet-base CRF teacher | ONNX fp32"] = exported(mp, out, "none")
    untrained = build_students(teacher, out)
    students = {"MGKD BiLSTM-CRF": mgkd, **untrained, **{Path(s).name: Path(s) for s in args.student}}
    for name, d in students.items():
        models[f"{name} | torch"] = d
        models[f"{name} | ONNX fp32"] = exported(d, out, "none")
        models[f"{name} | ONNX int8"] = exported(d, out, "int8")

    corpus = read_corpus(args.test, "test", "test")
    sents = [s.words for s in corpus.sentences]
    rng = random.Random(0)
    one = [[s] for s in rng.sample(sents, args.batch1)]
    pool = sorted(rng.sample(sents, 32 * args.batch32), key=len)  # batches of similar length, as Tagger makes them
    thirty_two = [pool[i : i + 32] for i in range(0, len(pool), 32)]

    table = {}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads or os.cpu_count())
        taggers = {n: Tagger.load(d, threads=threads or None) for n, d in models.items()}
        label = threads or f"all ({os.cpu_count()})"
        print(f"threads {label}: batch 1", flush=True)
        b1 = interleaved(taggers, one)
        print(f"threads {label}: batch 32", flush=True)
        b32 = interleaved(taggers, thirty_two)
        table[label] = (b1, b32)
        if threads == 1:
            stages = {
                b: stage_costs(taggers["MGKD BiLSTM-CRF | ONNX int8"], batches)
                for b, batches in (("1", one), ("32", thirty_two))
            }
        del taggers

    f1 = {}
    if not args.no_f1:
        for n, d in models.items():
            if n.split(" | ")[0] in untrained or n.startswith("MPNet"):  # untrained: speed only
                continue
            f1[n] = score_tagger(Tagger.load(d), corpus)["f1"]
            print(f"F1 {n}: {100 * f1[n]:.2f}", flush=True)

    lines = [
        BEGIN,
        "",
        f"Command: `{' '.join(['.venv/bin/python', 'benchmarks/inference_latency.py', *sys.argv[1:]])}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, onnxruntime {__import__('onnxruntime').__version__}. "
        f"Data: {len(one)} CoNLL-2003 test sentences one at a time, {len(thirty_two)} batches of 32 "
        "(a seeded sample sorted by length, as `Tagger` batches a corpus), tokenization and decoding included; medians in ms per sentence, models interleaved.",
        "",
    ]
    base = "MiniLM-L6 CRF teacher | ONNX fp32"
    mp_base = "MPNet-base CRF teacher | ONNX fp32"
    for label, (b1, b32) in table.items():
        lines += [
            f"**Threads: {label}**",
            "",
            "| model | runtime | b1 ms | vs MiniLM ONNX | vs MPNet ONNX | b32 ms | vs MiniLM ONNX | vs MPNet ONNX |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for n in models:
            name, runtime = n.split(" | ")
            cells = []
            for b in (b1, b32):
                cells += [f"{b[n]:.3f}", f"{b[base] / b[n]:.1f}x", f"{b[mp_base] / b[n]:.1f}x" if mp_base in b else "—"]
            lines.append(f"| {name} | {runtime} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "**Where the MGKD int8 export spends its time** (1 thread, ms per sentence, medians):",
        "",
        "| batch | inputs (tokenize, pad) | graph (`session.run`) | decode (numpy Viterbi) |",
        "|---:|---:|---:|---:|",
    ]
    for b, c in stages.items():
        lines.append(f"| {b} | {c['inputs']:.3f} | {c['graph']:.3f} | {c['decode']:.3f} |")
    if f1:
        lines += [
            "",
            f"**Test F1** (all {len(sents):,} CoNLL-2003 test sentences):",
            "",
            "| model | runtime | F1 |",
            "|---|---|---:|",
        ]
        lines += [f"| {n.split(' | ')[0]} | {n.split(' | ')[1]} | {100 * v:.2f} |" for n, v in f1.items()]
    lines += ["", END]
    text = "\n".join(lines)
    print(text)
    (out / "table.md").write_text(text + "\n")
    if args.write:
        write_section(args.write, BEGIN, END, "## Inference: torch and ONNX Runtime (issue 19)", text)


if __name__ == "__main__":
    main()
