"""Everything that needs teacher weights: one module per teacher kind (``kinds/``: its model, what
it writes to a cache, its decoder and export graph), the encoder teachers' common model
(``encoder.py``), loading, and fine-tuning."""

from .base import TeacherError, TeacherOutput, teacher_fingerprints
from .encoder import Teacher, export_for_students
from .kind import LayerOptions, TeacherKind, map_outputs, to_host
from .kinds import KINDS, teacher_kind
from .loading import build_teacher, load_teacher

__all__ = [
    "KINDS",
    "LayerOptions",
    "Teacher",
    "TeacherError",
    "TeacherKind",
    "TeacherOutput",
    "build_teacher",
    "export_for_students",
    "load_teacher",
    "teacher_fingerprints",
    "teacher_kind",
    "map_outputs",
    "to_host",
]
