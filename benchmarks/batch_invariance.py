"""Whether a sentence's tags depend on the sentences batched with it (issue 34), on real data, for
every runtime: a model tags CoNLL-2003 test sentences one at a time and in batches of 32 (in file
order, so each batch mixes lengths as a server's would), and the sentences whose tags differ are
counted. With ``--export``, each torch student is also exported here in fp32 and in int8 and the
exports are measured too, with the F1 of each beside its torch model (``distill-export --check``'s
gate), and, for the comparison, with the dynamic int8 that ``--quantize int8`` was before issue 34.

    .venv/bin/python benchmarks/batch_invariance.py --model .data/demo/mgkd --model .data/demo/teacher \
        --export .data/demo/mgkd --test .venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/test.txt \
        --sentences 1280 --write docs/BENCHMARKS.md

``--write FILE`` replaces the section between the markers in FILE.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doc_section import write_section  # noqa: E402

from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.deploy.evaluate import score_tagger  # noqa: E402
from seqdistill.deploy.export import export_model  # noqa: E402
from seqdistill.inference import Tagger, latency  # noqa: E402

BEGIN, END = "<!-- batch_invariance:begin -->", "<!-- batch_invariance:end -->"


def dynamic_int8(fp32: Path) -> Path:
    """The scheme ``--quantize int8`` used before issue 34, for the comparison: ONNX Runtime's
    dynamic quantization of the fp32 export's MatMul, Gemm and LSTM weights (activations quantized
    per batch tensor at run time), in a copy of the export whose checksum is updated."""
    import json
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from seqdistill.inference.onnx_runtime import sha256_file

    out = fp32.with_name(fp32.name.replace("-fp32", "-dynamic-int8"))
    shutil.copytree(fp32, out)
    quantize_dynamic(
        str(fp32 / "model.onnx"),
        str(out / "model.onnx"),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gemm", "LSTM"],
    )
    meta = json.loads((out / "export.json").read_text())
    meta.update(onnx_sha256=sha256_file(out / "model.onnx"), quantize="int8")
    (out / "export.json").write_text(json.dumps(meta))
    return out


def changed(tagger: Tagger, sents: list[list[str]], batch: int = 32) -> int:
    """Sentences whose tags differ between batch 1 and batches of ``batch`` in file order."""
    alone = [tagger.predict_batch([s])[0] for s in sents]
    together = [t for i in range(0, len(sents), batch) for t in tagger.predict_batch(sents[i : i + batch])]
    return sum(a != b for a, b in zip(alone, together))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="a model directory (repeatable)")
    ap.add_argument("--export", action="append", default=[], help="a torch student to export fp32 and int8 here")
    ap.add_argument("--test", required=True, help="labelled CoNLL test file")
    ap.add_argument("--sentences", type=int, default=1280)
    ap.add_argument("--write", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    corpus = read_corpus(args.test, "conll", "test")
    sents = [s.words for s in corpus.sentences[: args.sentences]]
    models = [Path(m) for m in args.model]
    tmp = Path(tempfile.mkdtemp(prefix="seqdistill-invariance-"))
    for src in map(Path, args.export):
        fp32 = export_model(src, tmp / f"{src.name}-fp32")
        models += [fp32, export_model(src, tmp / f"{src.name}-int8", quantize="int8"), dynamic_int8(fp32)]
    rows = []
    for m in models:
        tagger = Tagger.load(m, threads=1)
        n = changed(tagger, sents)
        f1 = score_tagger(tagger, corpus)["f1"]
        ms = (latency(tagger, sents, 1, 200), latency(tagger, sents, 32, 20))
        label = f"{m.name} ({tagger.runtime}{', dynamic, before issue 34' if 'dynamic' in m.name else ''})"
        rows.append((label, n, 100 * f1, ms))
        print(f"{label}: {n} of {len(sents)} change tags between batch 1 and 32; F1 {100 * f1:.2f}; ms {ms}")
    lines = [
        f"Command: `.venv/bin/python benchmarks/batch_invariance.py {' '.join(sys.argv[1:])}`",
        "",
        f"Data: the first {len(sents):,} CoNLL-2003 test sentences (batches of 32 in file order), F1 on the "
        f"whole test set; latency: median ms per sentence over 200 single sentences and 20 batches of 32 "
        f"(tokenization and decoding included), models one after the other. Machine: {platform.machine()}, "
        f"{torch.get_num_threads()} thread, CPU.",
        "",
        "| model | runtime | sentences whose tags change between batch 1 and 32 | test F1 | ms/sentence, "
        "batch 1 | ms/sentence, batch 32 |",
        "|---|---|---|---|---:|---:|",
    ]
    for name, n, f1, (b1, b32) in rows:
        model, runtime = name.rsplit(" (", 1)
        lines.append(f"| {model} | {runtime.rstrip(')')} | {n} of {len(sents):,} | {f1:.2f} | {b1:.2f} | {b32:.2f} |")
    if args.write:
        text = BEGIN + "\n" + "\n".join(lines) + "\n" + END
        write_section(Path(args.write), BEGIN, END, "## Tags that do not depend on the batch (issue 34)", text)


if __name__ == "__main__":
    main()
