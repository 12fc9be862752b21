"""Growth of paged sequences: ``append`` and the decode step ``append_batch``, with the
copy-on-write of a shared, partly filled last block.

The decode step is the simulator's hot path: a handful of vectorised operations over
the batch, with Python work only for the sequences that cross a block boundary, need
copy-on-write or fill a block.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from backend.base import as_tokens, check_count
from backend.blocks.block_pool import BlockPool
from backend.blocks.prefix_index import PrefixIndex
from backend.blocks.sequences import SequenceRegistry
from backend.transfer import Transfer


class _BatchNeed(NamedTuple):
    """What one decode step needs, gathered once per ``append_batch``."""

    held: np.ndarray  # tokens each sequence holds before the step
    slot: np.ndarray  # the slot each new token goes to within its block
    last: np.ndarray  # each sequence's last block before the step
    at_boundary: np.ndarray  # the last block is full: take a new one
    crossing: int  # how many sequences are at a boundary
    shared: np.ndarray | None  # last block partly filled and shared (None: none shared)
    needed: int  # blocks the whole step takes


class Growth:
    """Mixin of :class:`backend.blocks.BlockManager`: the growth commands and queries of
    the Allocator interface, over the manager's pool, index, registry and memory."""

    block_size: int
    enable_prefix_caching: bool
    slots: np.ndarray
    _pool: BlockPool
    _index: PrefixIndex
    _seqs: SequenceRegistry

    def _append_need(self, seq: int, num_new: int) -> tuple[int, bool]:
        """(blocks needed, whether the first write needs copy-on-write)."""
        held = int(self._seqs.num_tokens[seq])
        size = self.block_size
        room = -held % size  # free slots left in the last block
        grown = -(-(num_new - room) // size) if num_new > room else 0
        pool = self._pool
        cow = bool(room and num_new and pool.num_shared)  # a shared block exists at all
        cow = cow and pool.refcount[self._seqs.last_block[seq]] > 1
        return grown + int(cow), bool(cow)

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        seq = self._seqs.on_device(seq_id)
        needed, _ = self._append_need(seq, check_count("num_tokens", num_tokens, 0))
        return needed <= self._pool.available()

    def append(self, seq_id: int, token_ids) -> list[Transfer]:
        seqs, pool = self._seqs, self._pool
        seq = seqs.on_device(seq_id)
        tokens = as_tokens(token_ids, allow_empty=True)
        num_new = tokens.shape[0]
        needed, cow = self._append_need(seq, num_new)
        pool.require(needed)
        if num_new == 0:
            return []

        pool.clock += 1
        table = seqs.tables[seq]
        held = int(seqs.num_tokens[seq])
        moves = [self._copy_on_write(seq, table, held)] if cow else []
        grown = needed - int(cow)
        if grown:
            table.extend([pool.take_one()] if grown == 1 else pool.take(grown).tolist())
            seqs.last_block[seq] = table[-1]
        if num_new == 1:  # the decode case: one scalar write, no index arrays
            self.slots[table[-1], held % self.block_size] = tokens[0]
        else:
            self._write_at(table, held, tokens)
        pool.token_slots += num_new
        seqs.num_tokens[seq] = held + num_new
        first, end = held // self.block_size, (held + num_new) // self.block_size
        if end > first and self.enable_prefix_caching:  # blocks filled up: seal them
            self._index.seal_run(seq, table[first:end])
        return moves

    def _write_at(self, table: list[int], start: int, tokens: np.ndarray) -> None:
        """Write ``tokens`` at logical positions ``start...`` of a block table."""
        size = self.block_size
        end = start + tokens.shape[0]
        first, last = start // size, (end - 1) // size
        blocks = np.asarray(table[first : last + 1], dtype=np.int64)
        offsets = np.arange(start - first * size, end - first * size)
        self.slots[blocks[offsets // size], offsets % size] = tokens

    def _copy_on_write(self, seq: int, table: list[int], num_tokens: int) -> Transfer:
        """Give ``seq`` (holding ``num_tokens``) a private copy of its shared, partly
        filled last block (the caller checked a block is available)."""
        shared = table[-1]
        private = self._pool.unshare(shared, num_tokens % self.block_size)
        self.slots[private] = self.slots[shared]
        table[-1] = private
        self._seqs.last_block[seq] = private
        return Transfer(shared, private)

    def _batch_need(self, seqs: np.ndarray) -> _BatchNeed:
        held = self._seqs.num_tokens[seqs]
        size = self.block_size
        # int64 modulo is the slowest op of the step; a power-of-two size needs a mask.
        slot = held & (size - 1) if size & (size - 1) == 0 else held % size
        at_boundary = slot == 0
        last = self._seqs.last_block[seqs]
        crossing = int(np.count_nonzero(at_boundary))
        needed, shared = crossing, None
        # Without shared blocks (no fork, no live prefix hit) skip copy-on-write entirely.
        if self._pool.num_shared:
            refcount = self._pool.refcount
            shared = (refcount[last] > 1) & ~at_boundary
            if shared.any():
                # k batch members sharing a block with refcount r: each copies while
                # another table still points at the block, so min(k, r - 1) copies (the
                # last writer may keep the original when every sharer is in the batch).
                blocks, members = np.unique(last[shared], return_counts=True)
                needed += int(np.minimum(members, refcount[blocks] - 1).sum())
            else:
                shared = None
        return _BatchNeed(held, slot, last, at_boundary, crossing, shared, needed)

    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        seqs, _ = self._seqs.check_batch(seq_ids, np.zeros(np.shape(seq_ids), np.int32))
        return self._batch_need(seqs).needed

    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[Transfer]:
        return self.append_batch_trusted(*self._seqs.check_batch(seq_ids, token_ids))

    def append_batch_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> list[Transfer]:
        """``append_batch`` for a caller that guarantees its input (the engine, whose
        decode batch is its own running set): ``seqs`` distinct on-device ids (int64),
        ``tokens`` int32 ids in range, one each. Unchecked: bad input corrupts the state
        instead of raising. Raises OutOfBlocks (nothing changed) like append_batch."""
        if self._pool.num_shared:  # some block has two references: copy-on-write may be due
            return self._append_batch_sharing(seqs, tokens)
        if not seqs.shape[0]:
            return []
        # No block is shared, so no copy: each member writes into its own last block, or
        # into a fresh one where it is at a boundary. The step's common case: each array
        # is gathered once, patched in place for the members that cross, and the numpy
        # calls are the cheapest forms (method nonzero, in-place arithmetic, a flat write).
        registry, pool, size = self._seqs, self._pool, self.block_size
        num_tokens = registry.num_tokens
        held = num_tokens[seqs]
        # int64 modulo is the slowest op of the step; a power-of-two size needs a mask.
        slot = held & (size - 1) if size & (size - 1) == 0 else held % size
        last = registry.last_block[seqs]
        boundary = np.logical_not(slot).nonzero()[0]
        if boundary.shape[0]:
            pool.require(boundary.shape[0])
            self._grow_at_boundary(seqs[boundary], boundary, last)
        pool.clock += 1
        filled = (slot == size - 1).nonzero()[0] if self.enable_prefix_caching else None
        # the blocks this step fills, taken before ``last`` changes; sealed once written
        sealing = (seqs[filled], last[filled]) if filled is not None and filled.shape[0] else None
        last *= size  # ``last`` becomes the flat index of each member's slot, in place
        last += slot
        self.slots.ravel()[last] = tokens  # a view of the contiguous slots: a flat write
        held += 1
        num_tokens[seqs] = held
        pool.token_slots += seqs.shape[0]
        if sealing is not None:
            self._index.seal_step(*sealing)
        return []

    def _grow_at_boundary(self, crossing: np.ndarray, positions: np.ndarray, last) -> None:
        """Give each sequence of ``crossing`` (distinct, at a block boundary; the caller
        checked ``require``) a fresh last block; ``last[positions]``, the batch's gathered
        last blocks, follow."""
        registry = self._seqs
        fresh = self._pool.take(crossing.shape[0])
        tables = registry.tables
        for seq, block in zip(crossing.tolist(), fresh.tolist()):
            tables[seq].append(block)
        registry.last_block[crossing] = fresh
        last[positions] = fresh

    def _append_batch_sharing(self, seqs: np.ndarray, tokens: np.ndarray) -> list[Transfer]:
        """``append_batch_trusted`` while some block is shared: members whose partly
        filled last block is shared copy it first."""
        registry, pool = self._seqs, self._pool
        need = self._batch_need(seqs)
        pool.require(need.needed)
        if seqs.size == 0:
            return []

        pool.clock += 1
        moves: list[Transfer] = []
        if need.crossing:
            crossing = np.flatnonzero(need.at_boundary)
            self._grow_at_boundary(seqs[crossing], crossing, need.last)
        sharing = seqs[need.shared].tolist() if need.shared is not None else []
        for seq in sharing:
            table = registry.tables[seq]
            if pool.refcount[table[-1]] > 1:  # an earlier batch member may have copied
                moves.append(self._copy_on_write(seq, table, int(registry.num_tokens[seq])))
        # After the loops every batch member's last block is private, so the fancy
        # indices below are distinct and one vectorised write is exact.
        last = registry.last_block[seqs] if moves else need.last
        self.slots[last, need.slot] = tokens
        registry.num_tokens[seqs] = need.held + 1
        pool.token_slots += int(seqs.shape[0])
        if self.enable_prefix_caching:
            sealing = seqs[need.slot == self.block_size - 1]
            if sealing.size:
                self._index.seal_step(sealing, registry.last_block[sealing])
        return moves
