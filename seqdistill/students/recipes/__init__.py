"""The recipes: one module each, found by name, run on the one trainer (``seqdistill.training``).

A recipe module defines ``RECIPE = Recipe(name, config, plan, help)``: its config dataclass (the
paper's defaults, each field an :func:`~seqdistill.students.config.option`), and ``plan(ctx)``,
which checks the cache, builds the student, its collate function and stream, its loss parts and
its stages (``engine.Plan``). Every module of this package is registered when the registry is
first read, so a new recipe is one new module here (and its test); nothing else changes:
``distill-train NAME``, its options, ``--config`` files, sweeps, resume and DDP all come from it.
docs/ARCHITECTURE.md walks through adding one.

Names, the same in every recipe module: ``<Name>Config`` (its config), ``Batch`` (the dataclass of
one batch, with the ``origin`` the trainer reads), ``Collate`` (cache rows to a ``Batch``; a
recipe whose collate needs no state writes it as a ``collate`` function), ``plan`` and ``RECIPE``.
Its losses live in ``students/losses/``, one module per paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...cache_schema import CacheReader
from ...registry import discover
from .. import engine
from ..config import RunConfig, config_toml


@dataclass(frozen=True)
class Recipe:
    name: str
    config: type[RunConfig]
    plan: Callable[[engine.Context], engine.Plan]
    help: str  # one paragraph for `distill-train --help`

    def train(
        self, cache, out_dir, cfg: RunConfig | None = None, *, storage_options: dict | None = None, log=print
    ) -> dict:
        """Train this recipe's student from ``cache`` into ``out_dir`` (``OUT/config.toml`` is the
        resolved config; ``training.json`` the summary)."""
        cfg = cfg or self.config()
        if not isinstance(cfg, self.config):
            raise TypeError(f"the {self.name} recipe takes a {self.config.__name__}, not a {type(cfg).__name__}")
        reader = cache if isinstance(cache, CacheReader) else CacheReader(cache, storage_options, verify=True)
        out = Path(out_dir)
        new = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.toml").write_text(config_toml(self.name, reader.store.url, str(out_dir), cfg))
        try:
            return engine.train(self.name, self.plan, reader, out_dir, cfg, log=log)
        except Exception:
            # a run refused before its first file (a cache that cannot teach this config) leaves no
            # directory behind; one that wrote anything more keeps it, to resume from
            if new and [p.name for p in out.iterdir()] == ["config.toml"]:
                (out / "config.toml").unlink()
                out.rmdir()
            raise


_REGISTRY: dict[str, Recipe] = {}


def recipes() -> dict[str, Recipe]:
    """Every recipe, by name (the modules of this package, imported once)."""
    if not _REGISTRY:
        for recipe in discover(__name__, __path__, "RECIPE"):
            if isinstance(recipe, Recipe):
                if recipe.name in _REGISTRY:
                    raise RuntimeError(f"two recipes are called {recipe.name!r}")
                _REGISTRY[recipe.name] = recipe
    return dict(_REGISTRY)


def get(name: str) -> Recipe:
    known = recipes()
    if name not in known:
        raise ValueError(f"unknown recipe {name!r}; the recipes: {', '.join(known)}")
    return known[name]


def train(cache, out_dir, cfg: RunConfig, *, storage_options: dict | None = None, log=print) -> dict:
    """Train the recipe whose config ``cfg`` is (``MGKDConfig`` -> mgkd, ...)."""
    for recipe in recipes().values():
        if type(cfg) is recipe.config:
            return recipe.train(cache, out_dir, cfg, storage_options=storage_options, log=log)
    raise TypeError(f"{type(cfg).__name__} is no recipe's config")


__all__ = ["Recipe", "recipes", "get", "train"]
