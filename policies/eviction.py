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

``belady`` is the offline optimum, a yardstick rather than a policy a server could run:
``pagesim compare`` reports every run's prefix hit rate as a fraction of a belady run's.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from backend.evictor import Evictor, EvictorBase, LeastRecentlyUsed
from backend.prefix_hash import prefix_keys
from policies.registry import Registry
from policies.views import RequestInfo

EVICTORS: Registry = Registry("eviction")
EVICTORS.register("lru")(LeastRecentlyUsed)  # the block manager's default

__all__ = ["EVICTORS", "Evictor", "EvictorBase", "LeastRecentlyUsed", "PriorityEvictor"]


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


@EVICTORS.register("belady")
class Belady(EvictorBase):
    """Belady's MIN, the offline optimum: evict the cached block whose prefix the
    known request stream needs again farthest in the future (never, first).

    A request *uses* a key when its prompt holds that full block and a hit on it could
    be reused (not the block of the prompt's last token). Its uses are *consumed* when
    its whole prompt is allocated: ``on_lookup`` sees the prompt's keys, and the last of
    them names the request (keys chain over every earlier block). The next use of a key
    is then the earliest request not yet consumed that uses it. Requests are taken in
    arrival order, which is the admission order under FCFS; a resumed request's
    allocation (prompt + outputs) and first-chunk admission consume nothing, so their
    blocks look needed until the stream has moved past them. With several replicas each
    replica's copy counts every request (routing is not known offline), so it is exact
    for one replica and a close bound for several.

    Next uses only move later (a consumption advances them), so every change is pushed
    as a new heap entry and stale ones are skipped: O(log n) per event, O(prompt blocks)
    per allocation, memory O(stream keys).
    """

    def __init__(self, requests: Sequence[RequestInfo], block_size: int):
        self._never = len(requests)  # past every position: not used again
        self._uses: dict[int, deque[int]] = {}  # key -> positions of requests using it
        self._by_signature: dict[int, deque[int]] = {}  # prompt's last key -> positions
        self._chains: list[list[int]] = []
        for position, request in enumerate(requests):
            keys = prefix_keys(np.asarray(request.prompt), request.tenant, block_size)
            usable = keys[: (request.prompt_len - 1) // block_size]
            self._chains.append(usable)
            for key in usable:
                self._uses.setdefault(key, deque()).append(position)
            if keys:
                self._by_signature.setdefault(keys[-1], deque()).append(position)
        self._heap: list[tuple[int, int, int]] = []  # (-next use, cached at, block)
        self._live: dict[int, tuple[int, int]] = {}  # block -> (cached at, next use)
        self._key_of: dict[int, int] = {}  # evictable block -> its key
        self._block_of: dict[int, int] = {}  # key -> evictable block
        self._arrivals = 0

    def next_use(self, key: int) -> int:
        """Stream position of the next request that uses ``key`` (len(requests): none)."""
        uses = self._uses.get(key)
        return uses[0] if uses else self._never

    def _push(self, block: int, cached_at: int) -> None:
        use = self.next_use(self._key_of[block])
        self._live[block] = (cached_at, use)
        heapq.heappush(self._heap, (-use, cached_at, block))

    def on_cached(self, block: int, now: int, key: int) -> None:
        self._arrivals += 1
        self._key_of[block], self._block_of[key] = key, block
        self._push(block, self._arrivals)

    def on_lookup(self, keys: Sequence[int], now: int) -> None:
        waiting = self._by_signature.get(keys[-1]) if keys else None
        if not waiting:
            return  # not a stream prompt (a resumed request, a first chunk): no use ends
        position = waiting.popleft()
        for key in self._chains[position]:
            uses = self._uses[key]
            # Uses of a key are consumed in stream order except when equal prompts are
            # matched out of order; then the position is found further in.
            if uses[0] != position:
                uses.remove(position)
                continue  # its next use is unchanged
            uses.popleft()
            block = self._block_of.get(key)
            if block is not None:
                self._push(block, self._live[block][0])

    def on_removed(self, block: int) -> None:
        del self._live[block]
        del self._block_of[self._key_of.pop(block)]
        self._compact()

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [e for e in self._heap if self._live.get(e[2]) == (e[1], -e[0])]
            heapq.heapify(self._heap)

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims: list[int] = []
        while len(victims) < num_blocks and self._live:
            negative_use, cached_at, block = heapq.heappop(self._heap)
            if self._live.get(block) == (cached_at, -negative_use):
                del self._live[block]
                del self._block_of[self._key_of.pop(block)]
                victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, block: object) -> bool:
        return block in self._live

    def blocks(self) -> list[int]:
        return list(self._live)
