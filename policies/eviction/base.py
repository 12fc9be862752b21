"""The eviction registry and the base class most policies build on.

``EVICTORS`` maps names to eviction policies; ``lru`` is the block manager's default
(backend/evictor.py). :class:`PriorityEvictor` is what to subclass for a policy that
ranks blocks by a number fixed while they sit in the evictable set.
"""

from __future__ import annotations

import heapq

from backend.evictor import EvictorBase, LeastRecentlyUsed
from policies.registry import Registry

EVICTORS: Registry = Registry("eviction")
EVICTORS.register("lru")(LeastRecentlyUsed)  # the block manager's default


class PriorityEvictor(EvictorBase):
    """Evicts the block of lowest ``priority(block, now, key)`` first; ties go to the
    block cached earliest. Subclass it and write ``priority``; override ``forget`` to
    drop per-block history when a block is evicted, and ``on_hit`` to learn from hits.

    The priority is computed once, when the block enters the evictable set, and must
    stay valid while it is there (a hit takes the block out before its statistics
    change). A min-heap with lazy deletion keeps every event O(log n) amortised and
    memory O(set size): removal only forgets the block's live entry, stale entries are
    skipped when popped, and the heap is rebuilt when they outnumber live ones.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._live: dict[int, int] = {}  # block -> arrival number of its valid entry
        self._arrivals = 0  # ties in priority break by arrival: older first (LRU)

    def priority(self, block: int, now: int, key: int) -> float:
        """Lower goes first. Called once as ``block`` becomes evictable."""
        raise NotImplementedError

    def forget(self, block: int) -> None:
        """Drop the history of an evicted block (nothing to drop by default)."""

    def on_cached(self, block: int, now: int, key: int) -> None:
        self._arrivals += 1
        self._live[block] = self._arrivals
        heapq.heappush(self._heap, (self.priority(block, now, key), self._arrivals, block))

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
                self.forget(block)
                victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: object) -> bool:
        return block in self._live

    def blocks(self) -> list[int]:
        return list(self._live)
