"""Everything that needs teacher weights: one module per teacher kind (``kinds/``: its model, what
it writes to a cache, its decoder and export graph), the encoder teachers' common model
(``encoder.py``), loading, and fine-tuning."""

from .base import GLINER_CONFIG, PRECISIONS, TeacherError, TeacherOutput, resolve_precision, teacher_fingerprints
from .encoder import Teacher, export_for_students
from .kind import LayerOptions, SpanOptions, TeacherKind, map_outputs, to_host
from .kinds import KINDS, teacher_kind
from .kinds.span import parse_entity_types
from .loading import build_teacher, load_teacher, marked_kind

__all__ = [
    "GLINER_CONFIG",
    "KINDS",
    "PRECISIONS",
    "LayerOptions",
    "SpanOptions",
    "Teacher",
    "TeacherError",
    "TeacherKind",
    "TeacherOutput",
    "build_teacher",
    "export_for_students",
    "load_teacher",
    "marked_kind",
    "parse_entity_types",
    "resolve_precision",
    "teacher_fingerprints",
    "teacher_kind",
    "map_outputs",
    "to_host",
]
