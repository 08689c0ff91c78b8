"""``distill-eval`` and ``distill-predict``: score and use teachers, students and exports alike.

A model directory is a teacher (``teacher.json``, or a Hugging Face token-classification
checkpoint), a student (``config.json`` with a seqdistill ``arch``) or an exported ONNX directory
(``export.json``). Each is loaded as a :class:`seqdistill.inference.Tagger`, so that teacher and
student, torch and ONNX, are compared on one test set, on one machine, in one command.
"""

from __future__ import annotations

import json
import sys

import click

from ..corpora import FORMATS, CorpusError, parse_tag_names, read_corpus
from ..inference import Tagger, latency
from ..metrics import span_scores, span_set_scores

DEFAULT_THREADS = 1  # decision: small models run fastest on one thread (docs/BENCHMARKS.md); 0 = all cores


def score_tagger(tagger: Tagger, corpus) -> dict:
    """seqeval CoNLL micro P/R/F1, per type, macro F1 and exact match of a tagger on a labelled
    corpus; every gold span of a nested corpus (a flat model finds only non-overlapping ones)."""
    words = [s.words for s in corpus.sentences]
    if corpus.nested:
        return span_set_scores([s.entities for s in corpus.sentences], tagger.predict_spans(words))
    gold = [s.tags for s in corpus.to_scheme(tagger.scheme).sentences]
    return span_scores(gold, tagger.predict(words), tagger.scheme)


def evaluate_taggers(
    model_dirs: list[str],
    data: str,
    *,
    fmt: str = "auto",
    with_latency: bool = True,
    device: str = "cpu",
    threads: int | None = DEFAULT_THREADS,
    tag_names: tuple[str, ...] | None = None,
) -> list[dict]:
    """Scores (seqeval CoNLL micro P/R/F1, per type, macro F1, exact match), size and latency of
    torch students, teachers and exported directories alike, each on ``threads`` threads (0 or
    None: the runtime's default, all cores)."""
    corpus = read_corpus(data, "eval", "test", format=fmt, tag_names=tag_names)
    if not (corpus.labelled or corpus.nested):
        raise CorpusError(data, None, "evaluation needs gold tags or entities")
    words = [s.words for s in corpus.sentences]
    results = []
    for d in model_dirs:
        tagger = Tagger.load(d, device=device, threads=threads or None)
        row = {
            "model": str(d),
            "kind": tagger.kind,
            "runtime": tagger.runtime,
            "params": tagger.params,
            "params_without_embeddings": tagger.params_without_embeddings,
            "nested": corpus.nested,
            "threads": threads or "all",
            **score_tagger(tagger, corpus),
        }
        if with_latency:
            row["ms_per_sentence_batch1"] = latency(tagger, words, 1, 50)
            row["ms_per_sentence_batch32"] = latency(tagger, words, 32, 10)
        results.append(row)
    return results


def _ratio(base: float, other: float, smaller: str, larger: str) -> str:
    """``base / other`` said as a factor of at least 1: "2.0x fewer parameters", not "0.5x"."""
    return f"{base / other:.1f}x {smaller}" if base >= other else f"{other / base:.1f}x {larger}"


def format_results(rows: list[dict]) -> str:
    lines = [
        "| model | kind | runtime | params | w/o emb. | P | R | F1 | macro F1 | exact | ms/sent b1 | ms/sent b32 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lat = [f"{r[k]:.2f}" if k in r else "-" for k in ("ms_per_sentence_batch1", "ms_per_sentence_batch32")]
        lines.append(
            f"| {r['model']} | {r['kind']} | {r.get('runtime', 'torch')} | {r['params']:,} | {r['params_without_embeddings']:,} | "
            f"{100 * r['precision']:.2f} | "
            f"{100 * r['recall']:.2f} | {100 * r['f1']:.2f} | {100 * r['macro_f1']:.2f} | "
            f"{100 * r['exact_match']:.1f} | {lat[0]} | {lat[1]} |"
        )
    if len(rows) > 1 and "ms_per_sentence_batch32" in rows[0]:
        base = rows[0]
        for r in rows[1:]:
            lines.append(
                f"\n{r['model']} vs {base['model']}: "
                f"{_ratio(base['params'], r['params'], 'fewer parameters', 'more parameters')}, "
                f"{_ratio(base['ms_per_sentence_batch1'], r['ms_per_sentence_batch1'], 'faster', 'slower')}"
                f" at batch 1, "
                f"{_ratio(base['ms_per_sentence_batch32'], r['ms_per_sentence_batch32'], 'faster', 'slower')}"
                f" at batch 32, F1 {100 * (r['f1'] - base['f1']):+.2f}"
            )
    for r in rows:
        types = ", ".join(f"{t} {100 * v['f1']:.1f}" for t, v in sorted(r["per_type"].items()))
        lines.append(f"\n{r['model']} per type F1: {types}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--model",
    "models",
    multiple=True,
    required=True,
    help="Teacher, student or exported (distill-export) directory (repeatable).",
)
@click.option("--data", required=True, help="Labelled corpus to score on (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT]).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--tag-names", default=None, metavar="A,B,...", help="Names of integer tag ids in --data, id 0 first.")
@click.option("--no-latency", is_flag=True, help="Skip the latency measurement.")
@click.option(
    "--threads",
    type=int,
    default=DEFAULT_THREADS,
    show_default=True,
    help="Threads of each model (torch or ONNX Runtime); 0: all cores. One suits small models.",
)
@click.option("--device", default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--card",
    is_flag=True,
    help="Write or refresh each model directory's README.md model card from these figures (pipeline/card.py).",
)
def eval_main(models, data, fmt, tag_names, no_latency, threads, device, as_json, card) -> None:
    """Score teachers, students and exported models on one labelled corpus: seqeval CoNLL micro
    P/R/F1, per-type F1, macro F1, exact-sentence match, parameters, and ms/sentence at batch 1
    and 32 (tokenization and decoding included; with the ratios against the first model)."""
    try:
        rows = evaluate_taggers(
            list(models),
            data,
            fmt=fmt,
            with_latency=not no_latency,
            device=device,
            threads=threads,
            tag_names=parse_tag_names(tag_names),
        )
    except (CorpusError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        click.echo(format_results(rows))
        click.echo(f"\nthreads per model: {threads or 'all cores'} (--threads)")
    if card:
        from .card import CardError, write_card

        command = (
            "distill-eval "
            + " ".join(f"--model {m}" for m in models)
            + f" --data {data} --threads {threads}"
            + (f" --tag-names {tag_names}" if tag_names else "")
            + (" --no-latency" if no_latency else "")
            + " --card"
        )
        for row in rows:
            try:
                path = write_card(row["model"], row, data, command)
            except CardError as e:
                raise click.ClickException(str(e)) from None
            click.echo(f"model card: {path}", err=as_json)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", required=True, help="Teacher, student or exported (distill-export) directory.")
@click.option(
    "--input",
    "input_path",
    required=True,
    help="CoNLL, JSONL or raw text (a sentence per line, split into words by seqdistill.inference.words' "
    "rule); - reads standard input.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--output", "output_path", default=None, help="Where to write the tags (default: standard output).")
@click.option(
    "--output-format",
    type=click.Choice(["conll", "jsonl"]),
    default="conll",
    show_default=True,
    help="jsonl: one object per sentence with its text, words, character offsets, tags and spans.",
)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--threads", type=int, default=DEFAULT_THREADS, show_default=True, help="0: all cores.")
@click.option("--device", default="cpu", show_default=True)
def predict_main(model, input_path, fmt, output_path, output_format, batch_size, threads, device) -> None:
    """Tag a corpus or raw text with a teacher, a student or an exported model (no cache needed)."""
    try:
        corpus = read_corpus(input_path, "input", "predict", format=fmt, labelled=False)
        tagger = Tagger.load(model, device=device, threads=threads or None)
    except (CorpusError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    tagged = tagger(
        [s.text if s.text is not None else s.words for s in corpus.sentences],
        batch_size=batch_size,
        scores=output_format == "jsonl",
    )
    f = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout
    try:
        for s in tagged:
            if output_format == "jsonl":
                f.write(json.dumps(s.to_json(), ensure_ascii=False) + "\n")
            else:
                f.write("".join(f"{a} {b}\n" for a, b in zip(s.words, s.tags)) + "\n")
    finally:
        if output_path:
            f.close()
    if output_path:
        click.echo(
            f"{len(tagged):,} sentences tagged by {tagger.kind} {tagger.name} ({tagger.runtime}) -> {output_path}"
        )
