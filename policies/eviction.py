"""Prefix-cache eviction policies: which cached-evictable block is reclaimed first.

A policy owns the *evictable set*: blocks that hold a cached prefix (they have a hash
key) but no sequence references. The block manager tells it what happens to blocks and
asks it for victims when the free list runs dry. Every event is O(1) or O(log n): a
policy is on the allocator's hot path.

Time is the block manager's logical clock (an operation counter), never wall time, so a
run is deterministic.

Registered: ``lru`` (the default), ``fifo``, ``lfu``, ``reuse-weighted``, ``random``,
``slru`` (segmented LRU: reused blocks are protected) and ``arc`` (adaptive replacement).

A constructor declares by parameter name what the run gives it: ``rng`` (the run's
seeded ``numpy.random.Generator``, or None), ``num_blocks`` (the device pool's block
count); its other parameters come from the scenario.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from numbers import Integral

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


def _check_num_blocks(num_blocks: int) -> int:
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, Integral) or num_blocks < 1:
        raise ValueError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
    return int(num_blocks)


class _ReuseHistory:
    """The blocks whose current content had a prefix hit, kept while a block is in use
    or evictable and forgotten when it is evicted. Only keyed blocks are hit, at most
    ``limit`` of them, so the bound only caps other callers."""

    def __init__(self, limit: int):
        self.limit = limit
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def add(self, block: int) -> None:
        self._blocks[block] = None
        self._blocks.move_to_end(block)
        if len(self._blocks) > self.limit:
            self._blocks.popitem(last=False)

    def forget(self, block: int) -> None:
        self._blocks.pop(block, None)

    def __contains__(self, block: object) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)


@EVICTORS.register("slru")
class SegmentedLRU:
    """Segmented LRU: blocks reused by a prefix hit are protected from blocks seen once.

    A block released without a hit on its content enters the *probationary* segment; one
    whose content had a prefix hit (while in use, or before an earlier release) enters
    the *protected* segment. The protected segment holds at most ``protected_fraction``
    of ``num_blocks`` (rounded down); overflow demotes its least recent block to the
    recent end of probation. Victims come from probation first, least recent first, then
    from protected. A hit's ``on_removed`` keeps the block's history; eviction forgets it.
    """

    def __init__(self, num_blocks: int, protected_fraction: float = 0.8):
        num_blocks = _check_num_blocks(num_blocks)
        if not 0 < protected_fraction < 1:
            raise ValueError(f"protected_fraction must be in (0, 1), got {protected_fraction!r}")
        # (the epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 at 29)
        self.protected_capacity = math.floor(protected_fraction * num_blocks + 1e-9)
        self._probation: OrderedDict[int, None] = OrderedDict()
        self._protected: OrderedDict[int, None] = OrderedDict()
        self._reused = _ReuseHistory(num_blocks)

    def _protect(self, block: int) -> None:
        self._protected[block] = None
        if len(self._protected) > self.protected_capacity:
            demoted, _ = self._protected.popitem(last=False)
            self._probation[demoted] = None

    def on_cached(self, block: int, now: int) -> None:
        if block in self._reused:
            self._protect(block)
        else:
            self._probation[block] = None

    def on_hit(self, block: int, now: int) -> None:
        self._reused.add(block)
        # The block manager takes a block out of the set before reporting its hit, so
        # this is for other callers: a hit on a member promotes it, as in SLRU proper.
        if block in self._probation:
            del self._probation[block]
            self._protect(block)
        elif block in self._protected:
            self._protected.move_to_end(block)

    def on_removed(self, block: int) -> None:
        if block in self._probation:
            del self._probation[block]
        else:
            del self._protected[block]

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = []
        for segment in (self._probation, self._protected):
            while len(victims) < num_blocks and segment:
                block, _ = segment.popitem(last=False)
                self._reused.forget(block)
                victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._probation) + len(self._protected)

    def __contains__(self, block: object) -> bool:
        return block in self._probation or block in self._protected

    def blocks(self) -> list[int]:
        return [*self._probation, *self._protected]


@EVICTORS.register("arc")
class AdaptiveReplacement:
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003) over the evictable set.

    ARC keeps two LRU lists, T1 (pages seen once) and T2 (seen at least twice), ghost
    lists B1 and B2 of pages recently evicted from each, and a target size p for T1 that
    a hit in B1 raises and a hit in B2 lowers; the victim comes from T1 while T1 is over
    p. Here the cache is the evictable set and a *request* for a block's content is a
    use of it by a sequence: the sequence that computes it, then each prefix hit.

    - ``on_hit``: a request reuses the content; the block is marked as seen twice (kept
      across ``on_removed``, forgotten at eviction). ARC's move to the recent end of T2
      happens at the next ``on_cached``, since a block in use is not evictable.
    - ``on_cached``: the block enters at the recent end of T2 if its content was reused,
      else of T1. ``on_removed``: a hit took it back into use; it leaves T1 or T2.
    - ``pick_victims``: ARC's REPLACE per victim: T1's least recent block if |T1| > p
      (or T2 is empty), else T2's. Its id goes to B1 or B2. (The paper's tie rule needs
      the requested page, which a victim request does not have: left out.)

    Ghosts are keyed on block id: the protocol gives ids, not prefix keys, and no event
    reports a miss. The block manager hands an evicted id straight to new, unrelated
    content, so a *ghost hit* (the id cached again under a new key) never means that the
    evicted content was wanted again; it only tells which list recent evictions came
    from. p follows the paper's update on it (B1 returns raise p, B2 returns lower it),
    which keeps p near |T1| and splits evictions between T1 and T2. The returning content
    enters T1 or T2 by its own history, never T2 for being a ghost (that would let a
    scan into T2). The cost: one-off prompts recycle T1 victims, so p rises and T2 is
    eroded where the paper's ARC would keep it. Keying ghosts on content would need the
    prefix key in ``on_cached``.

    Ghosts keep the paper's bounds, |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c
    with c = ``num_blocks``, dropping the oldest first. Under the block manager they
    never bind: ghosts and members are distinct block ids, all below c.
    """

    def __init__(self, num_blocks: int):
        self.capacity = _check_num_blocks(num_blocks)
        self.target = 0.0  # p: the size T1 should have
        self._t1: OrderedDict[int, None] = OrderedDict()  # evictable, content used once
        self._t2: OrderedDict[int, None] = OrderedDict()  # evictable, content reused
        self._b1: OrderedDict[int, None] = OrderedDict()  # ids evicted from T1
        self._b2: OrderedDict[int, None] = OrderedDict()  # ids evicted from T2
        self._reused = _ReuseHistory(num_blocks)

    def on_cached(self, block: int, now: int) -> None:
        if block in self._b1:
            step = max(len(self._b2) / len(self._b1), 1.0)
            self.target = min(float(self.capacity), self.target + step)
            del self._b1[block]
        elif block in self._b2:
            step = max(len(self._b1) / len(self._b2), 1.0)
            self.target = max(0.0, self.target - step)
            del self._b2[block]
        (self._t2 if block in self._reused else self._t1)[block] = None
        self._bound_ghosts()

    def on_hit(self, block: int, now: int) -> None:
        self._reused.add(block)
        # The block manager takes a block out of the set before reporting its hit; for
        # other callers a hit on a member is ARC's case I: to the recent end of T2.
        if block in self._t1:
            del self._t1[block]
            self._t2[block] = None
        elif block in self._t2:
            self._t2.move_to_end(block)

    def on_removed(self, block: int) -> None:
        if block in self._t1:
            del self._t1[block]
        else:
            del self._t2[block]

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = []
        while len(victims) < num_blocks and (self._t1 or self._t2):
            # ARC's REPLACE: T1 gives the victim while it is over its target p.
            if self._t1 and (len(self._t1) > self.target or not self._t2):
                block, _ = self._t1.popitem(last=False)
                self._b1[block] = None
            else:
                block, _ = self._t2.popitem(last=False)
                self._b2[block] = None
            self._reused.forget(block)
            victims.append(block)
        self._bound_ghosts()
        return victims

    def _bound_ghosts(self) -> None:
        """The paper's directory bounds: |T1| + |B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c,
        dropping the oldest ghosts."""
        c = self.capacity
        while self._b1 and len(self._t1) + len(self._b1) > c:
            self._b1.popitem(last=False)
        while (self._b1 or self._b2) and len(self) + len(self._b1) + len(self._b2) > 2 * c:
            (self._b2 or self._b1).popitem(last=False)

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, block: object) -> bool:
        return block in self._t1 or block in self._t2

    def blocks(self) -> list[int]:
        return [*self._t1, *self._t2]
