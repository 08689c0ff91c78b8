"""What a run trains, as the one trainer (``loop.py``) takes it: its stages and the batches they
read. Teachers' fine-tuning and every student recipe describe themselves this way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass(kw_only=True)
class Stage:
    """One stage of a run (what the papers call one): a loss over a stream of batches, the
    parameters it trains, its optimiser and schedule, and the metric that stops it early.

    ``batches`` is anything with ``set_epoch(epoch)``, ``skip({part: batches done})`` and
    iteration yielding batches that carry ``origin = (part, index)`` (a ``CacheStream`` or
    :class:`ListBatches`). ``loss(batch)`` returns the named loss parts (each a batch mean),
    ``combine`` their total (default: the sum); ``evaluate()`` the epoch record's fields, among them
    ``metric``; ``params()`` is called when the stage starts (it may freeze and unfreeze groups) and
    ``optimizer(params)`` builds the stage's own optimiser."""

    name: str
    batches: object
    loss: Callable[[object], dict[str, torch.Tensor]]
    params: Callable[[], list[torch.nn.Parameter]]
    optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
    evaluate: Callable[[], dict]
    metric: str = "dev_f1"
    mode: str = "max"  # max | min: whether a larger metric is better
    epochs: int = 10
    patience: int = 3
    patience_above: float | None = None  # patience counts only once the best metric passes this
    keep: str = "save"  # save | restore | last
    combine: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None
    lr_at: Callable[[int], float] | None = None  # the rate of the stage's u-th update, every group
    lr_factor: Callable[[int], float] | None = None  # or a factor of each group's initial rate
    plateau: dict | None = None  # ReduceLROnPlateau settings on the metric (mode follows ``mode``)
    clip: float = 5.0
    info: dict = field(default_factory=dict)  # written into each of the stage's records

    def better(self, a: float, b: float) -> bool:
        return a > b if self.mode == "max" else a < b


@dataclass(kw_only=True)
class Plan:
    """What the trainer runs: the model, the other trained modules (checkpointed with it), the
    stages in order, how the model is saved (``save(out_dir)``), the start-of-run log line, and the
    fields the run's summary (``training.json``) opens and closes with."""

    model: torch.nn.Module
    stages: list[Stage]
    save: Callable[[Path], object]
    modules: dict[str, torch.nn.Module] = field(default_factory=dict)
    describe: str = ""
    header: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    keep_checkpoint: bool = True  # the finished run's checkpoint stays (the same command is then a no-op)
    iterate: Callable[[object], Iterable] | None = None  # how a stage's batches are read (workers)


class ListBatches:
    """Batches of in-memory examples drawn in an order that is a pure function of the epoch
    (``order(epoch)``: indices), split between ranks like a ``CacheStream`` (rank r takes every
    world-th batch), each batch ``collate(indices)`` with its ``origin``; resumable with
    :meth:`skip`. With ``size`` (the examples an epoch draws) it has a length: this rank's batches
    of an epoch, for the progress bar."""

    def __init__(
        self,
        order: Callable[[int], list[int]],
        collate: Callable[[list[int]], object],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        size: int | None = None,
    ):
        self.order, self.collate, self.batch_size = order, collate, batch_size
        self.rank, self.world_size, self.epoch, self._skip, self.size = rank, world_size, 0, {}, size

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError("this ListBatches has no size: its length is that of its order")
        return len(range(self.rank, -(-self.size // self.batch_size), self.world_size))

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
