"""Plugins found by module: the recipes, teacher kinds and student architectures are each a module
of their package that defines one name (``RECIPE``, ``KIND``, ``ARCH``); :func:`discover` finds them."""

from __future__ import annotations

import importlib
import pkgutil


def discover(package: str, path, name: str) -> list:
    """The ``name`` of every module of ``package`` (whose ``__path__`` is ``path``) that defines it,
    the modules in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        value = getattr(importlib.import_module(f"{package}.{info.name}"), name, None)
        if value is not None:
            found.append(value)
    return found
