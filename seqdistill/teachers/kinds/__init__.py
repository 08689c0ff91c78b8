"""The teacher kinds, one module each, found by name.

A kind module defines ``KIND``: a :class:`~seqdistill.teachers.kind.TeacherKind` naming its model
class and declaring what the tool needs of it (docs/ARCHITECTURE.md, "Adding a teacher kind").
``finetune-teacher --head`` offers every kind found here; loading, fine-tuning, the build and
export read the kind and never switch on its name.
"""

from __future__ import annotations

from ...registry import discover
from ..base import TeacherError
from ..kind import TeacherKind


def _discover() -> dict[str, TeacherKind]:
    return {kind.name: kind for kind in discover(__name__, __path__, "KIND")}


KINDS: dict[str, TeacherKind] = _discover()


def teacher_kind(name: str) -> TeacherKind:
    """The registered kind called ``name``."""
    if name not in KINDS:
        raise TeacherError(f"teacher kind {name!r} is not one of {tuple(KINDS)}")
    return KINDS[name]
