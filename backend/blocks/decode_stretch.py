"""The paged manager's decode stretches (backend/stretch.py): several decode steps of a
fixed batch in one call, leaving the tables, block ids, prefix keys and counters exactly
as one ``append_batch`` per step would.

One group (full attention, or any group of several) writes its rows at once: each step's
boundary-crossing members take their next block, in (step, batch position) order, and
every step's filled blocks are sealed in step order. Several groups over one pool
(kv_groups.py) add the order between them and the sliding windows' releases. A step
takes blocks from the free list's head and puts what its windows release at the back; a
stretch never takes more than was free before it, so all its blocks can be taken first,
in the order the steps take them (step, group, batch position), and the releases follow
in the steps' order (step, sequence id, group), each at its step's tick of the pool's
clock, as vLLM's running loop frees a request's out-of-window blocks when it reaches it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from backend.blocks.block_pool import BlockPool
from backend.blocks.computed import ComputedTokens
from backend.blocks.group_tables import GroupTables
from backend.blocks.sliding_window import SlidingWindow
from backend.stretch import usage_by_step


class GroupSet(Protocol):
    """What a stretch of several groups reads of their coordinator (kv_groups.py)."""

    pool: BlockPool
    block_size: int
    groups: list[GroupTables]
    windows: list[SlidingWindow]
    tokens: ComputedTokens


# -- one group ---------------------------------------------------------------------------
def plain_steps(
    group: GroupTables, seqs: np.ndarray, held: np.ndarray, limit: int, free: int | None = None
) -> int:
    """How many of the next ``limit`` (> 0) decode steps of ``seqs`` (holding ``held``)
    ``group`` runs without copy-on-write or eviction, with ``free`` blocks (None: the
    pool's free list): 0 when a sequence's partly filled last block is shared (its next
    write copies)."""
    size, pool = group.block_size, group.pool
    if pool.num_shared:
        last = group.last_block[seqs]
        if ((held % size != 0) & (pool.refcount[last] > 1)).any():
            return 0
    first = -held % size  # the step (0-based) of each sequence's first new block
    free = len(pool.free) if free is None else free

    def taken(steps: int) -> int:
        return int(np.maximum((steps - 1 - first) // size + 1, 0).sum())

    if taken(limit) <= free:
        return int(limit)
    low, high = 0, int(limit)  # taken(low) <= free < taken(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if taken(mid) <= free else (low, mid)
    return low


def write_rows(
    group: GroupTables,
    seqs: np.ndarray,
    held: np.ndarray,
    tokens: np.ndarray,
    fresh: np.ndarray | None = None,
) -> np.ndarray:
    """Write a ``(steps, len(seqs))`` grid of decode tokens into ``group``, within what
    ``plain_steps`` granted, growing into ``fresh`` (the blocks the stretch takes, in
    (step, batch position) order; None: taken from the pool here). Returns, per step,
    whether each sequence took a new block that step (a bool grid of the same shape)."""
    size = group.block_size
    steps = tokens.shape[0]
    offsets = (held[None, :] + np.arange(steps)[:, None]) % size
    crossing = offsets == 0
    blocks = _grow_tables(group, seqs, crossing, fresh)
    group.slots[blocks, offsets] = tokens
    group.pool.token_slots += steps * seqs.shape[0]
    if group.prefix_caching:
        _seal_filled(group, seqs, blocks, offsets == size - 1)
    return crossing


def _grow_tables(group: GroupTables, seqs: np.ndarray, crossing: np.ndarray, fresh):
    """Give every sequence a new block at each step where it crosses a boundary, in
    (step, batch position) order as step-by-step takes them (from ``fresh``, or the pool
    when None); returns the block each step writes to, per sequence."""
    steps, count = np.nonzero(crossing)  # row-major: step order, then batch order
    blocks = np.empty(crossing.shape, dtype=np.int64)
    blocks[:] = group.last_block[seqs]
    if not steps.size:
        return blocks
    if fresh is None:
        fresh = group.pool.take(steps.size)
    newest = np.full(crossing.shape, -1, dtype=np.int64)
    newest[steps, count] = np.arange(steps.size)
    np.maximum.accumulate(newest, axis=0, out=newest)  # the latest block taken so far
    grown = newest >= 0
    blocks[grown] = fresh[newest[grown]]
    tables = group.tables
    for seq, block in zip(seqs[count].tolist(), fresh.tolist()):
        tables[seq].append(block)
    group.last_block[seqs] = blocks[-1]
    return blocks


def _seal_filled(group: GroupTables, seqs: np.ndarray, blocks: np.ndarray, filled) -> None:
    """Publish the blocks each step filled, step by step (the order of the keys)."""
    for step in np.flatnonzero(filled.any(axis=1)).tolist():
        mask = filled[step]
        group.index.seal_step(seqs[mask], blocks[step, mask])


# -- several groups --------------------------------------------------------------------------
def plain_group_steps(kv: GroupSet, seqs: np.ndarray, held: np.ndarray, limit: int) -> int:
    """``plain_steps`` for every group of ``kv`` at once, on the free list alone (what
    the windows release during the stretch is not counted)."""
    free = len(kv.pool.free) // len(kv.groups)
    return min(plain_steps(group, seqs, held, limit, free) for group in kv.groups)


def write_group_rows(kv: GroupSet, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
    """Write a stretch's rows into every group of ``kv`` and release what the windows
    leave behind (the module docstring), within what ``plain_group_steps`` granted.
    Returns the usage after each row (backend/stretch.py); the caller ticks the clock."""
    pool, groups = kv.pool, len(kv.groups)
    steps = tokens.shape[0]
    if not steps:
        none = np.zeros(0, np.int64)
        return usage_by_step(none, none, none, pool.num_blocks, kv.block_size, pool.num_evicted)
    before = (pool.num_free, pool.num_cached, pool.token_slots, pool.peak_used_blocks)
    crossing = (held[None, :] + np.arange(steps)[:, None]) % kv.block_size == 0
    per_row = np.count_nonzero(crossing, axis=1)
    fresh = pool.take(groups * int(per_row.sum()))
    for number, group in enumerate(kv.groups):
        write_rows(group, seqs, held, tokens, fresh[_taken_by(per_row, groups, number)])
    released = _release_rows(kv, seqs, kv.tokens.processed_in_stretch(seqs, held, steps))
    kv.tokens.grow_stretch(seqs, held, steps)
    free = before[0] - groups * np.cumsum(per_row) + np.cumsum(released[0])
    cached = before[1] + np.cumsum(released[1])
    token_slots = before[2] + groups * seqs.shape[0] * np.arange(1, steps + 1)
    token_slots += np.cumsum(released[2])
    # (the takes above raised the peak as if no row released before it took)
    used = pool.num_blocks - free - cached
    pool.peak_used_blocks = max(before[3], int(used.max()))
    return usage_by_step(
        free, cached, token_slots, pool.num_blocks, kv.block_size, pool.num_evicted
    )


def _taken_by(per_row: np.ndarray, groups: int, number: int) -> np.ndarray:
    """Where group ``number``'s blocks are among those a stretch takes, in the order its
    rows take them: each row takes ``per_row`` blocks for each of ``groups`` groups in
    turn. Returns the indexes in (row, batch position) order."""
    row = np.repeat(np.arange(per_row.shape[0]), per_row)
    first = np.cumsum(per_row) - per_row  # the row's first crossing, over all rows
    rank = np.arange(row.shape[0]) - first[row]
    return groups * first[row] + number * per_row[row] + rank


def _release_rows(kv: GroupSet, seqs: np.ndarray, processed: np.ndarray) -> np.ndarray:
    """Release what the windows of ``seqs`` leave behind at each row of a stretch
    (``processed``: what each has processed at each row), in the rows' order. Returns,
    per row, the change to the free blocks, the cached blocks and the token slots."""
    pool, steps = kv.pool, processed.shape[0]
    changes = np.zeros((3, steps), np.int64)
    if not kv.windows:
        return changes
    rows, members, numbers, stops = [], [], [], []
    for number, group in enumerate(kv.windows):
        start = group.released[seqs]
        reach = np.maximum.accumulate(
            np.maximum(group.skipped_blocks_of(processed), start[None, :]), axis=0
        )
        row, member = np.nonzero(reach > np.vstack((start[None, :], reach[:-1])))
        rows.append(row)
        members.append(seqs[member])
        numbers.append(np.full(row.shape[0], number))
        stops.append(reach[row, member])
    rows, members, numbers, stops = map(np.concatenate, (rows, members, numbers, stops))
    clock = pool.clock
    for event in np.lexsort((numbers, members, rows)).tolist():
        row = int(rows[event])
        pool.clock = clock + row
        free, cached, token_slots = pool.num_free, pool.num_cached, pool.token_slots
        kv.windows[numbers[event]].release_to(int(members[event]), int(stops[event]))
        changes[:, row] += (
            pool.num_free - free,
            pool.num_cached - cached,
            pool.token_slots - token_slots,
        )
    pool.clock = clock
    return changes
