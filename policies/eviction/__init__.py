"""Prefix-cache eviction policies: which cached-evictable block is reclaimed first.

A policy owns the *evictable set*: blocks that hold a cached prefix (they have a hash
key) but no sequence references. The block manager tells it what happens to blocks and
asks it for victims when the free list runs dry. Every event is O(1) or O(log n): a
policy is on the allocator's hot path.

Time is the block manager's logical clock (an operation counter), never wall time, so a
run is deterministic.

A new policy subclasses :class:`PriorityEvictor` (lowest priority goes first; write
``priority`` and, if it keeps per-block history, ``forget``) or, for another structure,
``backend.evictor.EvictorBase``. Like every policy it is built by
``policies.context.build_policy``: constructor parameters named after context fields
(``rng``, ``num_blocks``, ``block_size``, ``requests``, ...) come from the run, the rest
from ``eviction.params``.

The policies: ``lru`` (the default, backend/evictor.py); ``fifo``, ``lfu``,
``reuse-weighted`` and ``random`` (:mod:`.classic`); ``slru`` and ``arc``
(:mod:`.segmented`); ``belady`` (:mod:`.belady`), the offline optimum, a yardstick rather
than a policy a server could run:
``pagesim compare`` reports every run's prefix hit rate as a fraction of a belady run's.
"""

from __future__ import annotations

from backend.evictor import Evictor, EvictorBase, LeastRecentlyUsed
from policies.eviction.base import EVICTORS, PriorityEvictor
from policies.eviction.belady import Belady
from policies.eviction.classic import (
    FirstInFirstOut,
    LeastFrequentlyUsed,
    RandomEviction,
    ReuseWeighted,
)
from policies.eviction.segmented import AdaptiveReplacement, SegmentedLRU

__all__ = [
    "EVICTORS",
    "AdaptiveReplacement",
    "Belady",
    "Evictor",
    "EvictorBase",
    "FirstInFirstOut",
    "LeastFrequentlyUsed",
    "LeastRecentlyUsed",
    "PriorityEvictor",
    "RandomEviction",
    "ReuseWeighted",
    "SegmentedLRU",
]
