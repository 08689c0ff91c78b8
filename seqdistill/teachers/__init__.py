"""Everything that needs teacher weights: teacher models, fine-tuning, running them on a batch."""

from .models import (
    CRFTeacher,
    Teacher,
    TeacherError,
    TeacherOutput,
    TokenClassifierTeacher,
    build_teacher,
    export_for_students,
    load_teacher,
    teacher_fingerprints,
)

__all__ = ["CRFTeacher", "Teacher", "TeacherError", "TeacherOutput", "TokenClassifierTeacher",
           "build_teacher", "export_for_students", "load_teacher", "teacher_fingerprints"]
