"""The teacher kinds, one module each, found by name.

A kind module defines ``KIND``: a :class:`~seqdistill.teachers.kind.TeacherKind` naming its model
class and declaring what the tool needs of it (docs/ARCHITECTURE.md, "Adding a teacher kind").
``finetune-teacher --head`` offers every kind found here; loading, fine-tuning, the build and
export read the kind and never switch on its name.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..base import TeacherError
from ..kind import TeacherKind


def _discover() -> dict[str, TeacherKind]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if kind is not None:
            found[kind.name] = kind
    return found


KINDS: dict[str, TeacherKind] = _discover()


def teacher_kind(name: str) -> TeacherKind:
    """The registered kind called ``name``."""
    if name not in KINDS:
        raise TeacherError(f"teacher kind {name!r} is not one of {tuple(KINDS)}")
    return KINDS[name]
