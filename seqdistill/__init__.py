"""seqdistill: distil big sequence-labelling models into small, fast taggers.

Two stages joined by one artifact, the soft-label cache (see docs/cache-format.md):
``distill-cache build`` writes it, ``distill-train --cache`` reads it. ``seqdistill.Tagger``
loads what comes out (a student, a teacher, or an exported ONNX directory) and tags text.
"""

from .version import __version__

__all__ = ["Tagger", "__version__"]


def __getattr__(name):  # ``seqdistill.Tagger`` without importing torch at ``import seqdistill``
    if name == "Tagger":
        from .inference import Tagger

        return Tagger
    raise AttributeError(f"module 'seqdistill' has no attribute {name!r}")
