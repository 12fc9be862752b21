"""One KV cache group of sliding-window layers: full attention's block tables and growth
(full_attention.py), plus the release of blocks that fall wholly out of the window.

A layer with a window of ``W`` tokens computes token ``t`` from the KV of tokens
``t - W + 1 .. t`` only. So once a sequence holds ``held`` tokens, the next token it
computes skips the first ``held - W + 1`` of them, and every block holding skipped tokens
only goes back to the pool before the sequence grows (vLLM's sliding-window manager
frees the same blocks at the same point, from the computed-token count its scheduler
passes). A released position keeps its place in the table as :data:`NULL`, so positions
still map to table indexes, and the released entries are always a prefix of the table.

A prefix hit in this group needs only the blocks inside the window of the first token it
computes: the ``ceil((W - 1) / block_size)`` blocks before the hit point. The coordinator
(manager.py) asks every group in turn for the longest hit it can serve and settles on
the length all of them hold.
"""

from __future__ import annotations

import numpy as np

from backend.base import grow_arrays
from backend.blocks.block_pool import BlockPool
from backend.blocks.full_attention import FullAttention
from backend.blocks.prefix_index import PrefixIndex

#: a table entry whose block was released (its tokens are out of the window)
NULL = -1


class SlidingWindow(FullAttention):
    """The block tables of one sliding-window group of ``window`` tokens (see the module
    docstring). ``released[seq]`` counts the NULL entries leading ``seq``'s table."""

    def __init__(
        self,
        pool: BlockPool,
        index: PrefixIndex,
        slots: np.ndarray,
        *,
        window: int,
        prefix_caching: bool,
    ):
        super().__init__(pool, index, slots, prefix_caching=prefix_caching)
        self.window = window
        self.released = np.zeros(64, np.int64)

    # -- the window ------------------------------------------------------------------------
    def skipped_blocks(self, held: int) -> int:
        """Leading blocks wholly out of the window of the next token a sequence holding
        ``held`` tokens computes."""
        return max(0, held - self.window + 1) // self.block_size

    def skipped_blocks_of(self, held: np.ndarray) -> np.ndarray:
        """``skipped_blocks`` of every element of ``held``."""
        return np.maximum(held - self.window + 1, 0) // self.block_size

    def releasable(self, seq: int, held: int) -> int:
        """Blocks releasing ``seq``'s window (holding ``held`` tokens) would give back to
        the pool as free or cached-evictable: those no other table holds."""
        table, start = self.tables[seq], int(self.released[seq])
        stop = min(self.skipped_blocks(held), len(table))
        if stop <= start:
            return 0
        return int(np.count_nonzero(self.pool.refcount[table[start:stop]] == 1))

    def release_window(self, seq: int, held: int) -> None:
        """Drop ``seq``'s references to its blocks wholly out of the window (it holds
        ``held`` tokens); their table entries become NULL. Blocks no other table holds
        become free, or cached-evictable when published."""
        table, start = self.tables[seq], int(self.released[seq])
        stop = min(self.skipped_blocks(held), len(table))
        if stop <= start:
            return
        gone = table[start:stop]
        table[start:stop] = [NULL] * (stop - start)
        self.released[seq] = stop
        self.pool.release(gone, len(gone) * self.block_size)  # out-of-window blocks are full

    def release_windows(self, seqs: np.ndarray, held: np.ndarray) -> None:
        """``release_window`` for each of ``seqs`` (distinct) holding ``held`` tokens;
        Python work only for the sequences whose window moved past a block."""
        moved = (self.skipped_blocks_of(held) > self.released[seqs]).nonzero()[0]
        for position in moved.tolist():
            self.release_window(int(seqs[position]), int(held[position]))

    def hit_blocks_needed(self) -> int:
        """Cached blocks a prefix hit needs right before its end: those holding the
        window of the first token the sequence computes."""
        return -(-(self.window - 1) // self.block_size)

    # -- tables ----------------------------------------------------------------------------
    def add(self, seq: int, table: list[int]) -> None:
        """Give new sequence ``seq`` its ``table``, whose leading NULL entries (a prefix
        hit's out-of-window blocks) are already released."""
        super().add(seq, table)
        if seq >= self.released.shape[0]:
            grow_arrays(self, ("released",), seq + 1)
        self.released[seq] = next((i for i, b in enumerate(table) if b != NULL), len(table))

    def held_of(self, seq: int) -> list[int]:
        """The device blocks ``seq`` holds (its table without the released entries)."""
        return self.tables[seq][int(self.released[seq]) :]

    def remove(self, seq: int) -> list[int]:
        """Forget ``seq``'s table; returns the blocks it still held, in table order."""
        table = self.tables.pop(seq)
        return table[int(self.released[seq]) :]

    # -- invariants ------------------------------------------------------------------------
    def check_tables(self, on_device: list[int], num_tokens: np.ndarray):
        """As full attention's, where a table's leading entries may be NULL: only blocks
        wholly out of the window of the sequence's newest token, never its last one."""
        size = self.block_size
        references = np.zeros(self.pool.num_blocks, np.int64)
        fill = np.zeros(self.pool.num_blocks, np.int64)
        for seq in on_device:
            table, held = self.tables[seq], int(num_tokens[seq])
            released = int(self.released[seq])
            assert held > 0 and len(table) == self.blocks_for(held), f"table of {seq}"
            assert all(b == NULL for b in table[:released]), f"released entries of {seq}"
            kept = table[released:]
            assert NULL not in kept, f"sequence {seq}: a NULL entry after a held block"
            # the newest token's window starts at held - W: blocks wholly before it only
            out = max(0, held - self.window) // size
            assert released <= out, f"sequence {seq} released a block inside its window"
            assert len(set(kept)) == len(kept), f"sequence {seq} holds a block twice"
            if kept:
                assert self.last_block[seq] == table[-1], f"last block of {seq}"
            np.add.at(references, kept, 1)
            for index in range(released, len(table)):
                block = table[index]
                expected = min(size, held - index * size)
                assert fill[block] in (0, expected), f"sharers disagree on block {block}"
                fill[block] = expected
        for block in self.index.keyed_blocks():
            assert fill[block] in (0, size), f"keyed block {block} is not full"
        return references, fill
