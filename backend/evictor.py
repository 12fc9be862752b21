"""The allocator's eviction plug-in point: the Evictor protocol and its default, LRU.

A prefix-caching block manager keeps the *evictable set* (blocks that hold a cached
prefix but no sequence references) in an Evictor, which decides what is reclaimed first
when the free list runs dry. Every event is O(1) or O(log n): an evictor is on the
allocator's hot path. Time is the block manager's logical clock (an operation counter),
never wall time, so a run is deterministic.

Other policies live in ``policies/eviction.py`` (registered by name, as the simulator's
scenarios choose them); the backend only knows this protocol and its default.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

import numpy as np


class Evictor(Protocol):
    """The evictable set plus the order in which it is reclaimed.

    Event order for one block: ``on_cached`` (it enters the set), then either
    ``on_removed`` (a prefix hit takes it back into use; its history is kept) or being
    returned by ``pick_victims`` (its key is dropped; its history is forgotten).
    ``on_hit`` is called for every prefix hit on a block, in use or not.
    """

    def on_cached(self, block: int, now: int) -> None:
        """``block`` became cached-evictable (its last reference was released)."""
        ...

    def on_hit(self, block: int, now: int) -> None:
        """A new request reused ``block`` through a prefix-cache hit."""
        ...

    def on_removed(self, block: int) -> None:
        """``block`` left the evictable set because a hit took it back (O(1))."""
        ...

    def pick_victims(self, num_blocks: int) -> list[int]:
        """Remove and return up to ``num_blocks`` blocks, first victim first."""
        ...

    def __len__(self) -> int: ...

    def __contains__(self, block: object) -> bool: ...

    def blocks(self) -> list[int]:
        """The evictable set (any order); for invariant checks."""
        ...


class LeastRecentlyUsed:
    """Least recently released (or hit) block first; the default."""

    def __init__(self, rng: np.random.Generator | None = None):
        # An OrderedDict is a hash map threaded on a doubly linked list: append at the
        # recent end, pop the oldest and delete a block from the middle (a cache hit)
        # are all O(1).
        self._order: OrderedDict[int, None] = OrderedDict()

    def on_cached(self, block: int, now: int) -> None:
        self._order[block] = None

    def on_hit(self, block: int, now: int) -> None:
        pass  # recency is renewed when the hitting request releases the block

    def on_removed(self, block: int) -> None:
        del self._order[block]

    def pick_victims(self, num_blocks: int) -> list[int]:
        count = min(num_blocks, len(self._order))
        return [self._order.popitem(last=False)[0] for _ in range(count)]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block: object) -> bool:
        return block in self._order

    def blocks(self) -> list[int]:
        return list(self._order)
