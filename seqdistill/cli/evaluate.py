"""``distill-eval`` and ``distill-predict``: thin command lines over ``seqdistill.deploy.evaluate``."""

from __future__ import annotations

import json
import sys

import click

from ..corpora import FORMATS, CorpusError, parse_tag_names, read_corpus
from ..corpora.documents import SPLITTERS, read_documents
from ..deploy.evaluate import DEFAULT_THREADS, evaluate_taggers, format_results, write_tagged
from ..inference import Tagger
from .options import min_score_option, words_option


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
    help="Write or refresh each model directory's README.md model card from these figures (deploy/card.py).",
)
@click.option(
    "--calibration",
    is_flag=True,
    help="Instead: expected calibration error of span confidence on --data (seqdistill/deploy/calibration.py).",
)
@click.option(
    "--fit-temperature",
    "fit_on",
    default=None,
    metavar="DEV",
    help="With --calibration: fit each model's temperature on DEV and store it in its directory.",
)
@click.option("--plot-dir", default=None, help="With --calibration: write a reliability diagram per model here.")
@click.option(
    "--documents",
    type=click.Choice(SPLITTERS),
    default=None,
    help="Instead: tag --data's documents as raw text split by this splitter, against its sentences one by one.",
)
@click.option(
    "--predictions",
    default=None,
    metavar="DIR",
    help="Keep each model's predictions in DIR (one JSON-lines file per model, written as they are made) and "
    "continue from them when the same command runs again: a slow teacher over a large test set survives a kill. "
    "Predictions made for the first sentences of --data (a subset scored first) are continued too.",
)
@words_option
def eval_main(
    models,
    data,
    fmt,
    tag_names,
    no_latency,
    threads,
    device,
    as_json,
    card,
    calibration,
    fit_on,
    plot_dir,
    documents,
    predictions,
    words,
) -> None:
    """Score teachers, students and exported models on one labelled corpus: seqeval CoNLL micro
    P/R/F1, per-type F1, macro F1, exact-sentence match, parameters, and ms/sentence at batch 1
    and 32 (tokenization and decoding included; with the ratios against the first model). With
    --calibration, the expected calibration error of their span confidences instead."""
    if predictions and (documents or calibration):
        raise click.ClickException(
            "--predictions goes with the scores of the default mode, not --documents or --calibration"
        )
    if documents:
        from ..deploy.documents import compare_documents, format_documents

        try:
            corpus = read_corpus(data, "data", "test", format=fmt, tag_names=parse_tag_names(tag_names))
            rows = [
                compare_documents(
                    Tagger.load(m, device=device, threads=threads or None, words=words), corpus, documents
                )
                for m in models
            ]
        except (CorpusError, FileNotFoundError, ValueError, ImportError) as e:
            raise click.ClickException(str(e)) from None
        click.echo(json.dumps(rows, indent=1) if as_json else format_documents(rows))
        return
    if words:
        raise click.ClickException("--words goes with --documents: the other modes read pre-split words")
    if calibration:
        from ..deploy.calibration import calibrate, format_calibration

        try:
            rows = calibrate(list(models), data, dev=fit_on, plot_dir=plot_dir, threads=threads, device=device)
        except (CorpusError, FileNotFoundError, ValueError) as e:
            raise click.ClickException(str(e)) from None
        click.echo(json.dumps(rows, indent=1) if as_json else format_calibration(rows))
        return
    if fit_on or plot_dir:
        raise click.ClickException("--fit-temperature and --plot-dir go with --calibration")
    try:
        rows = evaluate_taggers(
            list(models),
            data,
            fmt=fmt,
            with_latency=not no_latency,
            device=device,
            threads=threads,
            tag_names=parse_tag_names(tag_names),
            predictions=predictions,
        )
    except (CorpusError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        click.echo(format_results(rows))
        click.echo(f"\nthreads per model: {threads or 'all cores'} (--threads)")
    if card:
        from ..deploy.card import CardError, write_card

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
    help="CoNLL, JSONL or raw text (a sentence per line, split into words by the model's words rule, "
    "seqdistill.corpora.words); - reads standard input.",
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
@words_option
@min_score_option
@click.option(
    "--documents",
    type=click.Choice(SPLITTERS),
    default=None,
    help="The input is raw text, documents separated by blank lines, each split into sentences by this "
    "splitter (seqdistill/corpora/documents.py); offsets point into each document.",
)
def predict_main(
    model, input_path, fmt, output_path, output_format, batch_size, threads, device, words, min_score, documents
) -> None:
    """Tag a corpus, raw text or documents with a teacher, a student or an exported model (no cache needed)."""
    try:
        if documents:
            texts = read_documents(input_path)
        else:
            corpus = read_corpus(input_path, "input", "predict", format=fmt, labelled=False)
        tagger = Tagger.load(model, device=device, threads=threads or None, words=words, min_score=min_score)
        if documents:
            tagged = tagger.documents(texts, batch_size, output_format == "jsonl", splitter=documents)
        else:
            tagged = tagger(
                [s.text if s.text is not None else s.words for s in corpus.sentences],
                batch_size=batch_size,
                scores=output_format == "jsonl",
            )
    except (CorpusError, FileNotFoundError, ValueError, ImportError) as e:
        raise click.ClickException(str(e)) from None
    f = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout
    try:
        write_tagged(tagged, f, output_format)
    finally:
        if output_path:
            f.close()
    if output_path:
        click.echo(
            f"{len(tagged):,} sentences tagged by {tagger.kind} {tagger.name} ({tagger.runtime}) -> {output_path}"
        )
