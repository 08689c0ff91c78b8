"""``distill-export``: a thin command line over ``seqdistill.deploy.export``."""

from __future__ import annotations

import json

import click

from ..corpora import CorpusError
from ..deploy.export import QUANTIZE, TABLE_BITS, check_export, export_model
from ..deploy.web import export_web
from ..inference.onnx_runtime import EXPORT_JSON, ONNX_FILE, ExportError
from .options import tag_names_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", "model_dir", required=True, help="Student or teacher directory (or, with --web, an export).")
@click.option("--out", "out_dir", default=None, help="New directory for the export.")
@click.option(
    "--web",
    "web_dir",
    default=None,
    help="Instead of --out: a new static folder that tags text in a web page (the export, the JavaScript "
    "runtime, onnxruntime-web, index.html); needs `npm ci --prefix js`.",
)
@click.option(
    "--quantize",
    type=click.Choice(QUANTIZE),
    default=None,
    help="[default: none, int8 with --web] int8: the MatMul, Gemm and LSTM weights as int8 with per-channel scales, activations in fp32 "
    "(a sentence's tags never depend on its batch).",
)
@click.option(
    "--check",
    "check_data",
    default=None,
    help="Labelled corpus (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT]): score the export against the torch model on it.",
)
@tag_names_option
@click.option(
    "--max-f1-drop",
    type=float,
    default=0.5,
    show_default=True,
    help="With --check: the most F1 points the export may lose; beyond it, exit 1.",
)
@click.option(
    "--word-vectors-rows",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="A student trained with --word-vectors: keep only the first N words of its table (its commonest; the others "
    "read as unknown words), the export's size knob; 0: all.",
)
@click.option(
    "--table-bits",
    type=click.Choice([str(b) for b in TABLE_BITS]),
    default="8",
    show_default=True,
    help="With --quantize int8: the bits of each embedding table's numbers (word vectors, word pieces, characters), "
    "one scale a row; 4 halves the tables' bytes.",
)
@click.option("--trust-remote-code", is_flag=True, help="Allow a teacher's own code from its directory.")
def main(
    model_dir,
    out_dir,
    web_dir,
    quantize,
    check_data,
    tag_names,
    max_f1_drop,
    word_vectors_rows,
    table_bits,
    trust_remote_code,
) -> None:
    """Export a student or teacher to a self-contained ONNX directory (graph, tokenizer, label
    schema, decoding tables, export.json), loadable with ``seqdistill.Tagger.load`` and by
    ``distill-eval`` and ``distill-predict``; with ``--web``, as a folder that tags text in a web page."""

    if (out_dir is None) == (web_dir is None):
        raise click.UsageError("give one of --out (an ONNX directory) and --web (a web page folder)")
    try:
        if web_dir is not None:  # int8 unless asked otherwise: a page's bytes are its load time
            out = export_web(
                model_dir,
                web_dir,
                quantize=quantize,
                trust_remote_code=trust_remote_code,
                word_vectors_rows=word_vectors_rows,
                table_bits=int(table_bits),
            )
        else:
            out = export_model(
                model_dir,
                out_dir,
                quantize=quantize or "none",
                trust_remote_code=trust_remote_code,
                word_vectors_rows=word_vectors_rows,
                table_bits=int(table_bits),
            )
        meta = json.loads((out / EXPORT_JSON).read_text())
        click.echo(
            f"{meta['kind']} {meta['model']} -> {out} (ONNX, {meta['quantize']}, decoder {meta['decoder']}, "
            f"{(out / ONNX_FILE).stat().st_size / 2**20:.1f} MiB)"
        )
        if web_dir is not None:
            click.echo(f"serve {out} over HTTP (index.html), or load it in Node with js/src/node.js's loadTagger")
        if check_data:
            torch_f1, export_f1 = check_export(model_dir, out, check_data, tag_names=tag_names)
            drop = 100 * (torch_f1 - export_f1)
            click.echo(
                f"F1 on {check_data}: torch {100 * torch_f1:.2f}, export {100 * export_f1:.2f} "
                f"(drop {drop:+.2f}, allowed {max_f1_drop:.2f})"
            )
            if drop > max_f1_drop:
                raise click.ClickException(
                    f"the export loses {drop:.2f} F1 points on {check_data}, more than "
                    f"--max-f1-drop {max_f1_drop}: ship the fp32 export (--quantize none) "
                    f"or allow a larger drop; {out} is kept for inspection"
                )
    except (CorpusError, ExportError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
