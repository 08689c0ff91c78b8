"""Stage two on the one trainer (``seqdistill.training``): a recipe's :class:`Plan` over a cache,
run by :func:`train`.

A recipe (``recipes/``) turns a cache and its config into a :class:`Plan`: the student, its
tokenizer, the modules trained beside it (learned loss weights, projections) and its stages
(``training.Stage``: what the papers call one, a loss over a stream of batches, the parameters it
trains, its optimiser and schedule, the metric that stops it early). This module adds what a run
from a cache needs beside the trainer's loop: the :class:`Context` a recipe plans in (its streams
of cache rows, read by this process's part under torchrun), the run's identity (the recipe, the
cache and the settings a checkpoint must match), the student saved the Hugging Face way, and the
provenance its model card shows. ``training/loop.py`` describes the loop, checkpoints, resume,
``--max-steps``, DDP and records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import distributed, training
from ..cache_schema import EXAMPLES_LAYER, CacheReader
from ..corpora.words import implied_rule
from ..precision import autocast
from ..training import ListBatches, Stage
from .base import save_student
from .data import CacheStream, StreamConfig, batches, parse_selection

__all__ = ["Context", "ListBatches", "Plan", "Stage", "cache_identity", "identity", "provenance", "train"]


@dataclass
class Plan:
    """What a recipe hands the trainer: the student (saved with ``tokenizer``), the other trained
    modules (checkpointed with it), the stages in order, the start-of-run log line, and fields the
    recipe adds to ``training.json``."""

    model: torch.nn.Module
    tokenizer: object
    stages: list[Stage]
    modules: dict[str, torch.nn.Module] = field(default_factory=dict)
    describe: str = ""
    summary: dict = field(default_factory=dict)
    train: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)


@dataclass
class Context:
    """What a recipe's ``plan`` gets: the cache, its config, where the run goes and on which
    process and device."""

    reader: CacheReader
    cfg: object
    out_dir: Path
    device: torch.device
    rank: int = 0
    world: int = 1
    log: Callable = print

    def stream(
        self,
        fields: dict[str, list[str]],
        names: Iterable[str] | set,
        collate,
        *,
        shuffle: bool = True,
        sample: bool = True,
        whole: bool = False,
        batch_size: int | None = None,
    ) -> CacheStream:
        """A stream of this process's part of the rows of ``names`` (corpus[/split] names or
        (corpus, split) pairs; ``whole``: all of them on every process, for a validation loss),
        with the run's batch size, buffer, seed and, for a training stream (``sample``), its sample
        of the unlabelled rows."""
        cfg = self.cfg
        select = names if isinstance(names, set) else parse_selection(list(names), self.reader)
        return CacheStream(
            self.reader,
            fields,
            select,
            collate,
            StreamConfig(
                batch_size or cfg.batch_size,
                cfg.buffer_size,
                cfg.seed,
                shuffle,
                cfg.unlabelled_sentences if sample else None,
                getattr(cfg, "gold_sentences", None) if sample else None,
                not getattr(cfg, "unlabelled", True),
            ),
            rank=0 if whole else self.rank,
            world_size=1 if whole else self.world,
        )


def identity(recipe: str, cfg, reader: CacheReader) -> dict:
    """What a checkpoint must match to be resumed: the recipe, the cache and every setting that
    changes what the run computes."""
    return {"recipe": recipe, "cache": cache_identity(reader), "config": training.settings(cfg)}


def cache_identity(reader: CacheReader) -> str:
    """A digest of what a cache holds, whatever its path (a mirror or a copy is the same cache):
    its corpora (with their sources' sha256) and its teachers' fingerprints."""
    m = reader.manifest
    what = {
        "corpora": [(c.name, c.split, c.sha256, c.examples) for c in m.corpora],
        "teachers": {name: t.fingerprints for name, t in sorted(m.teachers.items())},
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def provenance(reader: CacheReader, names: list[str]) -> dict:
    """Where a student comes from, for its model card: the cache (URL and identity), its teachers
    with their kinds and fingerprints, and the corpora trained and stopped on with their sizes."""
    select = parse_selection(names, reader) if names else set()
    m = reader.manifest
    return {
        "cache": reader.store.url,
        "cache_fingerprint": cache_identity(reader),
        "teachers": {n: {"kind": t.kind, "fingerprints": t.fingerprints} for n, t in sorted(m.teachers.items())},
        "corpora": [
            {"corpus": c.name, "split": c.split, "labelled": c.labelled, "sentences": c.examples, "words": c.words}
            for c in m.corpora
            if (c.name, c.split) in select
        ],
    }


def cache_words_rule(reader: CacheReader) -> str:
    """The words rule the cache's corpora imply (``corpora.words.implied_rule``), from the words of
    its first shard: what a student trained on them applies to raw text."""
    words = reader.read_shard(0, {EXAMPLES_LAYER: ["words"]}).get(EXAMPLES_LAYER, "words").to_pylist()
    return implied_rule(words)


def in_precision(stage: Stage, device: torch.device, precision: str) -> Stage:
    """``stage`` with its loss (the student's forward pass and the loss parts) under ``precision``
    autocast (``seqdistill.precision``: the weights, the optimiser and the CRF stay fp32), the parts
    handed back in fp32; at fp32 the stage itself, unchanged."""
    if precision == "fp32":
        return stage
    loss = stage.loss

    def autocast_loss(batch) -> dict[str, torch.Tensor]:
        with autocast(device, precision):
            parts = loss(batch)
        return {k: v.float() for k, v in parts.items()}

    return dataclasses.replace(stage, loss=autocast_loss)


def train(recipe: str, plan_fn: Callable[[Context], Plan], reader: CacheReader, out_dir, cfg, log=print) -> dict:
    """Plan the recipe's run over ``reader`` and run it on the one trainer; the run's summary."""
    rank, world, device_name = distributed.init(cfg.device)
    out = Path(out_dir)
    lead_log = log if rank == 0 else (lambda *a: None)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    plan = plan_fn(Context(reader, cfg, out, device, rank, world, lead_log))
    extra = getattr(getattr(plan.model, "config", None), "extra", None)
    if isinstance(extra, dict):  # a student's config (a recipe's test double may have none)
        extra.setdefault("words", cache_words_rule(reader))
    run = training.Plan(
        model=plan.model,
        stages=[in_precision(s, device, cfg.precision) for s in plan.stages],
        save=lambda d: save_student(plan.model, plan.tokenizer, d),
        modules=plan.modules,
        describe=plan.describe,
        header={"recipe": recipe},
        summary={
            "train": plan.train,
            "dev": plan.dev,
            "provenance": provenance(reader, plan.train + plan.dev),
            **plan.summary,
        },
        iterate=lambda b: batches(b, cfg.num_workers, getattr(cfg, "prefetch", 0)) if isinstance(b, CacheStream) else b,
    )
    try:
        return training.run(
            run, out, cfg, identity(recipe, cfg, reader), rank=rank, world=world, device=device, log=log
        )
    finally:
        distributed.done(world)
