"""The checks the allocator state machine runs after every step and around every refused
call, as plain functions over an allocator, the checker's model of its sequences
(``seqs``: sequence id -> :class:`~backend.testing.shadow.Seq`) and its KV memory.
Each raises AssertionError with a one-line message naming what broke.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.base import Allocator
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
    for sid, seq in seqs.items():
        got = alloc.read_tokens(sid).tolist()
        assert got == seq.tokens, f"{seq.name} reads back {got}, was given {seq.tokens}"
        assert alloc.num_tokens(sid) == len(seq.tokens), f"num_tokens of {seq.name}"
        assert alloc.is_swapped(sid) == seq.swapped, f"is_swapped({seq.name}) != {seq.swapped}"
        held = alloc.held_blocks(sid)
        if seq.swapped:
            assert held == 0, f"{seq.name} is swapped out but holds {held} device blocks"
        else:
            assert held > 0, f"{seq.name} holds tokens but no device blocks"


def tables(alloc: Allocator, memory: KVMemory, seqs: dict[int, Seq]) -> dict[int, list[int]]:
    """Every live sequence's blocks (checked), and the KV memory read through them: the
    computed tokens of each must be its own."""
    blocks = {sid: memory.blocks_of(alloc, sid, seq) for sid, seq in seqs.items()}
    cpu = [b for sid, seq in seqs.items() if seq.swapped for b in blocks[sid]]
    assert len(set(cpu)) == len(cpu), "two swapped-out sequences share a CPU block"
    for sid, seq in seqs.items():
        got = memory.read(blocks[sid], seq.computed, swapped=seq.swapped)
        want = seq.tokens[: seq.computed]
        if got != want:
            where = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            raise AssertionError(
                f"{seq.name}'s KV through its block table is {got}, should be {want} "
                f"(position {where} holds "
                + ("no KV" if got[where] < 0 else f"token {got[where]}'s KV")
                + ")"
            )
    return blocks


def usage_adds_up(alloc: Allocator, memory: KVMemory, seqs, blocks, caching: bool) -> None:
    """usage() against the tables: used blocks are the distinct device blocks of live
    sequences' tables, token slots the distinct positions holding their tokens, and the
    split sums to the pool; the CPU pool's free count against the swapped tables."""
    size, device = alloc.block_size, [sid for sid, s in seqs.items() if not s.swapped]
    in_use = {b for sid in device for b in blocks[sid]}
    held = {p for sid in device for p in memory.positions(blocks[sid], 0, len(seqs[sid].tokens))}
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
        assert held == len(blocks[sid]), (
            f"held_blocks({seqs[sid].name}) is {held}, its table {blocks[sid]}"
        )
    assert alloc.peak_used_blocks >= len(in_use), "peak_used_blocks below the current use"
    on_cpu = sum(len(blocks[sid]) for sid, s in seqs.items() if s.swapped)
    assert alloc.num_free_cpu_blocks == alloc.num_cpu_blocks - on_cpu, (
        f"num_free_cpu_blocks is {alloc.num_free_cpu_blocks}; the swapped-out tables hold "
        f"{on_cpu} of {alloc.num_cpu_blocks}"
    )


def verb(done: bool) -> str:
    """How a command went, for the messages that set it against its query."""
    return "succeeded" if done else "was refused"
