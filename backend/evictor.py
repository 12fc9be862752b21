"""The allocator's eviction plug-in point: the Evictor protocol and its default, LRU.

A prefix-caching block manager keeps the *evictable set* (blocks that hold a cached
prefix but no sequence references) in an Evictor, which decides what is reclaimed first
when the free list runs dry. Every event is O(1) or O(log n): an evictor is on the
allocator's hot path. Time is the block manager's logical clock (an operation counter),
never wall time, so a run is deterministic.

Other policies live in ``policies/eviction/`` (registered by name, as the simulator's
scenarios choose them); the backend only knows this protocol, :class:`EvictorBase` (the
class to subclass: it answers the events a policy may ignore) and the default.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol


class Evictor(Protocol):
    """The evictable set plus the order in which it is reclaimed.

    Event order for one block: ``on_cached`` (it enters the set), then either
    ``on_removed`` (a prefix hit takes it back into use; its history is kept) or being
    returned by ``pick_victims`` (its key is dropped; its history is forgotten).
    ``on_hit`` is called for every prefix hit on a block, in use or not, and
    ``on_lookup`` once per allocation with the prompt's keys, hit or miss.

    An evictor never mutates the block manager; it is told, and it answers.
    """

    def on_cached(self, block: int, now: int, key: int) -> None:
        """``block`` became cached-evictable (its last reference was released); ``key``
        is the prefix key it is published under (backend/blocks/prefix_hash.py)."""
        ...

    def on_hit(self, block: int, now: int) -> None:
        """A new request reused ``block`` through a prefix-cache hit."""
        ...

    def on_lookup(self, keys: Sequence[int], now: int) -> None:
        """An allocation looked up a prompt whose full blocks have ``keys`` (in order;
        the cached run of them was reused, the rest will be computed)."""
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


class EvictorBase:
    """What to subclass for a new eviction policy: ``on_hit`` and ``on_lookup`` do
    nothing unless overridden; ``on_cached``, ``on_removed``, ``pick_victims``,
    ``__len__``, ``__contains__`` and ``blocks`` must be written (see :class:`Evictor`
    for their contract). Build state from the events only; never read or change the
    block manager."""

    def on_hit(self, block: int, now: int) -> None:
        pass

    def on_lookup(self, keys: Sequence[int], now: int) -> None:
        pass


class LeastRecentlyUsed(EvictorBase):
    """Least recently released (or hit) block first; the default."""

    def __init__(self) -> None:
        # An OrderedDict is a hash map threaded on a doubly linked list: append at the
        # recent end, pop the oldest and delete a block from the middle (a cache hit)
        # are all O(1).
        self._order: OrderedDict[int, None] = OrderedDict()

    def on_cached(self, block: int, now: int, key: int) -> None:
        # Recency is renewed when a hitting request releases the block, so a hit itself
        # changes nothing (on_hit is EvictorBase's).
        self._order[block] = None

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
