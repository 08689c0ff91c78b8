"""Size and speed of paper 003's students against the teacher (issue 9; the paper's Table 1 without
F1): for each cell (LSTM, SRU, SRU++), parameters with and without the embedding matrix, and
ms/sentence at batch 1 and batch 32 on this machine, beside the teacher.

    .venv/bin/python benchmarks/rnn_students.py --teacher .data/teachers/minilm-crf-conll \
        --test $D/test.txt --out .data/rnn-bench

The students are built untrained (size and speed do not depend on the weights) over the teacher's
vocabulary and embedding width, with the recipe's defaults (conv block, 4 bidirectional layers,
hidden = width / 4 per direction, one BILOU head per entity type), saved, and timed with
``distill-eval``'s measurement in this one process, one model after the other (median over batches
of test sentences after a warm-up). The teacher's parameters outside its input embedding matrix are
counted the same way. Prints Markdown rows for docs/BENCHMARKS.md.

With ``--export TEACHER_EXPORT`` (the teacher's own ``distill-export --quantize int8`` directory),
each student is also exported int8 (``OUT/CELL-int8``) and the exports are timed against that one
instead: what a user ships (issue 82, item 3), with the per-type BILOU Viterbi in the runtime.

``--projections 0,384`` builds each cell once for each width of ``distill-train rnn --projection``
(0: none, the paper's conv block at the embedding width), named ``CELL-pP``: issue 82's batch-1
profile put 58% of the SRU++ student's time in the conv block at 768.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.deploy.evaluate import evaluate_taggers  # noqa: E402
from seqdistill.students.archs.rnn_tagger import RNNTagger  # noqa: E402
from seqdistill.students.base import StudentConfig, save_student  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--cells", default="lstm,sru,sru++")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sentences", type=int, default=0, help="time over the first N sentences of --test (0: all)")
    ap.add_argument("--projections", default="0", help="comma-separated --projection widths (0: none)")
    ap.add_argument(
        "--export", default=None, help="the teacher's int8 export: time the students' int8 exports against it"
    )
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from seqdistill.teachers import load_teacher

    teacher = load_teacher(args.teacher)
    emb = teacher.encoder.get_input_embeddings().weight
    teacher_params = sum(p.numel() for p in teacher.parameters())
    tok = AutoTokenizer.from_pretrained(args.teacher)
    schema = teacher.schema
    dirs = []
    sizes = {}
    cells = [(c, int(p)) for c in args.cells.split(",") for p in args.projections.split(",")]
    for cell, projection in cells:
        cfg = StudentConfig(
            schema.to_json(),
            emb.shape[0],
            emb.shape[1],
            "teacher",
            True,
            emb.shape[1] // 4,
            args.layers,
            0.1,
            arch="rnn-tagger",
            extra={"entity_types": list(schema.entity_types), "cell": cell}
            | ({"projection": projection} if projection else {}),
        )
        torch.manual_seed(0)
        model = RNNTagger(cfg)
        d = Path(args.out) / (f"{cell}-p{projection}" if projection else cell)
        save_student(model, tok, d)
        dirs.append(str(d))
        sizes[str(d)] = model.parameter_counts()
    del teacher
    timed = args.teacher
    if args.export:
        from seqdistill.deploy.export import export_model

        for i, d in enumerate(dirs):
            if not (Path(f"{d}-int8") / "export.json").is_file():
                export_model(d, f"{d}-int8", quantize="int8")
            dirs[i] = f"{d}-int8"
            sizes[dirs[i]] = sizes.pop(d)
        timed = args.export
    test = args.test
    if args.sentences:  # the first N blank-line-separated blocks of the file (a -DOCSTART- line counts as one)
        blocks = Path(args.test).read_text().split("\n\n")[: args.sentences]
        test = str(Path(args.out) / f"first{args.sentences}.txt")
        Path(test).write_text("\n\n".join(blocks) + "\n\n")
    rows = evaluate_taggers([timed, *dirs], test, threads=args.threads)
    t = rows[0]
    print("| model | params | params without embeddings | ms/sent b1 | speedup b1 | ms/sent b32 | speedup b32 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(
        f"| teacher | {teacher_params:,} | {teacher_params - emb.numel():,} | {t['ms_per_sentence_batch1']:.2f} | 1x "
        f"| {t['ms_per_sentence_batch32']:.3f} | 1x |"
    )
    for r, d in zip(rows[1:], dirs):
        c = sizes[d]
        print(
            f"| {Path(d).name} | {c['all']:,} ({teacher_params / c['all']:.1f}x fewer) | "
            f"{c['without_embeddings']:,} ({(teacher_params - emb.numel()) / c['without_embeddings']:.1f}x fewer) | "
            f"{r['ms_per_sentence_batch1']:.2f} | {t['ms_per_sentence_batch1'] / r['ms_per_sentence_batch1']:.1f}x | "
            f"{r['ms_per_sentence_batch32']:.3f} | {t['ms_per_sentence_batch32'] / r['ms_per_sentence_batch32']:.1f}x |"
        )


if __name__ == "__main__":
    main()
