"""The entity sampler of paper 003 (§3.2): training sentences drawn so that the number of entities
of each type seen is proportional to the logarithm of that type's total count in the data.

Each draw picks the most under-represented type — the largest deficit ``share_e * (n + 1) -
seen_e``, with ``share_e = log(1 + N_e) / sum_f log(1 + N_f)`` and n the entities drawn so far
— then a random sentence holding an entity of that type, and adds all of that sentence's entities
to ``seen``. Decisions, named here: log(1 + N) so that a type seen once still has a share; sentences
without entities are drawn too, uniformly, at their share of the data (so the model still sees
plain text), and ties go to the first type in alphabetical order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence


class LogProportionalSampler:
    """Indices into a list of sentences, each given as the entity types it holds (with repeats)."""

    def __init__(self, sentence_types: Sequence[Sequence[str]], num_samples: int | None = None, seed: int = 13):
        self.sentence_types = [list(t) for t in sentence_types]
        self.num_samples = num_samples or len(self.sentence_types)
        self.seed, self.epoch = seed, 0
        totals: dict[str, int] = {}
        for types in self.sentence_types:
            for t in types:
                totals[t] = totals.get(t, 0) + 1
        self.types = sorted(totals)
        norm = sum(math.log1p(totals[t]) for t in self.types)
        self.share = {t: math.log1p(totals[t]) / norm for t in self.types}
        self.holding = {t: [i for i, types in enumerate(self.sentence_types) if t in types] for t in self.types}
        self.plain = [i for i, types in enumerate(self.sentence_types) if not types]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        rng = random.Random(self.seed * 1000003 + self.epoch)
        seen = {t: 0 for t in self.types}
        drawn = 0
        plain_share = len(self.plain) / max(1, len(self.sentence_types))
        for _ in range(self.num_samples):
            if not self.types or (self.plain and rng.random() < plain_share):
                yield rng.choice(self.plain) if self.plain else rng.randrange(len(self.sentence_types))
                continue
            target = max(self.types, key=lambda t: self.share[t] * (drawn + 1) - seen[t])
            i = rng.choice(self.holding[target])
            for t in self.sentence_types[i]:
                seen[t] += 1
                drawn += 1
            yield i
