"""Click options shared by more than one command (``distill-cache``, ``distill-export``)."""

from __future__ import annotations

import click

from .read import parse_tag_names


def _tag_names(ctx, param, value: str | None) -> tuple[str, ...] | None:
    try:
        return parse_tag_names(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


tag_names_option = click.option(
    "--tag-names",
    default=None,
    metavar="A,B,...",
    callback=_tag_names,
    help="Names of integer tag ids, id 0 first (Parquet, hf:DIR or JSONL ner_tags whose features carry no "
    "ClassLabel names); tag strings ignore them.",
)
