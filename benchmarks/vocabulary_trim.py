"""What trimming the vocabulary saves (issue 36): for a teacher's tokenizer and input embedding
matrix (default: EmbeddingGemma-300M, examples/get_embeddinggemma.sh), over CoNLL-2003
train + dev + test and ``--wiki`` Wikipedia sentences (the issue's cache), the subwords those
corpora use (``seqdistill.vocabulary.kept_subwords``), the size of the cache's exported
``embeddings.safetensors`` with and without trimming, and an MGKD student (the recipe's default
sizes, the teacher's embeddings frozen, ``--chars``) over each: its parameters and the size of its
ONNX int8 export directory (``distill-export --quantize int8``, tokenizer included). Sizes only:
the student is not trained (training changes no size); docs/RESULTS.md has trained students.

    .venv/bin/python benchmarks/vocabulary_trim.py --write docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

BEGIN, END = "<!-- vocabulary_trim:begin -->", "<!-- vocabulary_trim:end -->"


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def conll_and_wiki(wiki: int) -> list[list[str]]:
    import importlib.util

    from demo import write_wikipedia

    from seqdistill.corpora import read_corpus

    conll = Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en"
    sentences = [s.words for f in ("train", "valid", "test") for s in read_corpus(conll / f"{f}.txt", f).sentences]
    with tempfile.TemporaryDirectory() as tmp:
        write_wikipedia(Path(tmp) / "wiki.txt", wiki)
        sentences += [line.split() for line in (Path(tmp) / "wiki.txt").read_text().splitlines() if line.strip()]
    return sentences


def student(weight, ids, rows: int, tokenizer, out: Path) -> dict:
    """An MGKD student (BiLSTM-CRF, the recipe's defaults, --chars) over the given embedding rows,
    saved, then exported to ONNX int8; its parameters and directory sizes."""
    import torch

    from seqdistill.cache_schema import LabelSchema
    from seqdistill.deploy.export import export_model
    from seqdistill.students.archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
    from seqdistill.students.base import init_embeddings, save_student
    from seqdistill.students.common import TeacherExports
    from seqdistill.students.recipes.mgkd import MGKDConfig

    cfg = MGKDConfig()
    exports = TeacherExports(tokenizer, weight, ids, rows)
    w = exports.student_weight()
    schema = LabelSchema("IOB2", ("LOC", "MISC", "ORG", "PER"))
    scfg = BiLSTMCRFConfig(
        schema.to_json(),
        w.shape[0],
        w.shape[1],
        "teacher",
        True,
        cfg.hidden_size,
        1,
        cfg.dropout,
        char_dim=30,
        char_filters=30,
        teacher_vocab_size=rows if ids is not None else 0,
    )
    torch.manual_seed(0)
    model = BiLSTMCRF(scfg)
    init_embeddings(model, exports)
    save_student(model.eval(), tokenizer, out / "torch")
    t = time.time()
    export_model(out / "torch", out / "int8", quantize="int8")
    params = sum(p.numel() for p in model.parameters())
    return {
        "params": params,
        "without_embeddings": params - model.embed.weight.numel(),
        "torch_dir": dir_bytes(out / "torch"),
        "int8_dir": dir_bytes(out / "int8"),
        "tokenizer": dir_bytes(out / "int8" / "tokenizer"),
        "export_s": time.time() - t,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default=str(ROOT / ".data/embeddinggemma/model_download"))
    ap.add_argument("--wiki", type=int, default=10_000, help="Wikipedia sentences beside CoNLL-2003")
    ap.add_argument("--write", default=None, help="Markdown file whose section gets the table")
    args = ap.parse_args()
    import platform

    import torch
    from safetensors import safe_open
    from transformers import AutoTokenizer

    from seqdistill.vocabulary import kept_subwords

    tokenizer = AutoTokenizer.from_pretrained(args.encoder)
    with safe_open(str(Path(args.encoder) / "model.safetensors"), "pt") as f:
        name = next(k for k in f.keys() if k.endswith("embed_tokens.weight") or k.endswith("word_embeddings.weight"))
        full = f.get_tensor(name).float()
    sentences = conll_and_wiki(args.wiki)
    words = sum(len(s) for s in sentences)
    t = time.time()
    ids = torch.from_numpy(kept_subwords(tokenizer, sentences, full.shape[0]))
    kept_s = time.time() - t
    rows, dim = full.shape
    export_full, export_kept = rows * dim * 4, len(ids) * (dim * 4 + 8)
    with tempfile.TemporaryDirectory() as tmp:
        small = student(full[ids], ids, rows, tokenizer, Path(tmp) / "kept")
        big = student(full, None, rows, tokenizer, Path(tmp) / "full")
    mb = lambda b: f"{b / 2**20:,.1f} MB"
    lines = [
        BEGIN,
        f"`.venv/bin/python benchmarks/vocabulary_trim.py --wiki {args.wiki}` — teacher vocabulary "
        f"`{Path(args.encoder).name}` ({rows:,} x {dim}), over CoNLL-2003 train+dev+test and {args.wiki:,} "
        f"Wikipedia sentences ({len(sentences):,} sentences, {words:,} words); {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')}.",
        "",
        f"- The corpora use **{len(ids):,}** of the {rows:,} subwords ({100 * len(ids) / rows:.1f}%), found in {kept_s:.1f} s.",
        f"- The cache's `embeddings.safetensors`: {mb(export_kept)} trimmed against {mb(export_full)} whole "
        f"({export_full / export_kept:.1f}x smaller).",
        "",
        "| MGKD student (--chars, TE frozen) | parameters | without embeddings | torch dir | ONNX int8 dir | of which tokenizer |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, s in (("trimmed (kept rows + UNK row)", small), ("whole vocabulary", big)):
        lines.append(
            f"| {label} | {s['params'] / 1e6:,.1f}M | {s['without_embeddings'] / 1e6:,.2f}M | {mb(s['torch_dir'])} | "
            f"{mb(s['int8_dir'])} | {mb(s['tokenizer'])} |"
        )
    lines += [
        "",
        f"Goal (issue 36: the exported int8 student <= 40 MB, where untrimmed it would be >= 200 MB): "
        f"{'met' if small['int8_dir'] <= 40 * 2**20 else 'not met'}, {mb(small['int8_dir'])} against "
        f"{mb(big['int8_dir'])}. The int8 export stores the embedding rows int8 with a scale per row, and the "
        "tokenizer (the teacher's whole, which maps any text to ids; unseen ones read the UNK row) is written "
        "without indentation. The cache's other fields do not depend on the vocabulary: the figure for a "
        "whole cache is in docs/RESULTS.md (the Japanese run).",
        END,
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from doc_section import write_section

        write_section(args.write, BEGIN, END, "## Vocabulary trimming (issue 36)", text)


if __name__ == "__main__":
    main()
