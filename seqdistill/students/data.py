"""Streaming a cache into training batches, with no teacher anywhere.

:class:`CacheStream` is an ``IterableDataset`` of *batches*. Each epoch it visits the shards in an
order drawn from ``(seed, epoch)``, split between DataLoader workers and distributed ranks; it
reads only the layers and fields asked for (hidden states are never read unless a loss needs
them), keeps the rows of the selected corpora and splits, and fills a bounded buffer: when the
buffer is full it is shuffled, sorted by length, cut into batches and the batches shuffled — so
batches have little padding, and memory stays flat whatever the size of the cache.

The order is a pure function of ``(seed, epoch)``: a run resumed mid-epoch skips the batches it
had consumed (:meth:`CacheStream.skip`) and sees exactly the rest.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ..cache_schema import EXAMPLES_LAYER, CacheError, CacheReader

GOLD_SAMPLE_SEED = 0  # the gold sample is the same whatever the run's seed: runs compared differ in nothing else


@dataclass
class StreamConfig:
    batch_size: int = 32  # sentences (paper 000, Table 6)
    buffer_size: int = 4096  # examples shuffled and bucketed together
    seed: int = 13
    shuffle: bool = True
    unlabelled_sentences: int | None = None  # keep a seeded sample of this many unlabelled rows (None: all)
    gold_sentences: int | None = None  # keep the gold tags of a seeded sample of this many labelled rows (None: all)
    gold_only: bool = False  # with gold_sentences: drop the other labelled rows instead of training them unlabelled


def sample_unlabelled(
    reader: CacheReader, select: set[tuple[str, str]], n: int, seed: int, labelled: bool = False
) -> dict[tuple[str, str], set[int]]:
    """A seeded sample of ``n`` of the unlabelled rows of ``select`` (``labelled``: of the labelled
    rows), the same every epoch (the amount-of-unlabelled-data axis of paper 000, Fig. 5; with
    ``labelled``, the rows that keep their gold tags): ``{(corpus, split): row indices}``.
    Decision: uniform over all selected rows of the kind, in cache order, seeded by the run's seed."""
    pools = [
        (c.name, c.split, c.examples)
        for c in reader.manifest.corpora
        if c.labelled == labelled and (c.name, c.split) in select
    ]
    total = sum(k for _, _, k in pools)
    if n < 0 or n > total:
        option, kind = ("--gold-sentences", "labelled") if labelled else ("--unlabelled-sentences", "unlabelled")
        raise ValueError(
            f"{option} {n}: the training selection holds {total:,} {kind} sentences "
            f"({', '.join(f'{c}/{s}' for c, s, _ in pools) or 'none'}); ask for 0 to {total:,}"
        )
    keep: dict[tuple[str, str], set[int]] = {(c, s): set() for c, s, _ in pools}
    pools = [p for p in pools if p[2]]
    starts = list(itertools.accumulate([0] + [k for _, _, k in pools[:-1]]))
    for position in random.Random(seed).sample(range(total), n):
        j = bisect.bisect_right(starts, position) - 1
        keep[pools[j][:2]].add(position - starts[j])
    return keep


def parse_selection(names: Sequence[str], reader: CacheReader) -> set[tuple[str, str]]:
    """``["conll/train", "wiki"]`` to the (corpus, split) pairs of the cache they name."""
    have = [(c.name, c.split) for c in reader.manifest.corpora]
    out: set[tuple[str, str]] = set()
    for name in names:
        corpus, _, split = name.partition("/")
        match = [(c, s) for c, s in have if c == corpus and (not split or s == split)]
        if not match:
            listed = ", ".join(f"{c}/{s}" for c, s in have)
            raise CacheError(f"the cache has no corpus {name!r}; it holds: {listed}")
        out.update(match)
    return out


class CacheStream(IterableDataset):
    """Batches of example dicts (``row["examples"]["words"]``, ``row[teacher][field]``), each
    batch passed through ``collate`` (in the DataLoader worker)."""

    def __init__(
        self,
        reader: CacheReader,
        fields: dict[str, list[str]],
        select: set[tuple[str, str]],
        collate: Callable[[list[dict]], object],
        cfg: StreamConfig | None = None,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.reader, self.collate, self.cfg = reader, collate, cfg or StreamConfig()
        self.fields = {
            EXAMPLES_LAYER: sorted(set(fields.get(EXAMPLES_LAYER, [])) | {"corpus", "split", "n_words"}),
            **{k: v for k, v in fields.items() if k != EXAMPLES_LAYER},
        }
        self.keep = None  # (corpus, split) -> row indices kept, for the unlabelled corpora when sampled
        if self.cfg.unlabelled_sentences is not None:
            self.keep = sample_unlabelled(reader, select, self.cfg.unlabelled_sentences, self.cfg.seed)
            self.fields[EXAMPLES_LAYER] = sorted(set(self.fields[EXAMPLES_LAYER]) | {"index"})
        self.gold = None  # (corpus, split) -> labelled row indices whose gold tags are kept, when sampled
        if self.cfg.gold_sentences is not None:
            self.gold = sample_unlabelled(reader, select, self.cfg.gold_sentences, GOLD_SAMPLE_SEED, labelled=True)
            self.fields[EXAMPLES_LAYER] = sorted(set(self.fields[EXAMPLES_LAYER]) | {"index"})
        reader.resolve(self.fields)  # fail now, with the list of what the cache holds
        self.select, self.rank, self.world_size = select, rank, world_size
        self.epoch, self._skip = 0, {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._skip = epoch, {}

    def skip(self, consumed: dict[int, int]) -> None:
        """Resume mid-epoch: each stream part (rank x worker) drops the batches it had delivered,
        as recorded from the ``origin`` of the batches the trainer consumed."""
        self._skip = {int(k): int(v) for k, v in consumed.items()}

    def shard_order(self) -> list[int]:
        shards = list(range(self.reader.num_shards))
        if self.cfg.shuffle:
            random.Random(_seed(self.cfg.seed, self.epoch)).shuffle(shards)
        return shards

    def _my_shards(self) -> tuple[list[int], int]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        parts = self.world_size * workers
        me = self.rank * workers + worker
        return self.shard_order()[me::parts], me

    def __iter__(self) -> Iterator:
        """Collated batches; each carries ``origin = (part, n)``: the n-th batch of stream part."""
        shards, me = self._my_shards()
        rng = random.Random(_seed(self.cfg.seed, self.epoch, me))
        skip = self._skip.get(me, 0)
        for n, batch in enumerate(self._batches(shards, rng)):
            if n >= skip:
                out = self.collate(batch)
                out.origin = (me, n)
                yield out

    def _batches(self, shards: list[int], rng: random.Random) -> Iterator[list[dict]]:
        buffer: list[dict] = []
        for index in shards:
            data = self.reader.read_shard(index, self.fields)
            corpus = data.get(EXAMPLES_LAYER, "corpus").to_pylist()
            split = data.get(EXAMPLES_LAYER, "split").to_pylist()
            sampled = self.keep is not None or self.gold is not None
            row_index = data.get(EXAMPLES_LAYER, "index").to_pylist() if sampled else None
            wanted = [
                i
                for i, pair in enumerate(zip(corpus, split))
                if pair in self.select
                and (self.keep is None or pair not in self.keep or row_index[i] in self.keep[pair])
            ]
            for i, row in zip(wanted, data.rows(wanted)):
                pair = (corpus[i], split[i])
                if self.gold is not None and pair in self.gold and row_index[i] not in self.gold[pair]:
                    if self.cfg.gold_only:
                        continue
                    row[EXAMPLES_LAYER]["tags"] = None  # trains as an unlabelled row (the teacher's paths)
                buffer.append(row)
                if len(buffer) >= self.cfg.buffer_size:
                    yield from self._flush(buffer, rng)
                    buffer = []
        if buffer:
            yield from self._flush(buffer, rng)

    def _flush(self, buffer: list[dict], rng: random.Random) -> Iterator[list[dict]]:
        if self.cfg.shuffle:
            rng.shuffle(buffer)
        buffer.sort(key=lambda r: r[EXAMPLES_LAYER]["n_words"])
        bs = self.cfg.batch_size
        batches = [buffer[i : i + bs] for i in range(0, len(buffer), bs)]
        if self.cfg.shuffle:
            rng.shuffle(batches)
        yield from batches


def gold_tags(rows: list[dict], schema) -> tuple[list[list[str]], torch.Tensor, torch.Tensor]:
    """The words of a batch of cache rows, their gold tag ids ``[B, L]`` (-1 past the words and on
    unlabelled rows) and which rows are labelled ``[B]``."""
    words = [r[EXAMPLES_LAYER]["words"] for r in rows]
    tags = torch.full((len(rows), max(len(w) for w in words)), -1, dtype=torch.long)
    labelled = torch.zeros(len(rows), dtype=torch.bool)
    for b, r in enumerate(rows):
        gold = r[EXAMPLES_LAYER].get("tags")
        if gold is not None:
            tags[b, : len(gold)] = torch.tensor(schema.encode(gold))
            labelled[b] = True
    return words, tags, labelled


def batches(stream: "CacheStream", num_workers: int = 0, prefetch: int = 0):
    """A DataLoader over a stream's batches. The order comes from (seed, epoch) alone; the loader
    gets its own generator because one without draws a seed from torch's global RNG at every
    epoch, which would shift the dropout masks of a run resumed from a checkpoint. ``prefetch``:
    with no worker processes, read and collate up to that many batches ahead in a thread."""
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers, generator=torch.Generator().manual_seed(0))
    return Prefetch(loader, prefetch) if prefetch and not num_workers else loader


class Prefetch:
    """Iterate ``source`` in a background thread, up to ``depth`` items ahead. Reading Parquet and
    Zarr, tokenizing and numpy release the GIL, so loading overlaps the training step. Errors are
    raised in the consumer; a consumer that stops early (``close``, garbage collection) stops the
    thread at its next item and waits for it to end, so that no reader thread outlives the
    iteration: a process forked later (a DataLoader worker, a test's killed child) must not inherit
    a lock that a live reader held at the fork."""

    def __init__(self, source, depth: int = 2):
        self.source, self.depth = source, depth

    def __len__(self):
        return len(self.source)

    def __iter__(self):
        import queue
        import threading

        items: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        done = object()

        def offer(entry) -> bool:
            """Put ``entry`` unless the consumer has stopped; whether it was put."""
            while not stop.is_set():
                try:
                    items.put(entry, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce():
            try:
                for item in self.source:
                    if not offer((item, None)):
                        return
            except BaseException as e:  # raised in the consumer
                offer((None, e))
                return
            offer((done, None))

        thread = threading.Thread(target=produce, name="seqdistill-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item, error = items.get()
                if error is not None:
                    raise error
                if item is done:
                    return
                yield item
        finally:
            stop.set()
            thread.join()  # it ends within one item: every put checks ``stop``


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def pad_stack(arrays: list[np.ndarray], length: int, fill: float = 0.0, dtype=torch.float32) -> torch.Tensor:
    """Stack per-example arrays ``[n_i, ...]`` into ``[B, length, ...]``."""
    rest = arrays[0].shape[1:]
    out = torch.full((len(arrays), length, *rest), fill, dtype=dtype)
    for b, a in enumerate(arrays):
        out[b, : len(a)] = torch.as_tensor(np.asarray(a, dtype=np.float32) if dtype.is_floating_point else a)
    return out
