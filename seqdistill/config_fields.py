"""Config dataclasses whose fields carry their command-line help: :func:`option` declares a field
(the paper's default, a help text, the choices where they are few), and :func:`make_config` turns
command-line or TOML values into the dataclass, with errors that name the field.

Every config of the tool is declared this way (a recipe's, ``BuildConfig``, ``FinetuneConfig``), so
that a command's options, their help and their defaults come from the dataclass and cannot drift
(``seqdistill.cli.options`` generates the options).

Value conventions, the same on the command line and in TOML: a tuple field takes a comma-separated
string or a list; a bool is a flag (``--x/--no-x``) or ``true``/``false``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field


def option(
    default=dataclasses.MISSING,
    help: str = "",
    choices: tuple | None = None,
    metavar: str | None = None,
    flag: str | None = None,
):
    """A config field with its command-line help (and choices; ``flag``: the option's name where it
    is not the field's, ``--kbest`` for ``k``)."""
    meta = {"help": help, "choices": choices, "metavar": metavar, "flag": flag}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


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


def make_config(cls, values: dict, where: str, what: str = "this recipe"):
    """``cls`` from ``values`` (keys with dashes or underscores); a key that is not one of its
    fields is an error naming ``what`` the config is of and its options."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ValueError(
                f"{where}: {key!r} is not an option of {what}; its options: "
                f"{', '.join(sorted(n.replace('_', '-') for n in names))}"
            )
        kwargs[name] = convert(cls, name, value, where)
    return cls(**kwargs)
