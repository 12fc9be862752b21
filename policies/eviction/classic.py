"""Classic eviction policies: fifo, lfu, reuse-weighted and random."""

from __future__ import annotations

import math

import numpy as np

from backend.evictor import EvictorBase
from policies.eviction.base import EVICTORS, PriorityEvictor


@EVICTORS.register("fifo")
class FirstInFirstOut(PriorityEvictor):
    """The block whose prefix was cached earliest goes first, however often it was reused."""

    def __init__(self) -> None:
        super().__init__()
        self._first_cached: dict[int, int] = {}

    def priority(self, block: int, now: int, key: int) -> float:
        return self._first_cached.setdefault(block, now)

    def forget(self, block: int) -> None:
        self._first_cached.pop(block, None)


@EVICTORS.register("lfu")
class LeastFrequentlyUsed(PriorityEvictor):
    """Fewest prefix hits first; ties by least recently released."""

    def __init__(self) -> None:
        super().__init__()
        self._hits: dict[int, int] = {}

    def priority(self, block: int, now: int, key: int) -> float:
        return self._hits.get(block, 0)

    def on_hit(self, block: int, now: int) -> None:
        self._hits[block] = self._hits.get(block, 0) + 1

    def forget(self, block: int) -> None:
        self._hits.pop(block, None)


@EVICTORS.register("reuse-weighted")
class ReuseWeighted(PriorityEvictor):
    """Lowest exponentially aged reuse count first, so stale popular blocks still age out.
    ``half_life`` (param, default 1024) is in block-manager clock ticks (allocations)."""

    def __init__(self, half_life: int = 1024):
        if not half_life > 0:
            raise ValueError(f"half_life must be > 0, got {half_life}")
        super().__init__()
        self.half_life = half_life
        # block -> (value, time of value): value counts the computing request plus every
        # reuse, halving every ``half_life`` clock ticks.
        self._value: dict[int, tuple[float, int]] = {}

    def priority(self, block: int, now: int, key: int) -> float:
        # value(t) = v * 2**(-(t - t0) / h), so log2 value(t) = log2 v + t0/h - t/h. The
        # last term is the same for every block, hence log2 v + t0/h orders blocks the
        # same way at every future time: the priority can stay fixed inside the heap.
        value, since = self._value.setdefault(block, (1.0, now))
        return math.log2(value) + since / self.half_life

    def on_hit(self, block: int, now: int) -> None:
        value, since = self._value.get(block, (1.0, now))
        self._value[block] = (value * 2.0 ** (-(now - since) / self.half_life) + 1.0, now)

    def forget(self, block: int) -> None:
        self._value.pop(block, None)


@EVICTORS.register("random")
class RandomEviction(EvictorBase):
    """Uniformly random victim (a baseline), drawn from the run's seeded generator."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        # A dense list plus a position map: removal swaps the last element into the hole.
        self._members: list[int] = []
        self._position: dict[int, int] = {}

    def on_cached(self, block: int, now: int, key: int) -> None:
        self._position[block] = len(self._members)
        self._members.append(block)

    def on_removed(self, block: int) -> None:
        index = self._position.pop(block)
        last = self._members.pop()
        if last != block:
            self._members[index] = last
            self._position[last] = index

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = []
        while len(victims) < num_blocks and self._members:
            block = self._members[int(self._rng.integers(len(self._members)))]
            self.on_removed(block)
            victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, block: object) -> bool:
        return block in self._position

    def blocks(self) -> list[int]:
        return list(self._members)
