"""The pure-model paged block manager: block tables over a pool of device blocks, with
prefix caching, copy-on-write and swap, over a token-id "memory" that tests can read
back.

The manager composes four parts and keeps the block tables consistent across them:

* the block pool (backend/blocks/block_pool.py): free list, refcounts, eviction hand-off,
  token-slot accounting and peak;
* the prefix index (backend/blocks/prefix_index.py): published keys, key chains, hit checks;
* the sequence registry (sequences.py): per-sequence state, tables and id checks;
* the memories ``slots`` and ``cpu_slots``: the token id held in every slot.

Allocation, release and the queries live here; growth (``append``, the decode step)
in growth.py, decode stretches (several decode steps at once) in stretch.py and swap in
swap.py, as mixins over the same parts.
"""

from __future__ import annotations

import pickle

import numpy as np

from backend.base import Allocator, KVUsage, as_tokens, check_count
from backend.blocks.block_pool import BlockPool
from backend.blocks.freelist import FreeList
from backend.blocks.growth import Growth
from backend.blocks.prefix_index import PrefixCacheStats, PrefixIndex, check_salt
from backend.blocks.sequences import ON_DEVICE, SWAPPED, SequenceRegistry
from backend.blocks.stretch import Stretches
from backend.blocks.swap import Swap
from backend.evictor import Evictor, LeastRecentlyUsed
from backend.transfer import Transfer


class BlockManager(Growth, Stretches, Swap, Allocator):
    """Paged KV bookkeeping over ``num_blocks`` device blocks of ``block_size`` slots
    (see the module docstring and backend.base.Allocator for the contracts).
    Its constructor is an :class:`backend.base.AllocatorFactory`."""

    supports_prefix_caching = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        enable_prefix_caching: bool = False,
        evictor: Evictor | None = None,
    ):
        self.num_blocks = check_count("num_blocks", num_blocks, 1)
        self.block_size = check_count("block_size", block_size, 1)
        self.num_cpu_blocks = check_count("num_cpu_blocks", num_cpu_blocks, 0)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        # The "memory": the token id held in every slot.
        self.slots = np.zeros((self.num_blocks, self.block_size), np.int32)
        self.cpu_slots = np.zeros((self.num_cpu_blocks, self.block_size), np.int32)
        self._cpu_free = FreeList(self.num_cpu_blocks)
        self._index = PrefixIndex(self.slots, enabled=self.enable_prefix_caching)
        # Which cached block goes first is a policy (policies/eviction.py), passed in so
        # the backend imports nothing from policies/; LRU when none is given.
        evictor = evictor if evictor is not None else LeastRecentlyUsed()
        self._pool = BlockPool(self.num_blocks, self.block_size, evictor, self._index)
        self._seqs = SequenceRegistry()

    # -- public counters -----------------------------------------------------------------
    @property
    def reads_token_ids(self) -> bool:
        """Whether the token ids written here matter to this allocator: only prefix
        caching hashes them. A caller whose other readers ignore them too (a cost model)
        may write zeros instead of generating them."""
        return self.enable_prefix_caching

    @property
    def evictor(self) -> Evictor:
        return self._pool.evictor

    @property
    def num_free_blocks(self) -> int:
        return self._pool.num_free

    @property
    def num_cached_blocks(self) -> int:
        return self._pool.num_cached

    @property
    def num_used_blocks(self) -> int:
        return self._pool.num_used

    @property
    def peak_used_blocks(self) -> int:
        return self._pool.peak_used_blocks

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self._cpu_free)

    @property
    def prefix_cache_stats(self) -> PrefixCacheStats:
        return self._index.stats

    # -- allocation ---------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, token_ids, *, salt: int = 0, max_new_tokens: int = 0) -> bool:
        tokens = as_tokens(token_ids, allow_empty=False)
        _, hits = self._index.lookup(tokens, check_salt(salt))
        needed = self._blocks_for(tokens.shape[0]) - len(hits)
        return needed <= self._pool.available(self._pool.revived(hits))

    def allocate(
        self,
        seq_id,
        token_ids,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
    ) -> int:
        seq = self._seqs.new_id(seq_id)
        tokens = as_tokens(token_ids, allow_empty=False)
        return self.allocate_trusted(seq, tokens, check_salt(salt), computed_tokens)

    def allocate_trusted(
        self, seq: int, tokens: np.ndarray, salt: int, computed_tokens: int | None = None
    ) -> int:
        """``allocate`` for a caller that guarantees its input (the engine, which numbers
        its sequences itself): ``seq`` a new non-negative int id, ``tokens`` a non-empty
        1-D int32 array, ``salt`` an int in 64 bits. Unchecked: bad input corrupts the
        state instead of raising. Raises OutOfBlocks (nothing changed) like allocate."""
        if not self.enable_prefix_caching:
            return self._allocate_fresh(seq, tokens)
        keys, hits = self._index.lookup(tokens, salt)
        pool = self._pool
        # Hit blocks that are cached-evictable must not be counted as available: this
        # very allocation takes them back.
        needed = self._blocks_for(tokens.shape[0]) - len(hits)
        pool.require(needed, not_evictable=pool.revived(hits))

        pool.clock += 1
        if keys:
            pool.evictor.on_lookup(keys, pool.clock)
        if hits:
            pool.reuse(hits)
        hit_tokens = len(hits) * self.block_size
        # (many blocks are written through their id array: a list index costs a conversion)
        taken = [pool.take_one()] if needed == 1 else pool.take(needed)
        self._write_fresh(taken, tokens[hit_tokens:])
        fresh = taken if needed == 1 else taken.tolist()
        pool.token_slots += int(tokens.shape[0]) - hit_tokens  # hits were counted in reuse
        table = hits + fresh
        self._index.add_sequence(seq, salt, keys, table, len(hits), computed_tokens)
        self._seqs.add(seq, table, tokens.shape[0])
        self._index.count_lookup(int(tokens.shape[0]), hit_tokens)
        return hit_tokens

    def _allocate_fresh(self, seq: int, tokens: np.ndarray) -> int:
        """``allocate_trusted`` without a prefix cache: no keys to hash, no hits to look
        for, nothing to publish or count (vLLM hashes nothing with caching off either);
        every block is taken fresh. Returns 0 (no token was cached)."""
        pool, num_tokens = self._pool, tokens.shape[0]
        needed = -(-num_tokens // self.block_size)
        pool.require(needed)
        pool.clock += 1
        taken = pool.take(needed)
        self._write_fresh(taken, tokens)
        pool.token_slots += num_tokens
        self._seqs.add(seq, taken.tolist(), num_tokens)
        return 0

    def _write_fresh(self, blocks: list[int] | np.ndarray, tokens: np.ndarray) -> None:
        """Write ``tokens`` from slot 0 of ``blocks`` (fresh, empty blocks)."""
        size = self.block_size
        full, rest = divmod(tokens.shape[0], size)
        if full:
            self.slots[blocks[:full]] = tokens[: full * size].reshape(full, size)
        if rest:
            self.slots[blocks[full], :rest] = tokens[full * size :]

    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """The KV of ``seq_id``'s first ``num_tokens`` tokens is computed (or scheduled
        this step): publish its full blocks among them in the prefix cache."""
        seq = self._seqs.live(seq_id)
        if self._seqs.state[seq] == ON_DEVICE:
            ready = check_count("num_tokens", num_tokens, 0) // self.block_size
            if self.enable_prefix_caching:  # (else there is nothing to publish)
                self._index.publish_through(seq, ready, self._seqs.tables[seq])

    def unpublish_last_block(self, seq_id: int) -> None:
        """Withdraw ``seq_id``'s last block from the prefix cache if it is full and this
        sequence published it: an engine that registers a block only once the token
        filling it is known (vLLM's async scheduling) never registered it when the
        sequence is preempted first. Call just before freeing the sequence."""
        seq = self._seqs.live(seq_id)
        held = int(self._seqs.num_tokens[seq])
        if self.enable_prefix_caching and held and held % self.block_size == 0:
            last = self._seqs.tables[seq][-1]
            # Only a block this sequence alone holds (a decode's own); it is freed next,
            # so its published count need not change.
            if self._index.is_keyed(last) and self._pool.refcount[last] == 1:
                self._index.drop([last])

    def cached_prefix_tokens(self, token_ids, *, salt: int = 0) -> int:
        if not self.enable_prefix_caching:
            return 0
        tokens = as_tokens(token_ids, allow_empty=False)
        return len(self._index.lookup(tokens, check_salt(salt))[1]) * self.block_size

    # -- sharing and release ------------------------------------------------------------------
    def fork(self, parent_id: int, child_id: int) -> list[Transfer]:
        parent = self._seqs.on_device(parent_id)
        child = self._seqs.new_id(child_id)
        self._pool.clock += 1
        table = list(self._seqs.tables[parent])
        self._pool.add_references(table)  # a table holds each block once, so no duplicates
        if self.enable_prefix_caching:  # (a disabled index registers no sequence)
            self._index.fork(parent, child)
        self._seqs.add(child, table, int(self._seqs.num_tokens[parent]))
        return []

    def free(self, seq_id: int) -> None:
        seq = self._seqs.live(seq_id)
        self._pool.clock += 1
        swapped = self._seqs.state[seq] == SWAPPED
        num_tokens = int(self._seqs.num_tokens[seq])
        table = self._seqs.remove(seq)
        if swapped:
            self._cpu_free.put(table)
        else:
            self._pool.release(table, num_tokens)
        if self.enable_prefix_caching:
            self._index.remove(seq)

    def evict(self, num_blocks: int = 1) -> list[int]:
        """Reclaim up to ``num_blocks`` cached-evictable blocks, in the eviction policy's
        order: their keys are dropped and they go to the back of the free list.
        Returns their ids. Raises InvalidRequest for a negative count."""
        count = check_count("num_blocks", num_blocks, 0)
        self._pool.clock += 1
        return self._pool.evict(count)

    # -- queries ---------------------------------------------------------------------------------
    def is_swapped(self, seq_id: int) -> bool:
        return self._seqs.state[self._seqs.live(seq_id)] == SWAPPED

    def num_tokens(self, seq_id: int) -> int:
        return int(self._seqs.num_tokens[self._seqs.live(seq_id)])

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._seqs.tables[self._seqs.live(seq_id)])

    def held_blocks(self, seq_id: int) -> int:
        seq = self._seqs.live(seq_id)
        return len(self._seqs.tables[seq]) if self._seqs.state[seq] == ON_DEVICE else 0

    def read_tokens(self, seq_id: int) -> np.ndarray:
        seq = self._seqs.live(seq_id)
        pool = self.cpu_slots if self._seqs.state[seq] == SWAPPED else self.slots
        return pool[self._seqs.tables[seq]].reshape(-1)[: self._seqs.num_tokens[seq]].copy()

    def available_blocks(self) -> int:
        return self._pool.available()

    def usage(self, next_request_tokens: int = 0) -> KVUsage:
        size, pool = self.block_size, self._pool
        used, cached, free = pool.num_used, pool.num_cached, pool.num_free
        return KVUsage(
            total_slots=self.num_blocks * size,
            token_slots=pool.token_slots,
            reserved_slots=0,
            internal_frag_slots=used * size - pool.token_slots,
            external_frag_slots=0,  # any free block fits any request's next block
            free_slots=(free + cached) * size,
            cached_slots=cached * size,
            used_blocks=used,
            cached_blocks=cached,
            free_blocks=free,
            evictions=pool.num_evicted,
        )

    def snapshot(self) -> bytes:
        """Every piece of mutable state, serialised, for bit-for-bit comparisons in
        tests (a refused command must leave it unchanged). The hash memo, the checked
        batch and the epoch are excluded: pure caches."""
        state = (
            self.slots,
            self.cpu_slots,
            list(self._cpu_free),
            self._pool.snapshot_state(),
            self._index.snapshot_state(),
            self._seqs.snapshot_state(),
        )
        return pickle.dumps(state)

    # -- invariants ------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Verify the whole state (O(pool + tokens)); AssertionError names the break."""
        on_device, swapped = self._seqs.check_invariants()
        references, fill = self._check_tables(on_device)
        self._pool.check_invariants(references, int(fill.sum()))
        self._index.check_invariants(self._seqs.tables, on_device, self.read_tokens)
        self._check_cpu_pool(swapped)
        # (usage()'s split sums to the pool by construction; its parts are checked by
        # the pool: token slots against the tables, used blocks against the partition.)

    def _check_tables(self, on_device: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Assert the device tables are well formed; returns the references to each
        block and the tokens each holds, as the tables say."""
        size = self.block_size
        references = np.zeros(self.num_blocks, np.int64)
        fill = np.zeros(self.num_blocks, np.int64)
        for seq in on_device:
            table, held = self._seqs.tables[seq], int(self._seqs.num_tokens[seq])
            assert held > 0 and len(table) == self._blocks_for(held), f"table of {seq}"
            assert len(set(table)) == len(table), f"sequence {seq} holds a block twice"
            assert self._seqs.last_block[seq] == table[-1], f"last block of {seq}"
            np.add.at(references, table, 1)
            for index, block in enumerate(table):
                expected = min(size, held - index * size)
                assert fill[block] in (0, expected), f"sharers disagree on block {block}"
                fill[block] = expected
        for block in self._index.keyed_blocks():  # keys are given to full blocks only
            assert fill[block] in (0, size), f"keyed block {block} is not full"
        return references, fill
