"""One KV cache group of sliding-window layers: the block tables and growth every group
has (group_tables.py), and the release of blocks that fall wholly out of the window.

A layer with a window of ``W`` tokens computes token ``t`` from the KV of tokens
``t - W + 1 .. t`` only. So once a sequence has the KV of ``computed`` tokens, the next
token it computes skips the first ``computed - W + 1`` of them, and every block holding
skipped tokens only goes back to the pool before the sequence grows (vLLM's
sliding-window manager frees the same blocks at the same point, from the computed-token
count its scheduler passes). Tokens held but not computed yet are never released: their
KV is still to be written. A released position keeps its place in the table as
NULL_BLOCK, so positions still map to table indexes; released entries are a prefix.

A prefix hit in this group needs only the blocks inside the window of the first token it
computes: the ``ceil((W - 1) / block_size)`` blocks before the hit point. The coordinator
(manager.py) asks every group in turn for the longest hit it can serve and settles on
the length all of them hold.

So the prefix cache need keep only those blocks before the points a hit can end at
(vLLM's sparse retention, ``prefix_cache_retention_interval``, 0 by default): before the
end of the prompt (a request sending it again resumes at its last block boundary, as a
hit never covers the last token) and before the end of a shared prefix the lookup found
held by full attention only (so that later requests sharing it hit; the request that
found it does not); with a positive interval, also before every multiple of it. A window
block outside those tails is computed, used and released, never published.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from backend.base import NULL_BLOCK, InvalidRequest, grow_arrays
from backend.blocks.block_pool import BlockPool
from backend.blocks.group_tables import GroupTables
from backend.blocks.prefix_index import PrefixIndex


class SlidingWindow(GroupTables):
    """The block tables of one sliding-window group of ``window`` tokens (see the module
    docstring). ``released[seq]`` counts the NULL entries leading ``seq``'s table."""

    releases_behind = True

    def __init__(
        self,
        pool: BlockPool,
        index: PrefixIndex,
        slots: np.ndarray,
        *,
        window: int,
        prefix_caching: bool,
        retention_interval: int | None = None,
    ):
        super().__init__(pool, index, slots, prefix_caching=prefix_caching)
        if retention_interval and retention_interval % self.block_size:
            raise InvalidRequest(
                f"retention_interval {retention_interval} is not a multiple "
                f"of the block size {self.block_size}"
            )
        self.window = window
        self.retention_interval = retention_interval
        self.released = np.zeros(64, np.int64)

    # -- the window ------------------------------------------------------------------------
    def skipped_blocks(self, computed: int) -> int:
        """Leading blocks wholly out of the window of the next token a sequence with the
        KV of ``computed`` tokens computes."""
        return max(0, computed - self.window + 1) // self.block_size

    def skipped_blocks_of(self, computed: np.ndarray) -> np.ndarray:
        """``skipped_blocks`` of every element of ``computed``."""
        return np.maximum(computed - self.window + 1, 0) // self.block_size

    def releasing(self, seq: int, computed: int) -> list[int]:
        """The blocks ``release_window(seq, computed)`` would drop. No mutation."""
        table, start = self.tables[seq], int(self.released[seq])
        return table[start : min(self.skipped_blocks(computed), len(table))]

    def release_window(self, seq: int, computed: int) -> None:
        """Drop ``seq``'s references to its blocks wholly out of the window of the next
        token it computes (it has the KV of ``computed`` tokens); their table entries
        become NULL. Blocks no other table holds become free, or cached-evictable when
        published."""
        self.release_to(seq, min(self.skipped_blocks(computed), len(self.tables[seq])))

    def release_to(self, seq: int, stop: int) -> None:
        """Drop ``seq``'s references to the blocks of its table before position ``stop``
        (``release_window``'s work, for a decode stretch that knows where each step's
        window starts)."""
        table, start = self.tables[seq], int(self.released[seq])
        if stop <= start:
            return
        gone = table[start:stop]
        table[start:stop] = [NULL_BLOCK] * (stop - start)
        self.released[seq] = stop
        self.pool.release(gone, len(gone) * self.block_size)  # out-of-window blocks are full

    def most_held(self, num_tokens: int, in_flight: int | None) -> int:
        """A window holds at most its window, the tokens in flight and a block, as it
        releases before it grows (vLLM's ``SlidingWindowSpec`` admission cap)."""
        whole = self.blocks_for(num_tokens)
        if in_flight is None:
            return whole
        return min(whole, self.blocks_for(self.window - 1 + in_flight) + 1)

    def hit_blocks_needed(self) -> int:
        """Cached blocks a prefix hit needs right before its end: those holding the
        window of the first token the sequence computes."""
        return -(-(self.window - 1) // self.block_size)

    def first_needed(self, end: int) -> int:
        """The first of the ``hit_blocks_needed`` blocks before ``end``."""
        return max(end - self.hit_blocks_needed(), 0)

    def cached_run(
        self, keys: list[int], salt: int, tokens: np.ndarray, limit: int, known=None
    ) -> list[int]:
        """The longest prefix hit (at most ``limit`` blocks) of a prompt (``tokens``,
        its full blocks' ``keys`` under ``salt``) this group serves: NULL_BLOCK where the
        window needs no block, the cached blocks of the window before its end. Searched
        from the right, as vLLM's sliding-window manager does: the first run of
        ``hit_blocks_needed`` cached blocks ends the hit; without one, a run from the
        prompt's start, however short (``known``, full attention's, is not this
        group's). No mutation."""
        size, need = self.block_size, self.hit_blocks_needed()
        run, contiguous = [NULL_BLOCK] * limit, 0
        for position in range(limit - 1, -1, -1):
            row = tokens[position * size : (position + 1) * size]
            block = self.index.cached_block(keys[position], salt, position, row)
            if block is None:
                contiguous = 0
                continue
            run[position] = block
            contiguous += 1
            if contiguous >= need:
                return run[: position + contiguous]
        return run[:contiguous]

    def retained(self, prompt_tokens: int, shared_prefix: int) -> Callable[[int], bool] | None:
        """Which positions of a sequence's table the prefix cache keeps (None: all), for a
        prompt of ``prompt_tokens`` and a shared prefix of ``shared_prefix`` tokens (0:
        none) found cached beyond the hit (the module docstring). No mutation."""
        interval, size, need = self.retention_interval, self.block_size, self.hit_blocks_needed()
        if interval is None:
            return None
        tails: set[int] = set()
        for point in (prompt_tokens - 1, shared_prefix) if shared_prefix else (prompt_tokens - 1,):
            end = point // size
            tails.update(range(max(end - need, 0), end))
        if not interval:
            return tails.__contains__
        period = interval // size
        if need >= period:  # every block is before some multiple of the interval
            return None
        return lambda position: position in tails or position % period >= period - need

    # -- tables ----------------------------------------------------------------------------
    def add(self, seq: int, table: list[int]) -> None:
        """Give new sequence ``seq`` its ``table``, whose leading NULL entries (a prefix
        hit's out-of-window blocks) are already released."""
        super().add(seq, table)
        if seq >= self.released.shape[0]:
            grow_arrays(self, ("released",), seq + 1)
        self.released[seq] = next((i for i, b in enumerate(table) if b != NULL_BLOCK), len(table))

    def first_held(self, seq: int) -> int:
        """The index of the first block ``seq``'s table still holds."""
        return int(self.released[seq])

    def kind_state(self) -> tuple:
        return (self.released,)

    # -- invariants ------------------------------------------------------------------------
    def check_released(self, seq: int, table: list[int], held: int) -> None:
        """Assert ``seq``'s released entries are NULL_BLOCK, a prefix of its table, and
        wholly behind the window of the next token it computes (at ``held`` at the
        latest, reading from ``held - W + 1``)."""
        released = int(self.released[seq])
        assert all(b == NULL_BLOCK for b in table[:released]), f"released entries of {seq}"
        assert NULL_BLOCK not in table[released:], f"sequence {seq}: NULL after a held block"
        out = max(0, held - self.window + 1) // self.block_size
        assert released <= out, f"sequence {seq} released a block inside its window"
