"""Decode stretches on the paged block manager (see backend/stretch.py): ``k`` decode
steps of one batch in a handful of numpy operations over a ``(k, batch)`` grid, with a
Python loop only over the blocks the stretch takes and the steps that fill blocks."""

from __future__ import annotations

import numpy as np

from backend.base import InvalidRequest, as_tokens
from backend.blocks.block_pool import BlockPool
from backend.blocks.prefix_index import PrefixIndex
from backend.blocks.sequences import SequenceRegistry


class Stretches:
    """Mixin of :class:`backend.blocks.BlockManager`: ``plain_decode_steps`` and
    ``append_steps`` over the manager's pool, index and registry."""

    block_size: int
    enable_prefix_caching: bool
    slots: np.ndarray
    _pool: BlockPool
    _index: PrefixIndex
    _seqs: SequenceRegistry

    def plain_decode_steps(self, seq_ids: np.ndarray, limit: int) -> int:
        """See backend/stretch.py. 0 when a sequence's partly filled last block is
        shared (its next write copies)."""
        seqs = np.asarray(seq_ids, dtype=np.int64)
        if limit <= 0 or not seqs.size:
            return max(int(limit), 0)
        held = self._seqs.num_tokens[seqs]
        size = self.block_size
        if self._pool.num_shared:
            last = self._seqs.last_block[seqs]
            if ((held % size != 0) & (self._pool.refcount[last] > 1)).any():
                return 0
        first = -held % size  # the step (0-based) of each sequence's first new block
        free = len(self._pool.free)

        def taken(steps: int) -> int:
            return int(np.maximum((steps - 1 - first) // size + 1, 0).sum())

        if taken(limit) <= free:
            return int(limit)
        low, high = 0, int(limit)  # taken(low) <= free < taken(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if taken(mid) <= free else (low, mid)
        return low

    def append_steps(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> dict[str, np.ndarray]:
        """See backend/stretch.py. Raises InvalidRequest for a stretch that would copy
        or evict (ask ``plain_decode_steps`` first), or for bad ids or tokens."""
        registry = self._seqs
        grid = as_tokens(np.asarray(token_ids).reshape(-1), allow_empty=True)
        steps = int(np.shape(token_ids)[0]) if np.ndim(token_ids) == 2 else -1
        seqs, _ = registry.check_batch(seq_ids, np.zeros(np.shape(seq_ids), np.int32))
        if steps < 0 or grid.shape[0] != steps * seqs.shape[0]:
            raise InvalidRequest("append_steps: token_ids must be (steps, len(seq_ids))")
        if self.plain_decode_steps(seqs, steps) < steps:
            raise InvalidRequest("append_steps: the stretch needs copy-on-write or eviction")
        return self.append_steps_trusted(seqs, grid.reshape(steps, seqs.shape[0]))

    def append_steps_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """``append_steps`` for a caller that guarantees its input (the engine): distinct
        on-device int64 ids, an int32 ``(steps, len(seqs))`` grid within what
        ``plain_decode_steps`` granted. Unchecked: bad input corrupts the state."""
        registry, pool, size = self._seqs, self._pool, self.block_size
        steps = tokens.shape[0]
        held = registry.num_tokens[seqs]
        used, cached, free = pool.num_used, pool.num_cached, pool.num_free
        token_slots = pool.token_slots
        offsets = (held[None, :] + np.arange(steps)[:, None]) % size
        blocks = self._grow_tables(seqs, offsets == 0)
        self.slots[blocks, offsets] = tokens
        registry.num_tokens[seqs] = held + steps
        pool.token_slots += steps * seqs.shape[0]
        pool.clock += steps  # one tick per command, as step-by-step
        if self.enable_prefix_caching:
            self._seal_filled(seqs, blocks, offsets == size - 1)
        return self._usage_by_step(offsets == 0, used, cached, free, token_slots, seqs.shape[0])

    def _grow_tables(self, seqs: np.ndarray, crossing: np.ndarray) -> np.ndarray:
        """Give every sequence a new block at each step where it crosses a boundary, in
        (step, batch position) order as step-by-step takes them; returns the block each
        step writes to, per sequence."""
        registry = self._seqs
        steps, count = np.nonzero(crossing)  # row-major: step order, then batch order
        blocks = np.empty(crossing.shape, dtype=np.int64)
        blocks[:] = registry.last_block[seqs]
        if not steps.size:
            return blocks
        fresh = self._pool.take(steps.size)
        newest = np.full(crossing.shape, -1, dtype=np.int64)
        newest[steps, count] = np.arange(steps.size)
        np.maximum.accumulate(newest, axis=0, out=newest)  # the latest block taken so far
        grown = newest >= 0
        blocks[grown] = fresh[newest[grown]]
        tables = registry.tables
        for seq, block in zip(seqs[count].tolist(), fresh.tolist()):
            tables[seq].append(block)
        registry.last_block[seqs] = blocks[-1]
        return blocks

    def _seal_filled(self, seqs: np.ndarray, blocks: np.ndarray, filled: np.ndarray) -> None:
        """Publish the blocks each step filled, step by step (the order of the keys)."""
        for step in np.flatnonzero(filled.any(axis=1)).tolist():
            mask = filled[step]
            self._index.seal_step(seqs[mask], blocks[step, mask])

    def _usage_by_step(self, crossing, used, cached, free, token_slots, batch):
        size = self.block_size
        taken = np.cumsum(np.count_nonzero(crossing, axis=1))
        used_blocks = used + taken
        free_blocks = free - taken
        tokens = token_slots + batch * np.arange(1, crossing.shape[0] + 1)
        zeros = np.zeros(crossing.shape[0], dtype=np.int64)
        cached_blocks = zeros + cached
        return {
            "total_slots": zeros + self._pool.num_blocks * size,
            "token_slots": tokens,
            "reserved_slots": zeros,
            "internal_frag_slots": used_blocks * size - tokens,
            "external_frag_slots": zeros.copy(),
            "free_slots": (free_blocks + cached_blocks) * size,
            "cached_slots": cached_blocks * size,
            "used_blocks": used_blocks,
            "cached_blocks": cached_blocks,
            "free_blocks": free_blocks,
            "evictions": zeros + self._pool.num_evicted,  # a stretch never evicts
        }
