"""Everything that needs teacher weights: teacher models, fine-tuning, running them on a batch."""

from .models import (
    CRFTeacher,
    Teacher,
    TeacherError,
    TeacherOutput,
    TokenClassifierTeacher,
    build_teacher,
    load_teacher,
)

__all__ = ["CRFTeacher", "Teacher", "TeacherError", "TeacherOutput", "TokenClassifierTeacher",
           "build_teacher", "load_teacher"]
