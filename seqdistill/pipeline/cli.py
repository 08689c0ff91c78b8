"""``distill-cache``: stage one's command line (a thin layer over functions users can call)."""

from __future__ import annotations

import json
import sys

import click

from .. import __version__
from ..cache_schema import CacheError, CacheReader, verify_cache
from ..cache_schema.info import cache_summary, format_summary
from .corpora import FORMATS, CorpusError, read_corpus


def _storage_options(values: tuple[str, ...]) -> dict:
    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep:
            raise click.BadParameter(f"{v!r} is not KEY=VALUE", param_hint="--storage-option")
        out[key] = val
    return out


storage_option = click.option(
    "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
    help="fsspec option for remote caches (e.g. endpoint_url=http://127.0.0.1:5000).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seqdistill")
def main() -> None:
    """Stage one of seqdistill: build, inspect and verify soft-label caches.

    A cache holds what teachers say about every sentence of your corpora (k-best label paths with
    global probabilities, logits, CRF marginals, hidden layers) in Parquet and Zarr shards with a
    manifest.json. `distill-train --cache` trains students from it without loading any teacher.
    A cache is a local directory or an fsspec URL (s3://bucket/cache, memory://...).
    """


@main.command()
@click.argument("cache")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@storage_option
def info(cache: str, as_json: bool, storage_options: tuple[str, ...]) -> None:
    """Corpora, teachers, fields (with bytes per word) and shards of CACHE."""
    try:
        reader = CacheReader(cache, _storage_options(storage_options))
    except CacheError as e:
        raise click.ClickException(str(e)) from None
    summary = cache_summary(reader.manifest)
    click.echo(json.dumps(summary, indent=1) if as_json else format_summary(summary))


@main.command()
@click.argument("cache")
@click.option("--no-checksums", is_flag=True, help="Skip sha256 (sizes, schemas and alignment only).")
@storage_option
def verify(cache: str, no_checksums: bool, storage_options: tuple[str, ...]) -> None:
    """Check CACHE end to end: checksums, schemas, every layer aligned with the examples.

    Exits 1 and names each bad file, shard and field when something is wrong.
    """
    problems = verify_cache(cache, _storage_options(storage_options), checksums=not no_checksums)
    if problems:
        for p in problems:
            click.echo(f"BAD {p}", err=True)
        click.echo(f"{cache}: {len(problems)} problem(s) found", err=True)
        sys.exit(1)
    click.echo(f"{cache}: OK")


@main.command("check-corpus")
@click.argument("path")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--scheme", default=None, help="Tag scheme (IOB1, IOB2, BIOES, BILOU, sBIO); detected if omitted.")
@click.option("--unlabelled", is_flag=True, help="Ignore tags (raw text, or a labelled file used as transfer data).")
@click.option("--word-column", type=int, default=0, show_default=True, help="CoNLL: column of the word.")
@click.option("--tag-column", type=int, default=-1, show_default=True, help="CoNLL: column of the tag.")
def check_corpus(path: str, fmt: str, scheme: str | None, unlabelled: bool, word_column: int, tag_column: int) -> None:
    """Read a corpus file as build would, and report its size, scheme and entity types."""
    try:
        corpus = read_corpus(path, "corpus", format=fmt, labelled=not unlabelled, scheme=scheme,
                             word_column=word_column, tag_column=tag_column)
    except CorpusError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{path}: {len(corpus.sentences):,} sentences, {corpus.num_words:,} words, "
               f"sha256 {corpus.sha256[:12]}")
    if corpus.labelled:
        from ..cache_schema import LabelSchema

        schema = LabelSchema.from_sequences([s.tags for s in corpus.sentences], corpus.scheme)
        click.echo(f"scheme {schema.scheme}, entity types: {', '.join(schema.entity_types)}")
    else:
        click.echo("unlabelled")


if __name__ == "__main__":
    main()
