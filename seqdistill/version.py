"""The version of seqdistill, in a module of its own so that any package can record it without
importing the package root (whose ``Tagger`` is resolved lazily)."""

__version__ = "0.1.0"
