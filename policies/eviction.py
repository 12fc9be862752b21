"""Prefix-cache eviction policies: which cached-evictable block is reclaimed first.

A policy owns the *evictable set*: blocks that hold a cached prefix (they have a hash
key) but no sequence references. The block manager tells it what happens to blocks and
asks it for victims when the free list runs dry. Every event is O(1) or O(log n): a
policy is on the allocator's hot path.

Time is the block manager's logical clock (an operation counter), never wall time, so a
run is deterministic.

Each registry entry is a factory called as ``factory(rng=rng)`` with the run's seeded
``numpy.random.Generator`` (or None); deterministic policies ignore it.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from backend.evictor import Evictor, LeastRecentlyUsed
from policies.registry import Registry

EVICTORS: Registry = Registry("eviction")
EVICTORS.register("lru")(LeastRecentlyUsed)  # the block manager's default

__all__ = ["EVICTORS", "Evictor", "LeastRecentlyUsed"]


class _HeapEvictor:
    """A min-heap of ``(priority, arrival, block)`` with lazy deletion.

    A block's priority is fixed while it sits in the evictable set (a hit takes it out
    before its statistics change), so one entry is pushed per ``on_cached``; removal
    only forgets the block's live arrival number and stale entries are skipped when
    popped. The heap is rebuilt when stale entries outnumber live ones, which keeps
    memory O(set size) and every event O(log n) amortised.
    """

    def __init__(self, rng: np.random.Generator | None = None):
        self._heap: list[tuple[float, int, int]] = []
        self._live: dict[int, int] = {}  # block -> arrival number of its valid entry
        self._arrivals = 0  # ties in priority break by arrival: older first (LRU)

    def _priority(self, block: int, now: int) -> float:
        raise NotImplementedError

    def _forget(self, block: int) -> None:
        """Drop the history of an evicted block."""

    def on_cached(self, block: int, now: int) -> None:
        self._arrivals += 1
        self._live[block] = self._arrivals
        heapq.heappush(self._heap, (self._priority(block, now), self._arrivals, block))

    def on_hit(self, block: int, now: int) -> None:
        pass

    def on_removed(self, block: int) -> None:
        del self._live[block]
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [e for e in self._heap if self._live.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims: list[int] = []
        while len(victims) < num_blocks and self._live:
            _, arrival, block = heapq.heappop(self._heap)
            if self._live.get(block) == arrival:
                del self._live[block]
                self._forget(block)
                victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: object) -> bool:
        return block in self._live

    def blocks(self) -> list[int]:
        return list(self._live)


@EVICTORS.register("fifo")
class FirstInFirstOut(_HeapEvictor):
    """The block whose prefix was cached earliest goes first, however often it was reused."""

    def __init__(self, rng: np.random.Generator | None = None):
        super().__init__(rng)
        self._first_cached: dict[int, int] = {}

    def _priority(self, block: int, now: int) -> float:
        return self._first_cached.setdefault(block, now)

    def _forget(self, block: int) -> None:
        self._first_cached.pop(block, None)


@EVICTORS.register("lfu")
class LeastFrequentlyUsed(_HeapEvictor):
    """Fewest prefix hits first; ties by least recently released."""

    def __init__(self, rng: np.random.Generator | None = None):
        super().__init__(rng)
        self._hits: dict[int, int] = {}

    def _priority(self, block: int, now: int) -> float:
        return self._hits.get(block, 0)

    def on_hit(self, block: int, now: int) -> None:
        self._hits[block] = self._hits.get(block, 0) + 1

    def _forget(self, block: int) -> None:
        self._hits.pop(block, None)


@EVICTORS.register("reuse-weighted")
class ReuseWeighted(_HeapEvictor):
    """Lowest exponentially aged reuse count first, so stale popular blocks still age out."""

    def __init__(self, rng: np.random.Generator | None = None, half_life: int = 1024):
        super().__init__(rng)
        self.half_life = half_life
        # block -> (value, time of value): value counts the computing request plus every
        # reuse, halving every ``half_life`` clock ticks.
        self._value: dict[int, tuple[float, int]] = {}

    def _priority(self, block: int, now: int) -> float:
        # value(t) = v * 2**(-(t - t0) / h), so log2 value(t) = log2 v + t0/h - t/h. The
        # last term is the same for every block, hence log2 v + t0/h orders blocks the
        # same way at every future time: the priority can stay fixed inside the heap.
        value, since = self._value.setdefault(block, (1.0, now))
        return math.log2(value) + since / self.half_life

    def on_hit(self, block: int, now: int) -> None:
        value, since = self._value.get(block, (1.0, now))
        self._value[block] = (value * 2.0 ** (-(now - since) / self.half_life) + 1.0, now)

    def _forget(self, block: int) -> None:
        self._value.pop(block, None)


@EVICTORS.register("random")
class RandomEviction:
    """Uniformly random victim (a baseline), drawn from the run's seeded generator."""

    def __init__(self, rng: np.random.Generator | None = None):
        self._rng = rng if rng is not None else np.random.default_rng(0)
        # A dense list plus a position map: removal swaps the last element into the hole.
        self._members: list[int] = []
        self._position: dict[int, int] = {}

    def on_cached(self, block: int, now: int) -> None:
        self._position[block] = len(self._members)
        self._members.append(block)

    def on_hit(self, block: int, now: int) -> None:
        pass

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
