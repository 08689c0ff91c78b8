"""Run configs: what every recipe's config holds (:class:`RunConfig`), and the one loader that
turns command-line options and TOML files into a recipe's config.

A recipe's config is a dataclass whose fields are declared with :func:`option`: the default (the
paper's), a help text and, where the values are few, the choices. ``distill-train RECIPE``'s
options are generated from those fields (``students/cli.py``), so help and defaults cannot drift;
a TOML file (``--config run.toml``, a sweep grid's ``[base]``) takes the same keys, with dashes or
underscores. The resolved config of every run is saved as ``OUT/config.toml``, and
``distill-train --config OUT/config.toml`` runs it again.

Value conventions, the same on the command line and in TOML: a tuple field takes a comma-separated
string or a list; a bool is a flag (``--x/--no-x``) or ``true``/``false``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path


def option(default=dataclasses.MISSING, help: str = "", choices: tuple | None = None, metavar: str | None = None):
    """A config field with its command-line help (and choices)."""
    meta = {"help": help, "choices": choices, "metavar": metavar}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunConfig:
    """Settings every recipe has: what to train on and stop on, the stream, the run's seed,
    device, checkpoints and reports."""

    train: tuple[str, ...] = option(
        (), "CORPUS[/SPLIT] to train on, comma-separated (default: every */train, plus the unlabelled corpora)."
    )
    unlabelled: bool = option(True, "Add the cache's unlabelled corpora to the default training set (DA).")
    unlabelled_sentences: int | None = option(
        None,
        "Train on a seeded sample of N of the unlabelled sentences (the same every epoch; default: all).",
        metavar="N",
    )
    gold_sentences: int | None = option(
        None,
        "Keep the gold tags of a seeded sample of N labelled training sentences; the others train as "
        "unlabelled rows, the teacher's paths as their labels (the low-resource setting; the sample does not "
        "depend on --seed; default: all gold). With --no-unlabelled they are left out: N gold sentences only.",
        metavar="N",
    )
    dev: tuple[str, ...] = option(
        (), "CORPUS[/SPLIT] to stop early on, comma-separated (default: every */dev, */valid)."
    )
    buffer_size: int = option(4096, "Examples shuffled and bucketed by length together.")
    max_steps: int | None = option(
        None, "Stop after N optimiser updates in all (resumable: the same command without it goes on).", metavar="N"
    )
    resume: bool = option(
        True, "Continue from OUT/checkpoint when it holds this run (--restart: discard it and start afresh)."
    )
    checkpoint_every: int = option(200, "Optimiser updates between checkpoints (also at every epoch end).")
    num_workers: int = option(0, "DataLoader worker processes reading the cache.")
    prefetch: int = option(
        2, "With no worker processes: batches read and collated ahead in a thread, beside the step (0: off)."
    )
    seed: int = option(13, "Seed of the weights, the batch order and the dropout masks.")
    device: str | None = option(None, "cpu, cuda, cuda:1 ... (default: cuda if available).")
    report_to: tuple[str, ...] = option(
        (),
        "Also log the epoch records to: tensorboard (OUT/tensorboard; the tensorboard extra).",
        choices=("tensorboard",),
    )


def field_type(cls, name: str):
    """The field's type, ``X | None`` unwrapped: (base type, element type of a tuple, optional)."""
    hint = typing.get_type_hints(cls)[name]
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, args[0]
    if typing.get_origin(hint) is tuple:
        return tuple, typing.get_args(hint)[0], optional
    return hint, None, optional


def convert(cls, name: str, value, where: str):
    """``value`` (from the command line or TOML) as field ``name`` of ``cls`` wants it; a
    ValueError names ``where`` and the field."""
    base, element, optional = field_type(cls, name)
    meta = next(f.metadata for f in dataclasses.fields(cls) if f.name == name)
    try:
        if value is None:
            if not optional:
                raise ValueError("a value is required")
            return None
        if base is tuple:
            items = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else list(value)
            out = tuple(element(x) for x in items)
            bad = [x for x in out if meta.get("choices") and x not in meta["choices"]]
        elif base is bool:
            if not isinstance(value, bool):
                raise ValueError("true or false")
            out, bad = value, []
        else:
            if base in (int, float) and isinstance(value, bool):
                raise ValueError(f"a number, not {value}")
            out = base(value)
            if base is int and isinstance(value, float) and value != out:
                raise ValueError(f"a whole number, not {value}")
            bad = [out] if meta.get("choices") and out not in meta["choices"] else []
        if bad:
            raise ValueError(f"{bad[0]!r} is not one of {', '.join(map(str, meta['choices']))}")
        return out
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {name.replace('_', '-')}: {e}") from None


def make_config(cls, values: dict, where: str):
    """``cls`` from ``values`` (keys with dashes or underscores); a key that is not one of its
    fields is an error naming the recipe options it could be."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ValueError(
                f"{where}: {key!r} is not an option of this recipe; its options: "
                f"{', '.join(sorted(n.replace('_', '-') for n in names))}"
            )
        kwargs[name] = convert(cls, name, value, where)
    return cls(**kwargs)


def read_toml(path) -> dict:
    import tomllib

    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, ValueError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise ValueError(f"{path}: {e}") from None


def config_toml(recipe: str, cache: str, out_dir: str, cfg) -> str:
    """The resolved config of a run as TOML (``OUT/config.toml``): recipe, cache, out and every
    field; a field whose value is None is left out (None is every such field's default)."""
    import tomli_w

    values = {"recipe": recipe, "cache": str(cache), "out": str(out_dir)}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v is not None:
            values[f.name.replace("_", "-")] = list(v) if isinstance(v, tuple) else v
    return "# seqdistill run config: `distill-train --config THIS_FILE` runs it again\n" + tomli_w.dumps(values)
