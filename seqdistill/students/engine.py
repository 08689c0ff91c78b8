"""The one student trainer: every recipe's stages run through :func:`train`.

A recipe (``recipes/``) turns a cache and its config into a :class:`Plan`: the student, the
modules trained beside it (learned loss weights, projections) and its :class:`Stage` s. A stage is
what the papers call one: a loss over a stream of batches, the parameters it trains, its optimiser
and schedule, and the metric that stops it early. The engine owns everything else, the same way
for every recipe:

* the loop: epochs of a stage, an optimiser step per batch with the gradient norm clipped to
  ``Stage.clip`` (5.0, paper 000's; a recipe names any other), the learning rate set per update
  (``Stage.lr_at``) or halved on a plateau of the metric (``Stage.plateau``), early stopping after
  ``patience`` epochs without a better metric;
* what is kept: ``keep="save"`` saves the student at each new best epoch; ``keep="restore"``
  reloads the best epoch's weights when the stage ends (the weights the stage starts from count
  as epoch 0: a stage that only makes things worse is undone, XtremeDistil §5.3); ``keep="last"``
  goes on with the last weights. When the last stage does not save, the student is saved at the
  end;
* checkpoints (``seqdistill.checkpoint``, no pickle) every ``checkpoint_every`` updates and at every
  epoch end: the modules, the stage's optimiser and plateau schedule, the best weights of a
  ``restore`` stage, the torch RNG and each stream part's position. A run killed anywhere and
  started again with the same command continues from there and ends with bit-identical weights;
  a checkpoint of a different run (another recipe, cache or setting) is refused by name, and
  ``resume=False`` (``--restart``) discards it. The checkpoint of a finished run stays: the same
  command then returns its summary without training again;
* ``--max-steps N``: stop after N optimiser updates in all (a checkpoint is written there; the
  same command without the cap continues);
* DDP under torchrun: each rank reads its own part of every stream, a step goes on while any rank
  has a batch, gradients are averaged over the ranks that had one (``distributed``), and rank 0
  alone writes;
* records: one per epoch, in ``OUT/metrics.jsonl`` (rewritten from the checkpoint's history on a
  resume, so it holds each epoch once, then appended), mirrored as TensorBoard scalars with
  ``report_to=("tensorboard",)``, and ``OUT/training.json`` with the history, each stage's best
  record and the run's config at the end.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from .. import distributed
from ..cache_schema import CacheReader
from ..cache_schema.storage import failpoint
from ..checkpoint import (
    CHECKPOINT,
    changed_setting,
    config_defaults,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from .data import CacheStream, StreamConfig, batches, parse_selection
from .models import save_student

# settings that change where or how fast a run goes, not what it computes: a resumed run may differ in them
NOT_IDENTITY = ("resume", "max_steps", "device", "num_workers", "checkpoint_every", "report_to")


@dataclass
class Stage:
    """One stage of a recipe (module docstring). ``loss(batch)`` returns the named loss parts
    (each a batch mean), ``combine`` their total (default: the sum); ``evaluate()`` the epoch
    record's fields, among them ``metric``; ``params()`` is called when the stage starts (it may
    freeze and unfreeze groups) and ``optimizer(params)`` builds the stage's own optimiser."""

    name: str
    batches: "CacheStream | ListBatches"
    loss: Callable[[object], dict[str, torch.Tensor]]
    params: Callable[[], list[torch.nn.Parameter]]
    optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
    evaluate: Callable[[], dict]
    metric: str = "dev_f1"
    mode: str = "max"  # max | min: whether a larger metric is better
    epochs: int = 10
    patience: int = 3
    keep: str = "save"  # save | restore | last
    combine: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None
    lr_at: Callable[[int], float] | None = None  # the rate of the stage's u-th update
    plateau: dict | None = None  # ReduceLROnPlateau settings on the metric (mode follows ``mode``)
    clip: float = 5.0
    info: dict = field(default_factory=dict)  # written into each of the stage's records

    def better(self, a: float, b: float) -> bool:
        return a > b if self.mode == "max" else a < b


@dataclass
class Plan:
    """What a recipe hands the engine: the student (saved with ``tokenizer``), the other trained
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


class ListBatches:
    """Batches of in-memory examples drawn in an order that is a pure function of the epoch
    (``order(epoch)``: indices), split between ranks like a :class:`CacheStream` (rank r takes
    every world-th batch), each batch ``collate(indices)`` with its ``origin``; resumable with
    :meth:`skip`."""

    def __init__(
        self,
        order: Callable[[int], list[int]],
        collate: Callable[[list[int]], object],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.order, self.collate, self.batch_size = order, collate, batch_size
        self.rank, self.world_size, self.epoch, self._skip = rank, world_size, 0, {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._skip = epoch, {}

    def skip(self, consumed: dict[int, int]) -> None:
        self._skip = {int(k): int(v) for k, v in consumed.items()}

    def __iter__(self):
        order = self.order(self.epoch)
        mine = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)][
            self.rank :: self.world_size
        ]
        for n, idx in enumerate(mine):
            if n >= self._skip.get(self.rank, 0):
                out = self.collate(idx)
                out.origin = (self.rank, n)
                yield out


class _Weights(torch.nn.Module):
    """The best epoch's weights of a ``restore`` stage, as a module the checkpoint can hold."""

    def __init__(self, state: dict[str, torch.Tensor]):
        super().__init__()
        self.state = state

    def state_dict(self, *args, **kwargs):  # noqa: D102 (the checkpoint's view)
        return self.state

    def load_state_dict(self, state, strict: bool = True, assign: bool = False):  # noqa: D102
        self.state = {k: v.clone() for k, v in state.items()}


def identity(recipe: str, cfg, reader: CacheReader) -> dict:
    """What a checkpoint must match to be resumed: the recipe, the cache and every setting that
    changes what the run computes."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in NOT_IDENTITY}
    return {"recipe": recipe, "cache": cache_identity(reader), "config": json.loads(json.dumps(settings))}


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


def _check_identity(out_dir: Path, saved: dict, now: dict, defaults: dict | None = None) -> None:
    for key in ("recipe", "cache"):
        if saved.get(key) != now[key]:
            raise ValueError(
                f"{out_dir / CHECKPOINT} is the checkpoint of another run ({key} was {saved.get(key)!r}, "
                f"now {now[key]!r}): run its own command to resume it, or start afresh with --restart "
                "(or another --out)"
            )
    a, b = saved.get("config", {}), now["config"]
    k = changed_setting(a, b, defaults or {})
    if k is not None:
        raise ValueError(
            f"{out_dir / CHECKPOINT} is the checkpoint of another run ({k} was {a.get(k)!r}, now "
            f"{b.get(k)!r}): run the same command to resume it, or start afresh with --restart "
            "(or another --out)"
        )


class _Records:
    """metrics.jsonl and the optional TensorBoard mirror of rank 0."""

    def __init__(self, out_dir: Path, history: list[dict], report_to: tuple[str, ...], lead: bool):
        self.lead, self.writer = lead, None
        if not lead:
            return
        with open(out_dir / "metrics.jsonl", "w") as f:  # the checkpoint's history: each epoch once
            f.writelines(json.dumps(r) + "\n" for r in history)
        self.file = open(out_dir / "metrics.jsonl", "a")
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ValueError(
                    "--report-to tensorboard needs the tensorboard package: pip install 'seqdistill[tensorboard]'"
                ) from None
            self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        if not self.lead:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:  # every number of the record, at its step
            for k, v in _scalars(record):
                self.writer.add_scalar(k, v, record["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.lead:
            self.file.close()
            if self.writer is not None:
                self.writer.close()


def _metric_text(metric: str, value: float) -> str:
    """``dev F1 91.20`` for an F1 (in percent, as the papers give it), ``val_loss 0.1234`` else."""
    if metric.endswith("f1"):
        return metric[:-2].replace("_", " ") + f"F1 {100 * value:.2f}"
    return f"{metric} {value:.4f}"


def _scalars(record: dict, prefix: str = ""):
    for k, v in record.items():
        if k in ("epoch", "step") and not prefix:
            continue
        if isinstance(v, dict):
            yield from _scalars(v, f"{prefix}{k}/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            yield f"{prefix}{k}", v


def train(recipe: str, plan_fn: Callable[[Context], Plan], reader: CacheReader, out_dir, cfg, log=print) -> dict:
    """Run ``plan_fn``'s stages (module docstring) and return the run's summary."""
    rank, world, device_name = distributed.init(cfg.device)
    run = _Run(recipe, reader, Path(out_dir), cfg, rank, world, log if rank == 0 else (lambda *a: None))
    run.out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    run.device = device
    plan = plan_fn(Context(reader, cfg, run.out_dir, device, rank, world, run.log))
    try:
        return run.go(plan)
    finally:
        distributed.done(world)


class _Run:
    """One call of :func:`train`: its position (what a checkpoint holds) and the loop."""

    def __init__(self, recipe: str, reader: CacheReader, out_dir: Path, cfg, rank: int, world: int, log):
        self.recipe, self.reader, self.out_dir, self.cfg, self.rank, self.world = (
            recipe,
            reader,
            out_dir,
            cfg,
            rank,
            world,
        )
        self.lead, self.log = rank == 0, log
        self.workers = max(1, getattr(cfg, "num_workers", 0))
        self.identity = identity(recipe, cfg, reader)
        self.best_weights = _Weights({})
        self.pos = {
            "stage": 0,
            "epoch": 0,
            "step": 0,
            "stage_step": 0,
            "consumed": {},
            "sums": {},
            "n": 0,
            "best": None,
            "best_epoch": 0,
            "best_record": None,
            "plateau": None,
            "fresh_stage": True,
            "history": [],
            "stages": [],
            "finished": False,
            "seconds": 0.0,
        }

    # -- checkpoints --------------------------------------------------------------------------------
    def resume(self, modules: dict) -> dict | None:
        """The optimizer state of the checkpoint this run continues from (the rest restored in
        place), or None for a fresh start."""
        if not self.cfg.resume:
            remove_checkpoint(self.out_dir)  # --restart
            return None
        saved = load_checkpoint(self.out_dir, {**modules, "best": self.best_weights}, None)
        if saved is None:
            return None
        _check_identity(self.out_dir, saved["identity"], self.identity, config_defaults(self.cfg))
        self.pos.update(saved["position"])
        if self.world > 1:  # the checkpoint holds rank 0's RNG: each rank its own dropout masks again
            torch.manual_seed(self.cfg.seed * 1000 + self.rank + self.pos["step"])
        return saved["optimizer_state"]

    def checkpoint(self, modules: dict, optim, **position) -> None:
        """Write the position (``self.pos`` updated by ``position``); under torchrun the stream
        parts' counts are summed over the ranks first (a collective: every rank calls it)."""
        self.pos.update(position)
        if self.world > 1:
            parts = self.world * self.workers
            counts = distributed.sum_across(
                [self.pos["consumed"].get(str(p), 0) for p in range(parts)], self.world, self.device
            )
            self.pos["consumed"] = {str(p): int(c) for p, c in enumerate(counts.tolist()) if c}
        if self.lead:
            self.pos["seconds"] = round(time.time() - self.t_start, 1)
            save_checkpoint(
                self.out_dir,
                {**modules, "best": self.best_weights},
                optim,
                {"identity": self.identity, "position": self.pos, "step": self.pos["step"]},
            )

    def checkpoint_position(self, modules: dict, optim, plateau, epoch: int, consumed: dict, sums: dict, n: int):
        """:meth:`checkpoint` mid-epoch: how far this epoch's stream parts got and its running loss sums."""
        self.checkpoint(
            modules,
            optim,
            epoch=epoch,
            consumed={str(k): v for k, v in consumed.items()},
            sums=sums,
            n=n,
            plateau=plateau.state_dict() if plateau else None,
        )

    # -- the loop -------------------------------------------------------------------------------------
    def go(self, plan: Plan) -> dict:
        cfg, pos = self.cfg, self.pos
        model = plan.model
        modules = {"model": model, **plan.modules}
        if self.world > 1:  # the same initial weights on every rank (seeded above), then each its own dropout masks
            torch.manual_seed(cfg.seed * 1000 + self.rank)
        optimizer_state = self.resume(modules)
        if pos["finished"]:
            self.log(f"{self.out_dir} holds this finished run: nothing to train (--restart trains it again)")
            return json.loads((self.out_dir / "training.json").read_text())
        if optimizer_state is not None:
            self.log(
                f"resuming from {self.out_dir / CHECKPOINT}: {plan.stages[pos['stage']].name} epoch "
                f"{pos['epoch'] + 1}, step {pos['step']}"
            )
        self.log(plan.describe)
        self.records = _Records(self.out_dir, pos["history"], tuple(getattr(cfg, "report_to", ()) or ()), self.lead)
        self.t_start = time.time() - pos["seconds"]
        capped = False
        try:
            for si in range(pos["stage"], len(plan.stages)):
                if si != pos["stage"] or pos["fresh_stage"]:
                    optimizer_state = None
                    pos.update(
                        stage=si,
                        epoch=0,
                        stage_step=0,
                        consumed={},
                        sums={},
                        n=0,
                        best=None,
                        best_epoch=0,
                        best_record=None,
                        plateau=None,
                        fresh_stage=False,
                    )
                capped = self.run_stage(plan, si, modules, optimizer_state)
                if capped:
                    break
        finally:
            self.records.close()
        last = plan.stages[-1]
        kept = pos["stages"][-1] if pos["stages"] and not capped else pos["best_record"]
        summary = {
            "recipe": self.recipe,
            "config": asdict(cfg),
            "best_epoch": kept.get("best_epoch", kept["epoch"]) if kept else None,
            "best_dev_f1": kept.get("dev_f1") if kept else None,
            f"best_{last.metric}": kept.get(last.metric) if kept else None,
            "history": pos["history"],
            "stages": pos["stages"],
            "steps": pos["step"],
            "train": plan.train,
            "dev": plan.dev,
            "processes": self.world,
            "finished": not capped,
            "provenance": provenance(self.reader, plan.train + plan.dev),
            **plan.summary,
        }
        if self.lead:
            if not capped and last.keep != "save":
                save_student(model, plan.tokenizer, self.out_dir)
            (self.out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
        if not capped:
            self.checkpoint(modules, self.optim, finished=True)
        return summary

    def run_stage(self, plan: Plan, si: int, modules: dict, optimizer_state: dict | None) -> bool:
        """Stage ``si`` from the position; True when ``--max-steps`` cut the run."""
        cfg, pos, stage, model = self.cfg, self.pos, plan.stages[si], plan.model
        params = [p for p in stage.params() if p.requires_grad]
        self.optim = optim = stage.optimizer(params)
        plateau = (
            torch.optim.lr_scheduler.ReduceLROnPlateau(optim, mode=stage.mode, **stage.plateau)
            if stage.plateau
            else None
        )
        if optimizer_state is not None:
            optim.load_state_dict(optimizer_state)
            if plateau and pos["plateau"]:
                plateau.load_state_dict(pos["plateau"])
        if pos["best"] is None and stage.keep == "restore":  # the starting weights are epoch 0
            start = {"stage": stage.name, "epoch": 0, "step": pos["step"], **stage.evaluate(), **stage.info}
            self.best_weights.load_state_dict(model.state_dict())
            pos.update(best=start[stage.metric], best_epoch=0, best_record=start)

        for epoch in range(pos["epoch"], stage.epochs):
            stage.batches.set_epoch(epoch)
            consumed = {int(k): v for k, v in pos["consumed"].items() if int(k) // self.workers == self.rank}
            stage.batches.skip(consumed)  # this rank's parts, mid-epoch after a resume
            sums, n = dict(pos["sums"]), pos["n"]
            for m in modules.values():
                m.train()
            source = (
                batches(stage.batches, cfg.num_workers, getattr(cfg, "prefetch", 0))
                if isinstance(stage.batches, CacheStream)
                else stage.batches
            )
            bar = tqdm(source, desc=f"{stage.name} {epoch + 1}", unit="batch", leave=False, disable=not self.lead)
            capped = False
            batches_left = iter(bar)
            while True:
                batch = next(batches_left, None)
                # under torchrun a step goes on while any rank has a batch (the parts differ in length)
                active = distributed.count_across(batch is not None, self.world, self.device)
                if not active:
                    break
                if stage.lr_at is not None:
                    for g in optim.param_groups:
                        g["lr"] = stage.lr_at(pos["stage_step"])
                optim.zero_grad(set_to_none=True)
                parts = {}
                if batch is not None:
                    consumed[batch.origin[0]] = batch.origin[1] + 1
                    parts = stage.loss(batch)
                    loss = stage.combine(parts) if stage.combine else sum(parts.values())
                    loss.backward()
                    parts = {**parts, "loss": loss}
                distributed.average_gradients(params, active, self.world)
                if stage.clip:
                    torch.nn.utils.clip_grad_norm_(params, stage.clip)
                optim.step()
                pos["step"], pos["stage_step"], n = pos["step"] + 1, pos["stage_step"] + 1, n + (batch is not None)
                failpoint(f"train-step:{pos['step']}")
                for name, v in parts.items():
                    sums[name] = sums.get(name, 0.0) + v.item()
                bar.set_postfix({k: f"{v / max(n, 1):.3f}" for k, v in sums.items()})
                capped = bool(cfg.max_steps and pos["step"] >= cfg.max_steps)
                if capped:
                    break
                if cfg.checkpoint_every and pos["step"] % cfg.checkpoint_every == 0:
                    self.checkpoint_position(modules, optim, plateau, epoch, consumed, sums, n)
            record = self.end_epoch(plan, stage, epoch, sums, n, optim, capped)
            if plateau is not None and not capped:
                plateau.step(record[stage.metric])
            stop = epoch + 1 - pos["best_epoch"] >= stage.patience
            if capped:  # resumable mid-epoch: the same command without --max-steps goes on from here
                self.checkpoint_position(modules, optim, plateau, epoch, consumed, sums, n)
                return True
            if stop or epoch + 1 == stage.epochs:
                if stage.keep == "restore":
                    model.load_state_dict(self.best_weights.state_dict())
                pos["stages"].append({**pos["best_record"], "best_epoch": pos["best_epoch"], "epochs": epoch + 1})
                if stop:
                    self.log(f"{stage.name}: no better {stage.metric} for {stage.patience} epochs: stopping")
                self.checkpoint(
                    modules, optim, stage=si + 1, epoch=0, consumed={}, sums={}, n=0, fresh_stage=True, plateau=None
                )
                return False
            self.checkpoint(
                modules,
                optim,
                epoch=epoch + 1,
                consumed={},
                sums={},
                n=0,
                plateau=plateau.state_dict() if plateau else None,
            )
        return False

    def end_epoch(self, plan: Plan, stage: Stage, epoch: int, sums: dict, n: int, optim, capped: bool) -> dict:
        """The epoch's record (losses over every rank, the stage's evaluation), the best kept."""
        pos = self.pos
        if self.world > 1:  # every rank's losses, so that all ranks see the same record and stop together
            keys = distributed.names_across(set(sums), self.world, self.device)
            totals = distributed.sum_across([sums.get(k, 0.0) for k in keys] + [n], self.world, self.device).tolist()
            sums, n = dict(zip(keys, totals[:-1])), int(totals[-1])
        record = {
            "stage": stage.name,
            "epoch": epoch + 1,
            "step": pos["step"],
            **{("loss" if k == "loss" else f"loss_{k}"): v / max(n, 1) for k, v in sums.items()},
            **stage.evaluate(),
            **stage.info,
            "lr": optim.param_groups[0]["lr"],
            "seconds": round(time.time() - self.t_start, 1),
            **({"capped": True} if capped else {}),
        }
        value = record[stage.metric]
        improved = pos["best"] is None or stage.better(value, pos["best"])
        if improved:
            pos.update(best=value, best_epoch=epoch + 1, best_record=record)
            if stage.keep == "save" and self.lead:
                save_student(plan.model, plan.tokenizer, self.out_dir)
            elif stage.keep == "restore":
                self.best_weights.load_state_dict(plan.model.state_dict())
        pos["history"].append(record)
        self.records.write(record)
        self.log(
            f"{stage.name} epoch {epoch + 1}: "
            + "  ".join(f"{k} {v:.4f}" for k, v in record.items() if k.startswith("loss") and isinstance(v, float))
            + "  "
            + _metric_text(stage.metric, value)
            + (("  (best, saved)" if stage.keep == "save" else "  (best)") if improved else "")
        )
        return record
