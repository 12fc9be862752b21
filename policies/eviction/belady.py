"""Belady's MIN over a known request stream: the prefix cache's offline optimum."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from backend.blocks.prefix_hash import prefix_keys
from policies.eviction.base import EVICTORS, PriorityEvictor
from policies.views import RequestInfo


@EVICTORS.register("belady")
class Belady(PriorityEvictor):
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
        super().__init__()  # the heap: priority -next use, ties by when it was cached
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
        self._key_of: dict[int, int] = {}  # evictable block -> its key
        # key -> its evictable blocks (copies of one prefix each keep theirs)
        self._blocks_of: dict[int, set[int]] = {}

    def next_use(self, key: int) -> int:
        """Stream position of the next request that uses ``key`` (len(requests): none)."""
        uses = self._uses.get(key)
        return uses[0] if uses else self._never

    def priority(self, block: int, now: int, key: int) -> float:
        return -self.next_use(key)

    def on_cached(self, block: int, now: int, key: int) -> None:
        self._key_of[block] = key
        self._blocks_of.setdefault(key, set()).add(block)
        super().on_cached(block, now, key)

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
            for block in sorted(self._blocks_of.get(key, ())):
                self._set.reprioritise(block, -self.next_use(key))

    def on_removed(self, block: int) -> None:
        super().on_removed(block)
        self.forget(block)

    def forget(self, block: int) -> None:
        key = self._key_of.pop(block)
        blocks = self._blocks_of[key]
        blocks.discard(block)
        if not blocks:
            del self._blocks_of[key]
