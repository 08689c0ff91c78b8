"""The one trainer: a teacher's fine-tuning and every student recipe run through :func:`run`.

A run is a :class:`~.stage.Plan`: its model, the modules trained beside it, and its stages. The
loop owns everything else, the same way for every run:

* epochs of a stage, an optimiser step per batch with the gradient norm clipped to ``Stage.clip``,
  the learning rate set per update (``Stage.lr_at``, or ``Stage.lr_factor`` of each parameter
  group's initial rate) or halved on a plateau of the metric (``Stage.plateau``), early stopping
  after ``patience`` epochs without a better metric (counted once the best passes
  ``Stage.patience_above``, when a stage names it);
* what is kept: ``keep="save"`` saves the model (``Plan.save``) at each new best epoch;
  ``keep="restore"`` reloads the best epoch's weights when the stage ends (the weights the stage
  starts from count as epoch 0: a stage that only makes things worse is undone, XtremeDistil
  §5.3); ``keep="last"`` goes on with the last weights. When the last stage does not save, the
  model is saved at the end;
* checkpoints (``seqdistill.checkpoint``, no pickle) every ``checkpoint_every`` updates and at every
  epoch end: the modules, the stage's optimiser and plateau schedule, the best weights of a
  ``restore`` stage, the torch RNG and each batch source's position. A run killed anywhere and
  started again with the same command continues from there and ends with bit-identical weights;
  a checkpoint of a different run (its ``identity``: what it trains from, every setting that
  changes what it computes) is refused by name, and ``resume=False`` (``--restart``) discards it.
  The checkpoint of a finished run stays (the same command then returns its summary without
  training again) unless the plan says otherwise (a teacher's is the size of the teacher);
* ``--max-steps N``: stop after N optimiser updates in all (a checkpoint is written there; the
  same command without the cap continues);
* DDP under torchrun: each rank reads its own part of every batch source, a step goes on while any
  rank has a batch, gradients are averaged over the ranks that had one (``distributed``), and rank
  0 alone writes;
* records: one per epoch, to each of the run's reporters (``records.py``: ``OUT/metrics.jsonl``
  always, TensorBoard with ``report_to=("tensorboard",)``), and ``OUT/training.json`` with the
  history, each stage's best record and the run's config at the end.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from tqdm import tqdm

from .. import distributed
from ..cache_schema.storage import failpoint
from ..checkpoint import (
    CHECKPOINT,
    changed_setting,
    checkpoint_state,
    config_defaults,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from .records import reporters
from .stage import Plan, Stage

# settings that change where or how fast a run goes, not what it computes: a resumed run may differ in them
NOT_IDENTITY = ("resume", "max_steps", "device", "num_workers", "checkpoint_every", "report_to")


def settings(cfg) -> dict:
    """The settings of ``cfg`` that a checkpoint must match (JSON values)."""
    return json.loads(json.dumps({k: v for k, v in asdict(cfg).items() if k not in NOT_IDENTITY}))


class _Weights(torch.nn.Module):
    """The best epoch's weights of a ``restore`` stage, as a module the checkpoint can hold."""

    def __init__(self, state: dict[str, torch.Tensor]):
        super().__init__()
        self.state = state

    def state_dict(self, *args, **kwargs):  # noqa: D102 (the checkpoint's view)
        return self.state

    def load_state_dict(self, state, strict: bool = True, assign: bool = False):  # noqa: D102
        self.state = {k: v.clone() for k, v in state.items()}


def check_identity(out_dir: Path, saved: dict, now: dict, defaults: dict | None = None) -> None:
    """Refuse to resume the checkpoint of another run, naming the first thing that differs: what it
    trains from (every key of ``now`` but ``config``, in order), then a setting."""
    for key in now:
        if key != "config" and saved.get(key) != now[key]:
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


def _metric_text(metric: str, value: float) -> str:
    """``dev F1 91.20`` for an F1 (in percent, as the papers give it), ``val_loss 0.1234`` else."""
    if metric.endswith("f1"):
        return metric[:-2].replace("_", " ") + f"F1 {100 * value:.2f}"
    return f"{metric} {value:.4f}"


def run(plan: Plan, out_dir, cfg, identity: dict, *, rank: int = 0, world: int = 1, device=None, log=print) -> dict:
    """Run ``plan``'s stages (module docstring) into ``out_dir`` and return the run's summary.
    ``identity``: what a checkpoint must match (``config``: :func:`settings` of ``cfg``, and what
    the run trains from); ``cfg`` brings ``seed``, ``resume``, ``max_steps``,
    ``checkpoint_every``, ``num_workers`` and ``report_to`` (those it lacks take their defaults)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return _Run(out, cfg, identity, rank, world, device, log if rank == 0 else (lambda *a: None)).go(plan)


@dataclass
class Position:
    """Where a run is: what a checkpoint holds (as JSON, these fields in this order) and what a
    resumed run continues from."""

    stage: int = 0  # the stage running
    epoch: int = 0  # epochs of the stage done
    step: int = 0  # optimiser updates of the whole run
    stage_step: int = 0  # of this stage (its learning-rate schedule's clock)
    consumed: dict = field(default_factory=dict)  # batch source -> batches taken this epoch (mid-epoch resume)
    sums: dict = field(default_factory=dict)  # this epoch's running loss sums ...
    n: int = 0  # ... over n batches
    best: float | None = None  # the stage's best metric, its epoch and record
    best_epoch: int = 0
    best_record: dict | None = None
    plateau: dict | None = None  # ReduceLROnPlateau's state
    fresh_stage: bool = True  # the stage starts afresh (a new optimiser)
    history: list = field(default_factory=list)  # every epoch's record
    stages: list = field(default_factory=list)  # every finished stage's best record
    finished: bool = False
    seconds: float = 0.0

    def update(self, **changes) -> None:
        for name, value in changes.items():
            if name not in _POSITION_FIELDS:
                raise KeyError(f"a run's position has no {name!r}")
            setattr(self, name, value)

    def start_stage(self, stage: int) -> None:
        """The one reset of a stage's fields, when stage ``stage`` starts afresh."""
        self.update(
            stage=stage,
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


_POSITION_FIELDS = {f.name for f in fields(Position)}


class _Run:
    """One call of :func:`run`: its position (what a checkpoint holds) and the loop."""

    def __init__(self, out_dir: Path, cfg, identity: dict, rank: int, world: int, device, log):
        self.out_dir, self.cfg, self.identity, self.rank, self.world = out_dir, cfg, identity, rank, world
        self.device = device or torch.device("cpu")
        self.lead, self.log = rank == 0, log
        self.workers = max(1, getattr(cfg, "num_workers", 0))
        self.max_steps = getattr(cfg, "max_steps", None)
        self.checkpoint_every = getattr(cfg, "checkpoint_every", 0)
        self.best_weights = _Weights({})
        self.pos = Position()

    # -- checkpoints --------------------------------------------------------------------------------
    def resume(self, modules: dict) -> dict | None:
        """The optimizer state of the checkpoint this run continues from (the rest restored in
        place), or None for a fresh start."""
        if not getattr(self.cfg, "resume", True):
            remove_checkpoint(self.out_dir)  # --restart
            return None
        state = checkpoint_state(self.out_dir)
        if state is None:
            return None
        if "position" not in state or "schedule" in state:  # the teachers' own loop before issue 33
            raise ValueError(
                f"{self.out_dir / CHECKPOINT} was written by an older fine-tuning loop, which this version "
                "cannot continue: start afresh with --restart (or another --out)"
            )
        check_identity(self.out_dir, state["identity"], self.identity, config_defaults(self.cfg))  # before any tensor
        saved = load_checkpoint(self.out_dir, {**modules, "best": self.best_weights}, None)
        self.pos.update(**saved["position"])
        if self.world > 1:  # the checkpoint holds rank 0's RNG: each rank its own dropout masks again
            torch.manual_seed(self.cfg.seed * 1000 + self.rank + self.pos.step)
        return saved["optimizer_state"]

    def checkpoint(self, modules: dict, optim, **position) -> None:
        """Write the position (``self.pos`` updated by ``position``); under torchrun the batch
        sources' counts are summed over the ranks first (a collective: every rank calls it)."""
        self.pos.update(**position)
        if self.world > 1:
            parts = self.world * self.workers
            counts = distributed.sum_across(
                [self.pos.consumed.get(str(p), 0) for p in range(parts)], self.world, self.device
            )
            self.pos.consumed = {str(p): int(c) for p, c in enumerate(counts.tolist()) if c}
        if self.lead:
            self.pos.seconds = round(time.time() - self.t_start, 1)
            save_checkpoint(
                self.out_dir,
                {**modules, "best": self.best_weights},
                optim,
                {"identity": self.identity, "position": asdict(self.pos), "step": self.pos.step},
            )

    def checkpoint_position(self, modules: dict, optim, plateau, epoch: int, consumed: dict, sums: dict, n: int):
        """:meth:`checkpoint` mid-epoch: how far this epoch's batch sources got and its running loss sums."""
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
        if self.world > 1:  # the same initial weights on every rank (seeded before), then each its own dropout masks
            torch.manual_seed(cfg.seed * 1000 + self.rank)
        optimizer_state = self.resume(modules)
        if pos.finished:
            self.log(f"{self.out_dir} holds this finished run: nothing to train (--restart trains it again)")
            return json.loads((self.out_dir / "training.json").read_text())
        if optimizer_state is not None:
            self.log(
                f"resuming from {self.out_dir / CHECKPOINT}: {plan.stages[pos.stage].name} epoch "
                f"{pos.epoch + 1}, step {pos.step}"
            )
        self.log(plan.describe)
        self.records = reporters(tuple(getattr(cfg, "report_to", ()) or ())) if self.lead else []
        for r in self.records:
            r.open(self.out_dir, pos.history)
        self.t_start = time.time() - pos.seconds
        capped = False
        try:
            for si in range(pos.stage, len(plan.stages)):
                if si != pos.stage or pos.fresh_stage:
                    optimizer_state = None
                    pos.start_stage(si)
                capped = self.run_stage(plan, si, modules, optimizer_state)
                if capped:
                    break
        finally:
            for r in self.records:
                r.close()
        last = plan.stages[-1]
        kept = pos.stages[-1] if pos.stages and not capped else pos.best_record
        summary = {
            **plan.header,
            "config": asdict(cfg),
            "best_epoch": kept.get("best_epoch", kept["epoch"]) if kept else None,
            "best_dev_f1": kept.get("dev_f1") if kept else None,
            f"best_{last.metric}": kept.get(last.metric) if kept else None,
            "history": pos.history,
            "stages": pos.stages,
            "steps": pos.step,
            "processes": self.world,
            "finished": not capped,
            **plan.summary,
        }
        if self.lead:
            if not capped and last.keep != "save":
                plan.save(self.out_dir)
            (self.out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
        if not capped:
            if plan.keep_checkpoint:
                self.checkpoint(modules, self.optim, finished=True)
            elif self.lead:
                remove_checkpoint(self.out_dir)
        return summary

    def run_stage(self, plan: Plan, si: int, modules: dict, optimizer_state: dict | None) -> bool:
        """Stage ``si`` from the position; True when ``--max-steps`` cut the run."""
        pos, stage, model = self.pos, plan.stages[si], plan.model
        params = [p for p in stage.params() if p.requires_grad]
        optim, plateau = self.optimizer(stage, params, optimizer_state)
        if pos.best is None and stage.keep == "restore":  # the starting weights are epoch 0
            start = {"stage": stage.name, "epoch": 0, "step": pos.step, **stage.evaluate(), **stage.info}
            self.best_weights.load_state_dict(model.state_dict())
            pos.update(best=start[stage.metric], best_epoch=0, best_record=start)
        for epoch in range(pos.epoch, stage.epochs):
            consumed, sums, n, capped = self.train_epoch(plan, stage, epoch, params, modules, plateau)
            record = self.end_epoch(plan, stage, epoch, sums, n, optim, capped)
            if plateau is not None and not capped:
                plateau.step(record[stage.metric])
            stop = epoch + 1 - pos.best_epoch >= stage.patience and (
                stage.patience_above is None or pos.best > stage.patience_above
            )
            if capped:  # resumable mid-epoch: the same command without --max-steps goes on from here
                self.checkpoint_position(modules, optim, plateau, epoch, consumed, sums, n)
                return True
            if stop or epoch + 1 == stage.epochs:
                if stage.keep == "restore":
                    model.load_state_dict(self.best_weights.state_dict())
                pos.stages.append({**pos.best_record, "best_epoch": pos.best_epoch, "epochs": epoch + 1})
                if stop:
                    self.log(f"{stage.name}: no better {stage.metric} for {stage.patience} epochs: stopping")
                self.checkpoint(
                    modules, optim, stage=si + 1, epoch=0, consumed={}, sums={}, n=0, fresh_stage=True, plateau=None
                )
                return False
            plateau_state = plateau.state_dict() if plateau else None
            self.checkpoint(modules, optim, epoch=epoch + 1, consumed={}, sums={}, n=0, plateau=plateau_state)
        return False

    def optimizer(self, stage: Stage, params: list, optimizer_state: dict | None):
        """The stage's optimiser (``self.optim``) and its plateau schedule, restored from a checkpoint."""
        self.optim = optim = stage.optimizer(params)
        if stage.lr_factor is not None:
            for g in optim.param_groups:  # what lr_factor scales (a checkpoint restores it)
                g.setdefault("initial_lr", g["lr"])
        plateau = (
            torch.optim.lr_scheduler.ReduceLROnPlateau(optim, mode=stage.mode, **stage.plateau)
            if stage.plateau
            else None
        )
        if optimizer_state is not None:
            optim.load_state_dict(optimizer_state)
            if plateau and self.pos.plateau:
                plateau.load_state_dict(self.pos.plateau)
        return optim, plateau

    def train_epoch(self, plan: Plan, stage: Stage, epoch: int, params: list, modules: dict, plateau):
        """One epoch of the stage (from mid-epoch after a resume): ``(consumed, sums, n, capped)``,
        the batch sources' counts, the loss sums over ``n`` batches, and whether ``--max-steps`` cut it."""
        pos, optim = self.pos, self.optim
        stage.batches.set_epoch(epoch)
        consumed = {int(k): v for k, v in pos.consumed.items() if int(k) // self.workers == self.rank}
        stage.batches.skip(consumed)  # this rank's parts, mid-epoch after a resume
        sums, n = dict(pos.sums), pos.n
        for m in modules.values():
            m.train()
        source = plan.iterate(stage.batches) if plan.iterate else stage.batches
        bar = tqdm(source, desc=f"{stage.name} {epoch + 1}", unit="batch", leave=False, disable=not self.lead)
        batches_left = iter(bar)
        while True:
            batch = next(batches_left, None)
            # under torchrun a step goes on while any rank has a batch (the parts differ in length)
            active = distributed.count_across(batch is not None, self.world, self.device)
            if not active:
                return consumed, sums, n, False
            parts = self.step(stage, params, batch, active, consumed)
            n += batch is not None
            for name, v in parts.items():
                sums[name] = sums.get(name, 0.0) + v.item()
            bar.set_postfix({k: f"{v / max(n, 1):.3f}" for k, v in sums.items()})
            if self.max_steps and pos.step >= self.max_steps:
                return consumed, sums, n, True
            if self.checkpoint_every and pos.step % self.checkpoint_every == 0:
                self.checkpoint_position(modules, optim, plateau, epoch, consumed, sums, n)

    def step(self, stage: Stage, params: list, batch, active: int, consumed: dict) -> dict:
        """One optimiser update (this rank's batch, or none when its part is spent): the learning
        rate of the stage's schedule, the loss parts and their combination, gradients averaged
        over the ranks, clipping. Returns the parts with ``loss``."""
        pos, optim = self.pos, self.optim
        if stage.lr_at is not None:
            for g in optim.param_groups:
                g["lr"] = stage.lr_at(pos.stage_step)
        if stage.lr_factor is not None:
            for g in optim.param_groups:
                g["lr"] = g["initial_lr"] * stage.lr_factor(pos.stage_step)
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
        pos.step, pos.stage_step = pos.step + 1, pos.stage_step + 1
        failpoint(f"train-step:{pos.step}")
        return parts

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
            "step": pos.step,
            **{("loss" if k == "loss" else f"loss_{k}"): v / max(n, 1) for k, v in sums.items()},
            **stage.evaluate(),
            **stage.info,
            "lr": optim.param_groups[0]["lr"],
            "seconds": round(time.time() - self.t_start, 1),
            **({"capped": True} if capped else {}),
        }
        value = record[stage.metric]
        improved = pos.best is None or stage.better(value, pos.best)
        if improved:
            pos.update(best=value, best_epoch=epoch + 1, best_record=record)
            if stage.keep == "save" and self.lead:
                plan.save(self.out_dir)
            elif stage.keep == "restore":
                self.best_weights.load_state_dict(plan.model.state_dict())
        pos.history.append(record)
        for r in self.records:
            r.write(record)
        self.log(
            f"{stage.name} epoch {epoch + 1}: "
            + "  ".join(f"{k} {v:.4f}" for k, v in record.items() if k.startswith("loss") and isinstance(v, float))
            + "  "
            + _metric_text(stage.metric, value)
            + (("  (best, saved)" if stage.keep == "save" else "  (best)") if improved else "")
        )
        return record
