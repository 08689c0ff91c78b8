"""Run configs: what every recipe's config holds (:class:`RunConfig`), and the one loader that
turns command-line options and TOML files into a recipe's config.

A recipe's config is a dataclass whose fields are declared with :func:`option`: the default (the
paper's), a help text and, where the values are few, the choices. ``distill-train RECIPE``'s
options are generated from those fields (``cli/train.py``; the field machinery is
``seqdistill.config_fields``, which ``distill-cache build`` and ``finetune-teacher`` use too), so help and defaults cannot drift;
a TOML file (``--config run.toml``, a sweep grid's ``[base]``) takes the same keys, with dashes or
underscores. The resolved config of every run is saved as ``OUT/config.toml``, and
``distill-train --config OUT/config.toml`` runs it again.

Value conventions, the same on the command line and in TOML: a tuple field takes a comma-separated
string or a list; a bool is a flag (``--x/--no-x``) or ``true``/``false``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..config_fields import field_type, make_config, option
from ..precision import TRAINING_PRECISIONS
from ..training.records import REPORTERS

__all__ = ["RunConfig", "config_toml", "field_type", "make_config", "option", "read_toml"]


@dataclass
class RunConfig:
    """Settings every recipe has: what to train on and stop on, the stream, the run's seed,
    device, checkpoints and reports."""

    train: tuple[str, ...] = option(
        (), "CORPUS[/SPLIT] to train on, comma-separated (default: every */train, plus the unlabelled corpora)."
    )
    unlabelled: bool = option(True, "Add the cache's unlabelled corpora to the default training set (DA).")
    unlabelled_sentences: int | None = option(
        None,
        "Train on a seeded sample of N of the unlabelled sentences (the same every epoch; default: all).",
        metavar="N",
    )
    gold_sentences: int | None = option(
        None,
        "Keep the gold tags of a seeded sample of N labelled training sentences; the others train as "
        "unlabelled rows, the teacher's paths as their labels (the low-resource setting; the sample does not "
        "depend on --seed; default: all gold). With --no-unlabelled they are left out: N gold sentences only.",
        metavar="N",
    )
    dev: tuple[str, ...] = option(
        (), "CORPUS[/SPLIT] to stop early on, comma-separated (default: every */dev, */valid)."
    )
    buffer_size: int = option(4096, "Examples shuffled and bucketed by length together.")
    max_steps: int | None = option(
        None, "Stop after N optimiser updates in all (resumable: the same command without it goes on).", metavar="N"
    )
    resume: bool = option(
        True, "Continue from OUT/checkpoint when it holds this run (--restart: discard it and start afresh)."
    )
    checkpoint_every: int = option(200, "Optimiser updates between checkpoints (also at every epoch end).")
    num_workers: int = option(0, "DataLoader worker processes reading the cache.")
    prefetch: int = option(
        2, "With no worker processes: batches read and collated ahead in a thread, beside the step (0: off)."
    )
    seed: int = option(13, "Seed of the weights, the batch order and the dropout masks.")
    device: str | None = option(None, "cpu, cuda, cuda:1 ... (default: cuda if available).")
    precision: str = option(
        "fp32",
        "The training step's forward pass: fp32, or bf16 autocast (the weights, AdamW and the CRF stay fp32; "
        "about 1.8x faster a step for a transformer student on a CPU with AVX512-BF16 or AMX, or on a GPU). "
        "Dev F1 is scored in fp32.",
        choices=TRAINING_PRECISIONS,
    )
    report_to: tuple[str, ...] = option(
        (),
        "Also log the epoch records to: tensorboard (OUT/tensorboard; the tensorboard extra).",
        choices=tuple(REPORTERS),
    )


def read_toml(path) -> dict:
    import tomllib

    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, ValueError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise ValueError(f"{path}: {e}") from None


def config_toml(recipe: str, cache: str, out_dir: str, cfg) -> str:
    """The resolved config of a run as TOML (``OUT/config.toml``): recipe, cache, out and every
    field; a field whose value is None is left out (None is every such field's default)."""
    import tomli_w

    values = {"recipe": recipe, "cache": str(cache), "out": str(out_dir)}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v is not None:
            values[f.name.replace("_", "-")] = list(v) if isinstance(v, tuple) else v
    return "# seqdistill run config: `distill-train --config THIS_FILE` runs it again\n" + tomli_w.dumps(values)
