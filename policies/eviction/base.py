"""The eviction registry and the base class most policies build on.

``EVICTORS`` maps names to eviction policies; ``lru`` is the block manager's default
(backend/evictor.py). :class:`PriorityEvictor` is what to subclass for a policy that
ranks blocks by a number fixed while they sit in the evictable set.
"""

from __future__ import annotations

import heapq

from backend.evictor import EvictorBase, LeastRecentlyUsed
from policies.registry import Registry

EVICTORS: Registry = Registry(
    "eviction",
    field="eviction.policy",
    params_field="eviction.params",
    methods=(
        "on_cached",
        "on_hit",
        "on_lookup",
        "on_removed",
        "pick_victims",
        "blocks",
        "__len__",
        "__contains__",
    ),
)
EVICTORS.register("lru")(LeastRecentlyUsed)  # the block manager's default


class EvictionHeap:
    """The evictable set as a min-heap of ``(priority, tie, block)`` with lazy deletion:
    removing a block or giving it a new priority only updates its live entry, and stale
    entries are skipped when popped. The heap is rebuilt when stale entries outnumber
    live ones, so every operation is O(log n) amortised and memory O(set size)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._live: dict[int, tuple[float, int]] = {}  # block -> its valid (priority, tie)

    def push(self, block: int, priority: float, tie: int) -> None:
        """Add ``block``, or move it to a new priority."""
        self._live[block] = (priority, tie)
        heapq.heappush(self._heap, (priority, tie, block))

    def reprioritise(self, block: int, priority: float) -> None:
        """Move ``block`` (in the set) to a new priority, keeping its tie."""
        self.push(block, priority, self._live[block][1])

    def discard(self, block: int) -> None:
        del self._live[block]
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [e for e in self._heap if self._live.get(e[2]) == e[:2]]
            heapq.heapify(self._heap)

    def pop(self) -> int:
        """Remove and return the block of lowest (priority, tie); the set is not empty."""
        while True:
            priority, tie, block = heapq.heappop(self._heap)
            if self._live.get(block) == (priority, tie):
                del self._live[block]
                return block

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: object) -> bool:
        return block in self._live

    def blocks(self) -> list[int]:
        return list(self._live)


class PriorityEvictor(EvictorBase):
    """Evicts the block of lowest ``priority(block, now, key)`` first; ties go to the
    block cached earliest. Subclass it and write ``priority``; override ``forget`` to
    drop per-block history when a block is evicted, and ``on_hit`` to learn from hits.

    The priority is computed once, when the block enters the evictable set, and must
    stay valid while it is there (a hit takes the block out before its statistics
    change), unless the subclass moves the block with ``self._set.reprioritise`` (as
    ``belady`` does when the stream's next use of a key moves).
    """

    def __init__(self) -> None:
        self._set = EvictionHeap()
        self._arrivals = 0  # ties in priority break by arrival: older first (LRU)

    def priority(self, block: int, now: int, key: int) -> float:
        """Lower goes first. Called once as ``block`` becomes evictable."""
        raise NotImplementedError

    def forget(self, block: int) -> None:
        """Drop the history of an evicted block (nothing to drop by default)."""

    def on_cached(self, block: int, now: int, key: int) -> None:
        self._arrivals += 1
        self._set.push(block, self.priority(block, now, key), self._arrivals)

    def on_removed(self, block: int) -> None:
        self._set.discard(block)

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = [self._set.pop() for _ in range(min(num_blocks, len(self._set)))]
        for block in victims:
            self.forget(block)
        return victims

    def __len__(self) -> int:
        return len(self._set)

    def __contains__(self, block: object) -> bool:
        return block in self._set

    def blocks(self) -> list[int]:
        return self._set.blocks()
