"""The checker's own model of what an allocator holds, independent of the allocator.

:class:`Seq` is what each live sequence was given (its tokens, how many of them have
their KV computed, its tenant salt, where it lives). :class:`KVMemory` is what a real
executor's KV memory would hold if it did exactly what the allocator's block tables and
moves say: it computes a token's KV into the slot the table names, performs every
returned :class:`~backend.transfer.Transfer` in order (each on the route its command
must take), and recomputes nothing a prefix hit shares. Reading a sequence back
through its table from this memory must give its own tokens; a missing copy-on-write, a
wrong swap move or a prefix hit on blocks that do not hold the prompt's KV shows up as a
wrong read, whatever the allocator says about itself.

A model with several KV cache groups (``Allocator.kv_groups``) has a table per group,
all over the one device pool: the executor computes each token into every group's
table and reads each back through each. A sliding-window group may leave a position
without a block (NULL_BLOCK) only if it is wholly out of the window of the next token the
sequence computes: a block still in the window must be there and hold its token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from backend.base import NULL_BLOCK, Allocator
from backend.transfer import CPU, GPU, Medium, Route, Transfer

#: the content of a slot no KV was ever computed into
UNWRITTEN = -1


@dataclass(frozen=True)
class SeqRef:
    """A sequence as the state machine's rules pass it around (its bundle's values):
    printed as the variable the example gives it, ``seq_<id>``, also inside lists."""

    id: int

    def __repr__(self) -> str:
        return f"seq_{self.id}"


@dataclass
class Seq:
    """One live sequence as the checker sees it."""

    name: str  # the variable the printed example gives it (seq_0, seq_1, ...)
    tokens: list[int]
    salt: int
    computed: int  # leading tokens whose KV exists (the rest: after mark_computed)
    swapped: bool = False


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class KVMemory:
    """Device and CPU KV memory, one token id per slot (UNWRITTEN where no KV was
    computed), addressed as the allocator's ``block_table_layout`` says."""

    def __init__(self, alloc: Allocator, tier_blocks: Mapping[Medium, int] = MappingProxyType({})):
        self.layout = alloc.block_table_layout
        assert self.layout in ("blocks", "region"), (
            f"block_table_layout must be 'blocks' or 'region', got {self.layout!r}"
        )
        self.block_size = alloc.block_size
        self.windows = [group.sliding_window for group in alloc.kv_groups]
        if self.layout == "region":
            assert self.block_size == 1, "a region-layout allocator has block_size 1"
        self.device = np.full((alloc.num_blocks, self.block_size), UNWRITTEN, np.int64)
        # one CPU pool: the swap space's blocks, then the CPU offload tier's (the tiers
        # beside the allocator, ``tier_blocks``: their sizes by medium)
        cpu_blocks = alloc.num_cpu_blocks + tier_blocks.get(CPU, 0)
        self.cpu = np.full((cpu_blocks, self.block_size), UNWRITTEN, np.int64)
        # offload tiers below the CPU one, each its own pool
        self.pools = {GPU: self.device, CPU: self.cpu}
        for medium, blocks in tier_blocks.items():
            if medium is not CPU:
                self.pools[medium] = np.full((blocks, self.block_size), UNWRITTEN, np.int64)

    # -- tables ----------------------------------------------------------------------------
    def tables_of(self, alloc: Allocator, seq_id: int, seq: Seq) -> list[list[int]]:
        """Each group's physical blocks (slots, for a region) holding ``seq``'s tokens in
        order, from its block tables, checked for shape, range and windows; no block is
        in two groups' tables."""
        table = [int(b) for b in alloc.block_table(seq_id)]
        tables = [[int(b) for b in group] for group in alloc.block_tables(seq_id)]
        assert len(tables) == len(self.windows) and tables[0] == table, (
            f"{seq.name}: block_tables gives {tables}: not one table per group of "
            f"{len(self.windows)}, or group 0's is not block_table's {table}"
        )
        checked = [self._checked(table, seq, window) for table, window in zip(tables, self.windows)]
        held = [b for table in checked for b in table if b != NULL_BLOCK]
        assert len(set(held)) == len(held), f"{seq.name}: a block twice in its tables {tables}"
        return checked

    def _checked(self, table: list[int], seq: Seq, window: int | None) -> list[int]:
        """One group's table, checked (``window``: its sliding window; None: full)."""
        pool = self.cpu if seq.swapped else self.device
        where = "CPU" if seq.swapped else "device"
        held = len(seq.tokens)
        if self.layout == "region":
            assert len(table) == 2, f"{seq.name}: a region table is [start, length], got {table}"
            start, length = table
            assert length >= held, f"{seq.name}: region {table} is shorter than its {held} tokens"
            blocks = list(range(start, start + length))
        else:
            blocks = table
            need = ceil_div(held, self.block_size)
            assert len(blocks) >= need, (
                f"{seq.name}: {held} tokens need {need} blocks, its table has {blocks}"
            )
            # the next token to compute (at ``computed``) reads from computed - window + 1
            # on: blocks wholly before it may be gone (NULL_BLOCK), no other
            reads_from = seq.computed - (window or 0) + 1
            gone = 0 if window is None else max(0, reads_from) // self.block_size
            dropped = [i for i, b in enumerate(blocks) if b == NULL_BLOCK and i >= gone]
            assert not dropped, (
                f"{seq.name}: block {dropped[0]} of its table {blocks} is released, but "
                + (
                    "the group is full attention"
                    if window is None
                    else f"holds tokens in the window of the next token it computes (window "
                    f"{window}, {seq.computed} computed)"
                )
            )
            blocks = [b for b in blocks if b != NULL_BLOCK]
        bad = [b for b in blocks if not 0 <= b < pool.shape[0]]
        assert not bad, f"{seq.name}: {where} blocks {bad} outside a pool of {pool.shape[0]}"
        return table if self.layout == "blocks" else blocks

    def positions(self, blocks: list[int], start: int, stop: int) -> list[tuple[int, int]]:
        """(block, offset) of logical token positions ``start .. stop - 1``."""
        size = self.block_size
        return [(blocks[i // size], i % size) for i in range(start, stop)]

    # -- the executor ----------------------------------------------------------------------
    def compute(self, tables: list[list[int]], start: int, tokens: list[int]) -> None:
        """Compute the KV of ``tokens`` at logical positions ``start...`` into every
        group's table (device). A position without a block whose KV is due is a bug."""
        for table in tables:
            for (block, offset), token in zip(
                self.positions(table, start, start + len(tokens)), tokens
            ):
                assert block != NULL_BLOCK, f"the KV of token {token} is due in a released block"
                self.device[block, offset] = token

    def read(self, blocks: list[int], count: int, *, swapped: bool) -> list[int]:
        """The KV of positions ``0 .. count - 1`` through one table; UNWRITTEN where the
        table has no block."""
        memory = self.cpu if swapped else self.device
        return [
            UNWRITTEN if b == NULL_BLOCK else int(memory[b, o])
            for b, o in self.positions(blocks, 0, count)
        ]

    def expected(self, table: list[int], tokens: list[int]) -> list[int]:
        """``tokens`` as read through ``table``: UNWRITTEN where it has no block."""
        size = self.block_size
        return [UNWRITTEN if table[i // size] == NULL_BLOCK else t for i, t in enumerate(tokens)]

    def move(self, moves: Iterable[Transfer], *, route: Route, what: str) -> int:
        """Perform ``moves`` in order; returns how many units they moved. Asserts each is
        a Transfer of ``route`` (what ``what`` must return), of a group there is and
        between ids in range (the groups' blocks are of one pool)."""
        src, dst = route
        source, target = self.pools[src], self.pools[dst]
        count = 0
        for move in moves:
            assert isinstance(move, Transfer), f"{what}: {move!r} is no Transfer"
            assert move.route == route, (
                f"{what}: {move!r} goes {move.src_medium.value} -> {move.dst_medium.value}, "
                f"not {src.value} -> {dst.value}"
            )
            groups = len(self.windows)
            assert 0 <= move.group < groups, f"{what}: {move!r} names a group of {groups}"
            s, d, n = int(move.src), int(move.dst), int(move.count)
            assert n >= 1, f"{what}: move {move} moves {n} units"
            assert s >= 0 and s + n <= source.shape[0], (
                f"{what}: move {move} reads {src.value} blocks {s}-{s + n - 1}, out of range"
            )
            assert d >= 0 and d + n <= target.shape[0], (
                f"{what}: move {move} writes {dst.value} blocks {d}-{d + n - 1}, out of range"
            )
            target[d : d + n] = source[s : s + n].copy()  # read all, then write: a range
            count += n
        return count
