"""The device's physical blocks: free, cached-evictable or in use, and their references.

Every physical block is in exactly one state:

* free: on the free list, no references, no prefix key;
* in use: referenced by at least one block table (refcount = number of table entries;
  the prefix cache holds no pin);
* cached-evictable: no references, but it still holds a full block whose prefix key is
  published, so a later prompt can reuse it; the eviction policy reclaims it (the
  prefix index drops its key) when the free list is empty and a block is needed.

The pool also counts the tokens held in in-use blocks (a shared block counts once), the
peak of in-use blocks and the cached blocks ever evicted, and keeps the logical clock the
eviction policy sees.
"""

from __future__ import annotations

import numpy as np

from backend.base import OutOfBlocks
from backend.blocks.freelist import FreeList
from backend.blocks.prefix_index import PrefixIndex
from backend.evictor import Evictor


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` slots. Which cached block is evicted first
    is the ``evictor``'s choice; the ``index`` is told which blocks lose their keys and
    says which released blocks stay cached.

    The block manager reads ``refcount`` and ``num_shared`` on its hot path, adds the
    tokens it writes to ``token_slots`` and ticks ``clock`` once per command; everything
    else changes only through methods.
    """

    def __init__(self, num_blocks: int, block_size: int, evictor: Evictor, index: PrefixIndex):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.evictor = evictor
        self._index = index
        self.refcount = np.zeros(num_blocks, np.int64)
        # FIFO: a block freed long ago is reused first (deterministic ids).
        self.free = FreeList(num_blocks)
        # Blocks with refcount > 1. While it is 0 (no fork, no prefix hit alive) every
        # in-use block has exactly one reference: release and the decode step skip the
        # sharing bookkeeping.
        self.num_shared = 0
        self.token_slots = 0  # tokens held in in-use blocks (a shared block counts once)
        self.peak_used_blocks = 0
        self.num_evicted = 0  # cached blocks reclaimed by the eviction policy, ever
        self.clock = 0  # logical time for the eviction policy: one tick per command

    # -- counters --------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_cached(self) -> int:
        return len(self.evictor)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free) - len(self.evictor)

    def available(self, not_evictable: int = 0) -> int:
        """Blocks a command could take: free ones, then cached-evictable ones (except
        ``not_evictable`` of them that the command itself reuses)."""
        return len(self.free) + len(self.evictor) - not_evictable

    def require(self, needed: int, *, not_evictable: int = 0) -> None:
        """Raise OutOfBlocks unless ``needed`` blocks can be taken (see ``available``)."""
        available = len(self.free) + len(self.evictor) - not_evictable
        if needed > available:
            raise OutOfBlocks(
                f"need {needed} blocks, {available} free or evictable",
                needed=needed,
                available=available,
            )

    def revived(self, hits: list[int]) -> int:
        """How many of the blocks ``hits`` are cached-evictable (and would leave the
        evictable set if reused)."""
        return int((self.refcount[hits] == 0).sum()) if hits else 0

    # -- taking and releasing --------------------------------------------------------------
    def take(self, count: int) -> np.ndarray:
        """Take ``count`` blocks (the caller checked ``require``): the free list first,
        then eviction victims, whose keys the index drops. Each comes back with refcount
        1 and no key."""
        free = self.free
        if count <= len(free):  # the common case: no eviction
            blocks = free.take(count)
        else:
            blocks = free.take(len(free))
            victims = self.evictor.pick_victims(count - blocks.shape[0])
            self._index.drop(victims)
            self.num_evicted += len(victims)
            blocks = np.concatenate((blocks, np.asarray(victims, dtype=np.int64)))
        self.refcount[blocks] = 1
        self._update_peak()
        return blocks

    def take_one(self) -> int:
        """``take(1)`` without arrays, for the single-block paths."""
        if not self.free:
            return int(self.take(1)[0])
        block = self.free.take_one()
        self.refcount[block] = 1
        self._update_peak()
        return block

    def _update_peak(self) -> None:
        used = self.num_blocks - len(self.free) - len(self.evictor)
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used

    def release(self, table: list[int], num_tokens: int) -> None:
        """Drop one reference to each block of a table holding ``num_tokens`` tokens.

        Released in reverse order so that, under an LRU-like policy, a sequence's tail
        (the least shareable part) is evicted first. A block left unreferenced becomes
        cached-evictable if it is published, else free. Vectorised: a table holds each
        block once, so the fancy-indexed decrement is exact."""
        if not table:
            return
        blocks = np.array(table[::-1], dtype=np.int64)
        if not self.num_shared:  # every block has one reference: all of them go
            self.refcount[blocks] = 0
            self.token_slots -= num_tokens
            released = blocks
        else:
            self.refcount[blocks] -= 1
            left = self.refcount[blocks]
            self.num_shared -= int(np.count_nonzero(left == 1))
            dropped = left == 0
            size = self.block_size
            # Block i of a table holds min(size, num_tokens - i * size) tokens.
            fills = np.minimum(size, num_tokens - np.arange(len(table) - 1, -1, -1) * size)
            self.token_slots -= int(fills[dropped].sum())
            released = blocks[dropped]
        if not self._index:  # nothing can be cached: straight to the free list
            self.free.put(released)
            return
        cached, keys, uncached = self._index.partition(released.tolist())
        on_cached, now = self.evictor.on_cached, self.clock
        for block, key in zip(cached, keys):
            on_cached(block, now, key)
        self.free.put(uncached)

    def evict(self, count: int) -> list[int]:
        """Reclaim up to ``count`` cached-evictable blocks in the eviction policy's order:
        the index drops their keys and they go to the back of the free list."""
        victims = self.evictor.pick_victims(count)
        self._index.drop(victims)
        self.num_evicted += len(victims)
        self.free.put(victims)
        return victims

    # -- sharing ---------------------------------------------------------------------------
    def admit(self, needed: int, keys: list[int], hits: list[int]) -> None:
        """An allocation begins: raise OutOfBlocks (nothing changed) unless ``needed``
        fresh blocks fit beside the cached ``hits`` it takes back (those cached-evictable
        are not available to it), then tick the clock, show the eviction policy the
        lookup of the prompt's ``keys`` and take back ``hits``."""
        self.require(needed, not_evictable=self.revived(hits))
        self.clock += 1
        if keys:
            self.evictor.on_lookup(keys, self.clock)
        if hits:
            self.reuse(hits)

    def reuse(self, hits: list[int]) -> None:
        """Take one more reference to each cached block found by a prefix hit; those
        that were cached-evictable leave the evictable set (their tokens count again)."""
        blocks = np.array(hits, dtype=np.int64)
        revived = blocks[self.refcount[blocks] == 0].tolist()
        for block in revived:
            self.evictor.on_removed(block)  # O(1): out of the evictable set, back in use
        self.token_slots += len(revived) * self.block_size  # a cached block is full
        self.add_references(blocks)
        if revived:  # back in use without being taken: take's peak update missed them
            self._update_peak()
        for block in hits:
            self.evictor.on_hit(block, self.clock)

    def add_references(self, blocks: np.ndarray | list[int]) -> None:
        """One more reference to each of ``blocks`` (distinct, so the fancy increment is
        exact), keeping the count of shared blocks."""
        self.refcount[blocks] += 1
        self.num_shared += int(np.count_nonzero(self.refcount[blocks] == 2))

    def unshare(self, shared: int, filled: int) -> int:
        """Copy-on-write of a shared block holding ``filled`` tokens: take a private
        block for the writer and drop the writer's reference to ``shared`` (another table
        keeps it). Returns the private block; the caller copies the slots and checked
        ``require``. The copied tokens now live in two in-use blocks."""
        private = self.take_one()
        self.token_slots += filled
        self.refcount[shared] -= 1
        if self.refcount[shared] == 1:
            self.num_shared -= 1
        return private

    # -- state -----------------------------------------------------------------------------
    def snapshot_state(self) -> tuple:
        """Every piece of mutable state, for snapshots."""
        return (
            self.refcount,
            self.num_shared,
            list(self.free),
            self.evictor,
            self.clock,
            self.token_slots,
            self.peak_used_blocks,
            self.num_evicted,
        )

    def check_invariants(self, references: np.ndarray, token_slots: int) -> None:
        """Verify the partition into free / cached / in-use blocks against the block
        tables' ``references`` per block and the ``token_slots`` they hold. Raises
        AssertionError naming the break."""
        free = list(self.free)
        cached = self.evictor.blocks()
        assert len(set(free)) == len(free), "a block is on the free list twice"
        assert len(cached) == len(self.evictor) == len(set(cached))
        assert not set(free) & set(cached), "a block is both free and cached-evictable"
        for block in free:
            assert self.refcount[block] == 0, f"free block {block} is referenced"
            assert not self._index.is_keyed(block), f"free block {block} has a key"
        for block in cached:
            assert self.refcount[block] == 0, f"cached block {block} is referenced"
            assert self._index.is_keyed(block), f"cached block {block} has no key"
        idle = set(free) | set(cached)
        in_use = [b for b in range(self.num_blocks) if b not in idle]
        assert all(self.refcount[b] > 0 for b in in_use), "an unreferenced block is lost"
        assert np.array_equal(references, self.refcount), "refcount != table references"
        assert token_slots == self.token_slots, "token slot counter"
        assert self.peak_used_blocks >= self.num_used
        shared = int(np.count_nonzero(self.refcount > 1))
        assert self.num_shared == shared, f"shared-block count {self.num_shared} != {shared}"
