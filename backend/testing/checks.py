"""The checks the allocator state machine runs after every step and around every refused
call, as plain functions over an allocator, the checker's model of its sequences
(``seqs``: sequence id -> :class:`~backend.testing.shadow.Seq`) and its KV memory.
Each raises AssertionError with a one-line message naming what broke.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.base import NULL_BLOCK, Allocator
from backend.capabilities import Snapshots
from backend.testing.shadow import KVMemory, Seq


def observe(alloc: Allocator, seqs: dict[int, Seq]) -> tuple[Any, ...]:
    """Everything the interface shows, and the allocator's ``snapshot()`` if it declares
    one (:class:`~backend.capabilities.Snapshots`, as BlockManager does): a refused
    command or a query must leave it all unchanged."""
    per_seq = tuple(
        (
            sid,
            alloc.read_tokens(sid).tolist(),
            [list(table) for table in alloc.block_tables(sid)],
            alloc.is_swapped(sid),
            alloc.num_tokens(sid),
            alloc.held_blocks(sid),
        )
        for sid in sorted(seqs)
    )
    whole = alloc.snapshot() if isinstance(alloc, Snapshots) else None
    return (per_seq, alloc.usage(), alloc.num_free_cpu_blocks, alloc.peak_used_blocks, whole)


def unchanged(before: tuple[Any, ...], after: tuple[Any, ...], what: str) -> None:
    labels = ("the sequences", "usage()", "num_free_cpu_blocks", "peak_used_blocks", "snapshot()")
    for label, old, new in zip(labels, before, after):
        assert old == new, f"{what} changed {label}"


def unchanged_but_released(before: tuple, after: tuple, what: str) -> None:
    """``unchanged`` for an allocator with sliding windows, whose refused growth may have
    released blocks wholly out of a window first (as vLLM frees them before it checks the
    pool): a table entry may have turned NULL_BLOCK, the token read there unreadable,
    the sequence's held blocks fewer by as many; nothing else. (The window check of the
    tables, after every call, says whether the blocks were out of the window.)"""
    total = 0
    for old, new in zip(before[0], after[0]):
        sid, old_reads, old_tables, *old_rest = old
        _, new_reads, new_tables, *new_rest = new
        released = 0
        for old_table, new_table in zip(old_tables, new_tables, strict=True):
            assert len(old_table) == len(new_table), f"{what} changed a table's length"
            for was, now in zip(old_table, new_table):
                if was != now:
                    assert now == NULL_BLOCK, f"{what} put block {now} in a table"
                    released += 1
        swapped, tokens, held = old_rest
        assert new_rest == [swapped, tokens, held - released], f"{what} changed seq {sid}"
        for was, now in zip(old_reads, new_reads, strict=True):
            assert now in (was, NULL_BLOCK), f"{what} changed what seq {sid} reads"
        total += released
    if not total:  # nothing released: nothing may have changed at all
        unchanged(before, after, what)
    assert before[2:4] == after[2:4], f"{what} changed the CPU pool or the peak"


def expect_misuse(alloc: Allocator, seqs: dict[int, Seq], what: str, call: Callable) -> None:
    """``call`` is a misuse: it must raise a ValueError or KeyError and change nothing."""
    before = observe(alloc, seqs)
    try:
        call()
    except (ValueError, KeyError):
        unchanged(before, observe(alloc, seqs), f"{what} (refused as misuse)")
        return
    raise AssertionError(f"{what} was accepted; misuse must raise ValueError or KeyError")


def reads_back(alloc: Allocator, seqs: dict[int, Seq]) -> None:
    """Each live sequence holds exactly what it was given, where it should be."""
    windows = any(group.sliding_window for group in alloc.kv_groups)
    for sid, seq in seqs.items():
        got = alloc.read_tokens(sid).tolist()
        want = seq.tokens
        if windows:  # read -1 where a window released the block
            gone = _by_token(alloc, sid)
            want = [NULL_BLOCK if b == NULL_BLOCK else t for b, t in zip(gone, want)]
        assert got == want, f"{seq.name} reads back {got}, was given {seq.tokens}"
        assert alloc.num_tokens(sid) == len(seq.tokens), f"num_tokens of {seq.name}"
        assert alloc.is_swapped(sid) == seq.swapped, f"is_swapped({seq.name}) != {seq.swapped}"
        held = alloc.held_blocks(sid)
        if seq.swapped:
            assert held == 0, f"{seq.name} is swapped out but holds {held} device blocks"
        else:  # (a window may have let every block go: a 1-token window, a refused growth)
            assert held > 0 or windows, f"{seq.name} holds tokens but no device blocks"


def _by_token(alloc: Allocator, sid: int) -> list[int]:
    """The block group 0's table holds each of ``sid``'s tokens in (NULL_BLOCK: none)."""
    table, size = alloc.block_table(sid), alloc.block_size
    return [table[i // size] for i in range(alloc.num_tokens(sid))]


def tables(alloc: Allocator, memory: KVMemory, seqs: dict[int, Seq]) -> dict:
    """Every live sequence's block table in each group (checked), and the KV memory read
    through them: the computed tokens of each must be its own."""
    blocks = {sid: memory.tables_of(alloc, sid, seq) for sid, seq in seqs.items()}
    cpu = [b for sid, seq in seqs.items() if seq.swapped for b in blocks[sid][0]]
    assert len(set(cpu)) == len(cpu), "two swapped-out sequences share a CPU block"
    owner: dict[int, int] = {}  # device block -> the group whose tables hold it
    for sid, seq in seqs.items():
        for group, table in enumerate(blocks[sid]):
            for block in table if not seq.swapped else ():
                if block != NULL_BLOCK:
                    assert owner.setdefault(block, group) == group, (
                        f"block {block} is in group {owner[block]}'s tables and group {group}'s"
                    )
            got = memory.read(table, seq.computed, swapped=seq.swapped)
            want = memory.expected(table, seq.tokens[: seq.computed])
            if got != want:
                where = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
                raise AssertionError(
                    f"{seq.name}'s KV through its block table of group {group} is {got}, "
                    f"should be {want} (position {where} holds "
                    + ("no KV" if got[where] < 0 else f"token {got[where]}'s KV")
                    + ")"
                )
    return blocks


def usage_adds_up(alloc: Allocator, memory: KVMemory, seqs, blocks, caching: bool) -> None:
    """usage() against the tables: used blocks are the distinct device blocks of live
    sequences' tables, token slots the distinct positions holding their tokens, and the
    split sums to the pool; the CPU pool's free count against the swapped tables."""
    size, device = alloc.block_size, [sid for sid, s in seqs.items() if not s.swapped]
    kept = {sid: [[b for b in table if b != NULL_BLOCK] for table in blocks[sid]] for sid in blocks}
    in_use = {b for sid in device for table in kept[sid] for b in table}
    held = {
        (b, offset)
        for sid in device
        for table in blocks[sid]
        for b, offset in memory.positions(table, 0, len(seqs[sid].tokens))
        if b != NULL_BLOCK
    }
    for next_tokens in (0, size, alloc.num_blocks * size):
        u = alloc.usage(next_tokens)
        assert min(u) >= 0, f"usage({next_tokens}) has a negative field: {u}"
        assert u.total_slots == alloc.num_blocks * size, f"total_slots {u.total_slots}"
        assert u.used_blocks == len(in_use), (
            f"usage().used_blocks is {u.used_blocks}; the live sequences' tables hold "
            f"{len(in_use)} device blocks"
        )
        assert u.token_slots == len(held), (
            f"usage().token_slots is {u.token_slots}; the live sequences hold {len(held)}"
        )
        assert u.token_slots + u.reserved_slots + u.internal_frag_slots == u.used_blocks * size, (
            f"token + reserved + internal fragmentation slots != used blocks: {u}"
        )
        assert u.external_frag_slots + u.free_slots == u.total_slots - u.used_blocks * size, (
            f"external fragmentation + free slots != the unused part of the pool: {u}"
        )
        assert u.used_blocks + u.cached_blocks + u.free_blocks == alloc.num_blocks, (
            f"used + cached + free blocks != num_blocks: {u}"
        )
        assert u.cached_slots == u.cached_blocks * size and u.cached_slots <= u.free_slots
        assert caching or u.cached_blocks == 0, "cached blocks without prefix caching"
        available = alloc.available_blocks()
        assert available == u.free_blocks + u.cached_blocks, (
            f"available_blocks() is {available}; usage() says {u.free_blocks} free + "
            f"{u.cached_blocks} cached"
        )
    for sid in device:
        held = alloc.held_blocks(sid)
        assert held == sum(map(len, kept[sid])), (
            f"held_blocks({seqs[sid].name}) is {held}, its tables {blocks[sid]}"
        )
    assert alloc.peak_used_blocks >= len(in_use), "peak_used_blocks below the current use"
    on_cpu = sum(len(blocks[sid][0]) for sid, s in seqs.items() if s.swapped)
    assert alloc.num_free_cpu_blocks == alloc.num_cpu_blocks - on_cpu, (
        f"num_free_cpu_blocks is {alloc.num_free_cpu_blocks}; the swapped-out tables hold "
        f"{on_cpu} of {alloc.num_cpu_blocks}"
    )


def verb(done: bool) -> str:
    """How a command went, for the messages that set it against its query."""
    return "succeeded" if done else "was refused"
