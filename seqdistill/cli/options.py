"""Command-line options generated from a config dataclass (``seqdistill.config_fields``): one
option per field, with the field's help, choices and default, so that a command's help cannot
drift from the config it fills. ``distill-train`` (every recipe's config), ``distill-cache build``
(``BuildConfig``) and ``finetune-teacher`` (``FinetuneConfig``) use them. Also the tagging options
that ``distill-predict`` and ``distill-serve`` share (``words_option``, ``min_score_option``)."""

from __future__ import annotations

import dataclasses

import click
from click.core import ParameterSource

from ..config_fields import field_type, make_config
from ..corpora import WORDS_RULES, parse_tag_names


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


words_option = click.option(
    "--words",
    type=click.Choice(WORDS_RULES),
    default=None,
    help="Words rule for raw text (seqdistill.corpora.words; default: the one the model directory records).",
)
min_score_option = click.option(
    "--min-score",
    type=float,
    default=None,
    help="Drop spans less confident than this (their tags become O); see distill-eval --calibration.",
)


def field_option(cls, f) -> click.Option:
    """The option of field ``f`` of ``cls`` (:func:`field_spec`)."""
    decls, attrs = field_spec(cls, f)
    return click.Option(decls, **attrs)


def field_spec(cls, f) -> tuple[list[str], dict]:
    """The declarations and settings of field ``f``'s option: ``--name`` (or the field's
    ``flag``), a ``--x/--no-x`` flag for a bool (``--restart`` turns ``resume`` off), repeatable
    for a tuple (comma-separated values), a choice where the field names its choices."""
    base, _, _ = field_type(cls, f.name)
    meta = f.metadata
    name = "--" + (meta.get("flag") or f.name.replace("_", "-"))
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    kw = {"help": meta.get("help", ""), "show_default": default not in (None, ()), "metavar": meta.get("metavar")}
    if base is bool:
        off = "--restart" if f.name == "resume" else "--no-" + f.name.replace("_", "-")
        return [f"{name}/{off}", f.name], {"default": default, **kw}
    if base is tuple:
        shown = ",".join(map(str, default))
        return [name, f.name], {
            "multiple": True,
            "default": (),
            "show_default": shown or False,
            "help": kw["help"] + (f" [choices: {', '.join(meta['choices'])}]" if meta.get("choices") else ""),
            "metavar": meta.get("metavar") or "A,B",
        }
    kind = click.Choice(meta["choices"]) if meta.get("choices") else {int: int, float: float}.get(base, str)
    return [name, f.name], {"type": kind, "default": default, **kw}


def config_options(cls, exclude: tuple[str, ...] = ()):
    """A decorator adding an option for each field of ``cls`` (but ``exclude``) to a command."""

    def add(command):
        for f in reversed(dataclasses.fields(cls)):
            if f.name not in exclude:
                decls, attrs = field_spec(cls, f)
                command = click.option(*decls, **attrs)(command)
        return command

    return add


def given_values(cls, options: dict, *, only_given: bool = False) -> dict:
    """The values of ``cls``'s fields among a command's ``options`` (tuples joined back into their
    comma-separated form); with ``only_given``, those given on the command line only."""
    ctx = click.get_current_context()
    names = {f.name for f in dataclasses.fields(cls)}
    return {
        k: ",".join(v) if isinstance(v, tuple) else v
        for k, v in options.items()
        if k in names and (not only_given or ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE)
    }


def config_from(cls, options: dict, where: str, **extra):
    """``cls`` from a command's options (and ``extra`` values), errors as usage errors."""
    try:
        return make_config(cls, {**given_values(cls, options), **extra}, where, "this command")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
