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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from backend.base import Allocator
from backend.transfer import CPU, GPU, Route, Transfer

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

    def __init__(self, alloc: Allocator):
        self.layout = alloc.block_table_layout
        assert self.layout in ("blocks", "region"), (
            f"block_table_layout must be 'blocks' or 'region', got {self.layout!r}"
        )
        self.block_size = alloc.block_size
        if self.layout == "region":
            assert self.block_size == 1, "a region-layout allocator has block_size 1"
        self.device = np.full((alloc.num_blocks, self.block_size), UNWRITTEN, np.int64)
        # one CPU pool: the swap space's blocks, then the offload tier's
        cpu_blocks = alloc.num_cpu_blocks + alloc.num_offload_blocks
        self.cpu = np.full((cpu_blocks, self.block_size), UNWRITTEN, np.int64)
        # offload tiers below the CPU one, each its own pool
        self.pools = {GPU: self.device, CPU: self.cpu}
        for medium, blocks in alloc.lower_tier_blocks.items():
            self.pools[medium] = np.full((blocks, self.block_size), UNWRITTEN, np.int64)

    # -- tables ----------------------------------------------------------------------------
    def blocks_of(self, alloc: Allocator, seq_id: int, seq: Seq) -> list[int]:
        """The physical blocks (slots, for a region) holding ``seq``'s tokens in order,
        from its block table, checked for shape and range."""
        table = [int(b) for b in alloc.block_table(seq_id)]
        tables = alloc.block_tables(seq_id)
        assert len(tables) == 1 and [int(b) for b in tables[0]] == table, (
            f"{seq.name}: block_tables gives {tables}, not its one table {table}"
        )
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
            assert len(set(blocks)) == len(blocks), f"{seq.name}: a block twice in {blocks}"
        bad = [b for b in blocks if not 0 <= b < pool.shape[0]]
        assert not bad, f"{seq.name}: {where} blocks {bad} outside a pool of {pool.shape[0]}"
        return blocks

    def positions(self, blocks: list[int], start: int, stop: int) -> list[tuple[int, int]]:
        """(block, offset) of logical token positions ``start .. stop - 1``."""
        size = self.block_size
        return [(blocks[i // size], i % size) for i in range(start, stop)]

    # -- the executor ----------------------------------------------------------------------
    def compute(self, blocks: list[int], start: int, tokens: list[int]) -> None:
        """Compute the KV of ``tokens`` at logical positions ``start...`` (device)."""
        for (block, offset), token in zip(
            self.positions(blocks, start, start + len(tokens)), tokens
        ):
            self.device[block, offset] = token

    def read(self, blocks: list[int], count: int, *, swapped: bool) -> list[int]:
        memory = self.cpu if swapped else self.device
        return [int(memory[b, o]) for b, o in self.positions(blocks, 0, count)]

    def move(self, moves: Iterable[Transfer], *, route: Route, what: str) -> int:
        """Perform ``moves`` in order; returns how many. Asserts each is a Transfer of
        ``route`` (what ``what`` must return), of group 0 and between ids in range."""
        src, dst = route
        source, target = self.pools[src], self.pools[dst]
        count = 0
        for move in moves:
            assert isinstance(move, Transfer), f"{what}: {move!r} is no Transfer"
            assert move.route == route, (
                f"{what}: {move!r} goes {move.src_medium.value} -> {move.dst_medium.value}, "
                f"not {src.value} -> {dst.value}"
            )
            assert move.group == 0, f"{what}: {move!r} names group {move.group} of one"
            s, d = int(move.src), int(move.dst)
            assert 0 <= s < source.shape[0], (
                f"{what}: move {move} reads {src.value} block {s}, out of range"
            )
            assert 0 <= d < target.shape[0], (
                f"{what}: move {move} writes {dst.value} block {d}, out of range"
            )
            target[d] = source[s]
            count += 1
        return count
