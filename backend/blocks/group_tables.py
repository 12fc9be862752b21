"""One KV cache group's block tables over the shared block pool, and the block
arithmetic of growing them, one token, a prompt chunk, a decode step of a batch
(``append_batch``) or several decode steps at once (a stretch, backend/stretch.py), with
the copy-on-write of a shared, partly filled last block: what every kind of group shares.

The kinds are siblings below it, each answering the few questions in which they differ
(:class:`GroupTables`' abstract methods): how many blocks a sequence holds at most, what
its table has released, how a prefix hit is found in it, and what else its state holds.
Full attention (full_attention.py) keeps every block; a sliding window
(sliding_window.py) frees the blocks wholly out of its window. A state-space group would
be one more sibling. The coordinator (manager.py, kv_groups.py) owns what all groups
share: the sequences and their token counts, the pool and the CPU pool.

The decode step is the simulator's hot path: a handful of vectorised operations over the
batch, with Python work only for the sequences that cross a block boundary, need
copy-on-write or fill a block. Methods here never change a sequence's token count (the
coordinator does, once every group has grown); they do count the token slots they write.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from backend.base import grow_arrays
from backend.blocks.block_pool import BlockPool
from backend.blocks.prefix_index import PrefixIndex
from backend.transfer import Transfer


class BatchNeed(NamedTuple):
    """What one decode step needs, gathered once per ``append_batch``."""

    held: np.ndarray  # tokens each sequence holds before the step
    slot: np.ndarray  # the slot each new token goes to within its block
    last: np.ndarray  # each sequence's last block before the step
    at_boundary: np.ndarray  # the last block is full: take a new one
    crossing: int  # how many sequences are at a boundary
    shared: np.ndarray | None  # last block partly filled and shared (None: none shared)
    needed: int  # blocks the whole step takes


class GroupTables(ABC):
    """The block tables of one KV cache group. ``tables`` (sequence id -> block ids:
    device blocks, or CPU blocks while the sequence is swapped out) and ``last_block``
    (its newest device block, an array indexed by sequence id) are this group's;
    ``slots`` is the token memory of the pool's blocks. Growth takes its blocks from
    ``pool`` and publishes filled blocks in ``index`` when prefix caching is on."""

    #: Whether the group gives blocks back as a sequence grows (a window's, behind it).
    releases_behind: bool

    def __init__(
        self, pool: BlockPool, index: PrefixIndex, slots: np.ndarray, *, prefix_caching: bool
    ):
        self.pool = pool
        self.index = index
        self.slots = slots
        self.block_size = pool.block_size
        self.prefix_caching = prefix_caching
        self.tables: dict[int, list[int]] = {}
        self.last_block = np.zeros(64, np.int64)

    # -- tables ----------------------------------------------------------------------------
    def blocks_for(self, num_tokens: int) -> int:
        """Blocks a table holding ``num_tokens`` tokens has."""
        return -(-num_tokens // self.block_size)

    @abstractmethod
    def most_held(self, num_tokens: int, in_flight: int | None) -> int:
        """The most blocks a sequence of ``num_tokens`` tokens holds at once in this group
        when it computes at most ``in_flight`` tokens at a time (None: all at once)."""

    @abstractmethod
    def cached_run(
        self, keys: list[int], salt: int, tokens: np.ndarray, limit: int, known=None
    ) -> list[int]:
        """The longest prefix hit (at most ``limit`` blocks) of a prompt (``tokens``, its
        full blocks' ``keys`` under ``salt``) this group serves, as block ids; ``known``
        is this group's own hit run when the caller already looked it up. No mutation."""

    @abstractmethod
    def first_needed(self, end: int) -> int:
        """The first table position a sequence whose first ``end`` blocks are computed
        reads again (those before it its next token never reads): where a prefix hit or
        loaded KV ending at ``end`` starts being needed."""

    @abstractmethod
    def first_held(self, seq: int) -> int:
        """The index of the first block ``seq``'s table still holds."""

    @abstractmethod
    def check_released(self, seq: int, table: list[int], held: int) -> None:
        """Assert what ``seq``'s table (holding ``held`` tokens) released is allowed."""

    def kind_state(self) -> tuple:
        """What the kind keeps beyond the tables, for a snapshot of the allocator."""
        return ()

    def add(self, seq: int, table: list[int]) -> None:
        """Give new sequence ``seq`` its device ``table`` (non-empty)."""
        if seq >= self.last_block.shape[0]:  # (ids are dense: the array rarely grows)
            grow_arrays(self, ("last_block",), seq + 1)
        self.tables[seq] = table
        self.last_block[seq] = table[-1]

    def remove(self, seq: int) -> list[int]:
        """Forget ``seq``'s table; returns it."""
        return self.tables.pop(seq)

    def replace(self, seq: int, table: list[int]) -> None:
        """``seq``'s table now holds ``table`` (a swap moved its blocks)."""
        self.tables[seq] = table
        self.last_block[seq] = table[-1]

    def write_fresh(self, blocks: list[int] | np.ndarray, tokens: np.ndarray) -> None:
        """Write ``tokens`` from slot 0 of ``blocks`` (fresh, empty blocks)."""
        size = self.block_size
        full, rest = divmod(tokens.shape[0], size)
        if full:
            self.slots[blocks[:full]] = tokens[: full * size].reshape(full, size)
        if rest:
            self.slots[blocks[full], :rest] = tokens[full * size :]

    def _write_at(self, table: list[int], start: int, tokens: np.ndarray) -> None:
        """Write ``tokens`` at logical positions ``start...`` of a block table."""
        size = self.block_size
        end = start + tokens.shape[0]
        first, last = start // size, (end - 1) // size
        blocks = np.asarray(table[first : last + 1], dtype=np.int64)
        offsets = np.arange(start - first * size, end - first * size)
        self.slots[blocks[offsets // size], offsets % size] = tokens

    # -- one sequence ------------------------------------------------------------------------
    def append_need(self, seq: int, held: int, num_new: int) -> tuple[int, bool]:
        """(blocks growing ``seq`` from ``held`` tokens by ``num_new`` takes, whether its
        first write needs copy-on-write)."""
        size = self.block_size
        room = -held % size  # free slots left in the last block
        grown = -(-(num_new - room) // size) if num_new > room else 0
        pool = self.pool
        cow = bool(room and num_new and pool.num_shared)  # a shared block exists at all
        cow = cow and pool.refcount[self.last_block[seq]] > 1
        return grown + int(cow), bool(cow)

    def append(self, seq: int, held: int, tokens: np.ndarray, need: tuple[int, bool]):
        """Grow ``seq`` (holding ``held`` tokens) by ``tokens`` (non-empty), taking the
        ``need`` that ``append_need`` gave (the caller checked the pool has it). Returns
        the copy-on-write moves."""
        pool, size = self.pool, self.block_size
        needed, cow = need
        table = self.tables[seq]
        moves = [self._copy_on_write(seq, table, held)] if cow else []
        grown = needed - int(cow)
        if grown:
            table.extend([pool.take_one()] if grown == 1 else pool.take(grown).tolist())
            self.last_block[seq] = table[-1]
        num_new = tokens.shape[0]
        if num_new == 1:  # the decode case: one scalar write, no index arrays
            self.slots[table[-1], held % size] = tokens[0]
        else:
            self._write_at(table, held, tokens)
        pool.token_slots += num_new
        first, end = held // size, (held + num_new) // size
        if end > first and self.prefix_caching:  # blocks filled up: seal them
            self.index.seal_run(seq, table[first:end])
        return moves

    def _copy_on_write(self, seq: int, table: list[int], num_tokens: int) -> Transfer:
        """Give ``seq`` (holding ``num_tokens``) a private copy of its shared, partly
        filled last block (the caller checked a block is available)."""
        shared = table[-1]
        private = self.pool.unshare(shared, num_tokens % self.block_size)
        self.slots[private] = self.slots[shared]
        table[-1] = private
        self.last_block[seq] = private
        return Transfer(shared, private)

    # -- a decode step -----------------------------------------------------------------------
    def batch_need(self, seqs: np.ndarray, held: np.ndarray) -> BatchNeed:
        """What one decode step of ``seqs`` (holding ``held`` tokens each) takes."""
        size = self.block_size
        # int64 modulo is the slowest op of the step; a power-of-two size needs a mask.
        slot = held & (size - 1) if size & (size - 1) == 0 else held % size
        at_boundary = slot == 0
        last = self.last_block[seqs]
        crossing = int(np.count_nonzero(at_boundary))
        needed, shared = crossing, None
        # Without shared blocks (no fork, no live prefix hit) skip copy-on-write entirely.
        if self.pool.num_shared:
            refcount = self.pool.refcount
            shared = (refcount[last] > 1) & ~at_boundary
            if shared.any():
                # k batch members sharing a block with refcount r: each copies while
                # another table still points at the block, so min(k, r - 1) copies (the
                # last writer may keep the original when every sharer is in the batch).
                blocks, members = np.unique(last[shared], return_counts=True)
                needed += int(np.minimum(members, refcount[blocks] - 1).sum())
            else:
                shared = None
        return BatchNeed(held, slot, last, at_boundary, crossing, shared, needed)

    def append_batch(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
        """One decode token for each of ``seqs`` (distinct, on the device, non-empty),
        holding ``held`` tokens each. Raises OutOfBlocks (nothing changed). Returns the
        copy-on-write moves."""
        if self.pool.num_shared:  # some block has two references: copy-on-write may be due
            return self._append_batch_sharing(seqs, held, tokens)
        # No block is shared, so no copy: each member writes into its own last block, or
        # into a fresh one where it is at a boundary. The step's common case: each array
        # is gathered once, patched in place for the members that cross, and the numpy
        # calls are the cheapest forms (method nonzero, in-place arithmetic, a flat write).
        pool, size = self.pool, self.block_size
        # int64 modulo is the slowest op of the step; a power-of-two size needs a mask.
        slot = held & (size - 1) if size & (size - 1) == 0 else held % size
        last = self.last_block[seqs]
        boundary = np.logical_not(slot).nonzero()[0]
        if boundary.shape[0]:
            pool.require(boundary.shape[0])
            self._grow_at_boundary(seqs[boundary], boundary, last)
        filled = (slot == size - 1).nonzero()[0] if self.prefix_caching else None
        # the blocks this step fills, taken before ``last`` changes; sealed once written
        sealing = (seqs[filled], last[filled]) if filled is not None and filled.shape[0] else None
        last *= size  # ``last`` becomes the flat index of each member's slot, in place
        last += slot
        self.slots.ravel()[last] = tokens  # a view of the contiguous slots: a flat write
        pool.token_slots += seqs.shape[0]
        if sealing is not None:
            self.index.seal_step(*sealing)
        return []

    def _grow_at_boundary(self, crossing: np.ndarray, positions: np.ndarray, last) -> None:
        """Give each sequence of ``crossing`` (distinct, at a block boundary; the caller
        checked ``require``) a fresh last block; ``last[positions]``, the batch's gathered
        last blocks, follow."""
        fresh = self.pool.take(crossing.shape[0])
        tables = self.tables
        for seq, block in zip(crossing.tolist(), fresh.tolist()):
            tables[seq].append(block)
        self.last_block[crossing] = fresh
        last[positions] = fresh

    def _append_batch_sharing(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
        """``append_batch`` while some block is shared: members whose partly filled last
        block is shared copy it first."""
        pool = self.pool
        need = self.batch_need(seqs, held)
        pool.require(need.needed)
        moves: list[Transfer] = []
        if need.crossing:
            crossing = np.flatnonzero(need.at_boundary)
            self._grow_at_boundary(seqs[crossing], crossing, need.last)
        if need.shared is not None:
            sharing = zip(seqs[need.shared].tolist(), held[need.shared].tolist())
            for seq, num_tokens in sharing:
                table = self.tables[seq]
                if pool.refcount[table[-1]] > 1:  # an earlier batch member may have copied
                    moves.append(self._copy_on_write(seq, table, num_tokens))
        # After the loops every batch member's last block is private, so the fancy
        # indices below are distinct and one vectorised write is exact.
        last = self.last_block[seqs] if moves else need.last
        self.slots[last, need.slot] = tokens
        pool.token_slots += int(seqs.shape[0])
        if self.prefix_caching:
            sealing = seqs[need.slot == self.block_size - 1]
            if sealing.size:
                self.index.seal_step(sealing, self.last_block[sealing])
        return moves

    def unpublish_last(self, seq: int) -> None:
        """Withdraw ``seq``'s full last block from the prefix cache if ``seq`` alone holds
        it (a decode's own block; it is freed next, so its published count need not
        change)."""
        last = self.tables[seq][-1]
        if self.index.is_keyed(last) and self.pool.refcount[last] == 1:
            self.index.drop([last])

    # -- invariants --------------------------------------------------------------------------
    def check_tables(self, on_device: list[int], num_tokens: np.ndarray):
        """Assert the device tables of ``on_device`` (holding ``num_tokens[seq]`` tokens
        each) are well formed; returns the references to each block and the tokens each
        holds, as the tables say."""
        size = self.block_size
        references = np.zeros(self.pool.num_blocks, np.int64)
        fill = np.zeros(self.pool.num_blocks, np.int64)
        for seq in on_device:
            table, held = self.tables[seq], int(num_tokens[seq])
            assert held > 0 and len(table) == self.blocks_for(held), f"table of {seq}"
            self.check_released(seq, table, held)
            start = self.first_held(seq)
            kept = table[start:]
            assert len(set(kept)) == len(kept), f"sequence {seq} holds a block twice"
            assert not kept or self.last_block[seq] == table[-1], f"last block of {seq}"
            np.add.at(references, kept, 1)
            for index, block in enumerate(kept, start):
                expected = min(size, held - index * size)
                assert fill[block] in (0, expected), f"sharers disagree on block {block}"
                fill[block] = expected
        for block in self.index.keyed_blocks():  # keys are given to full blocks only
            assert fill[block] in (0, size), f"keyed block {block} is not full"
        return references, fill
