"""Everything that needs teacher weights: teacher models, fine-tuning, running them on a batch,
and what each teacher kind writes into a cache (``kinds``)."""

from .base import TeacherError, TeacherOutput, teacher_fingerprints
from .kinds import KINDS, LayerOptions, TeacherKind, teacher_kind, to_host
from .loading import build_teacher, load_teacher
from .models import CRFTeacher, Teacher, TokenClassifierTeacher, export_for_students

__all__ = [
    "CRFTeacher",
    "KINDS",
    "LayerOptions",
    "Teacher",
    "TeacherError",
    "TeacherKind",
    "TeacherOutput",
    "TokenClassifierTeacher",
    "build_teacher",
    "export_for_students",
    "load_teacher",
    "teacher_fingerprints",
    "teacher_kind",
    "to_host",
]
