"""Several KV cache groups over one block pool: the paged manager's commands when a
model's layers keep different KV (full attention beside sliding windows, as gpt-oss and
Gemma 3 alternate them), or when its only group is a sliding window (Mistral-7B-v0.1).

Each group keeps its own block tables (group_tables.py and its kinds) and its own
prefix index: the same prompt block is cached once per group, under the same key, in a
block of that group (vLLM keys a cached block by hash and group). What is shared is the
pool, the sequences and their token counts. A command takes blocks for every group or
for none: it first counts what all groups need, less what the sliding windows give
back, and raises OutOfBlocks before changing anything.

A prefix hit is the longest prefix every group serves (group_hits.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from backend.base import NULL_BLOCK, InvalidRequest, KVGroup, OutOfBlocks
from backend.blocks import decode_stretch
from backend.blocks.block_pool import BlockPool
from backend.blocks.computed import ComputedTokens
from backend.blocks.coordinator import Coordinator
from backend.blocks.full_attention import FullAttention
from backend.blocks.group_hits import CommonHit, common_hit
from backend.blocks.group_tables import GroupTables
from backend.blocks.prefix_index import PrefixIndex
from backend.blocks.sliding_window import SlidingWindow
from backend.transfer import Transfer


def check_kv_groups(specs: Sequence[KVGroup]) -> tuple[KVGroup, ...]:
    """``specs`` as a tuple (empty: one full-attention group); InvalidRequest for a
    window that is not a positive int."""
    groups = tuple(specs) or (KVGroup(),)
    for number, spec in enumerate(groups):
        if not isinstance(spec, KVGroup):
            raise InvalidRequest(f"kv_groups[{number}] must be a KVGroup, got {spec!r}")
        window = spec.sliding_window
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise InvalidRequest(
                f"kv_groups[{number}].sliding_window must be a positive int, got {window!r}"
            )
        interval = spec.retention_interval
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, int) or interval < 0
        ):
            raise InvalidRequest(
                f"kv_groups[{number}].retention_interval must be None or an int >= 0, "
                f"got {interval!r}"
            )
    return groups


def build_group(
    spec: KVGroup, pool: BlockPool, index: PrefixIndex, slots: np.ndarray, *, prefix_caching: bool
) -> GroupTables:
    """The manager of one group of ``spec``'s kind over ``pool``."""
    if spec.sliding_window is None:
        return FullAttention(pool, index, slots, prefix_caching=prefix_caching)
    return SlidingWindow(
        pool,
        index,
        slots,
        window=spec.sliding_window,
        prefix_caching=prefix_caching,
        retention_interval=spec.retention_interval,
    )


def peak_blocks(
    groups: list[GroupTables], shared_tokens: int, tokens: int, samples: int, in_flight: int
) -> int:
    """The most blocks ``samples`` sequences of ``tokens`` tokens, forks sharing the first
    ``shared_tokens``, hold at once in ``groups`` when each grows by at most ``in_flight``
    tokens at a time (full attention's shared full blocks counted once)."""
    shares = [group.most_held(tokens, in_flight) for group in groups]
    full_groups = sum(not group.releases_behind for group in groups)
    shared_blocks = shared_tokens // groups[0].block_size
    return samples * sum(shares) - (samples - 1) * full_groups * shared_blocks


class KVGroups(Coordinator):
    """The coordinator (coordinator.py) of the groups ``specs`` over ``pool``, each with
    its index of ``indexes`` (see the module docstring). ``tokens`` counts each
    sequence's tokens whose KV exists and is processed, which a window releases behind
    (computed.py): set at allocation, raised by ``mark_computed`` and by growth (a step
    computes all a sequence holds)."""

    def __init__(
        self,
        specs: Sequence[KVGroup],
        pool: BlockPool,
        indexes: list[PrefixIndex],
        slots: np.ndarray,
        *,
        prefix_caching: bool,
    ):
        self.specs = tuple(specs)
        self.pool, self.indexes = pool, indexes
        self.block_size = pool.block_size
        self.groups = [
            build_group(spec, pool, index, slots, prefix_caching=prefix_caching)
            for spec, index in zip(self.specs, indexes)
        ]
        self.windows = [g for g in self.groups if g.releases_behind]
        self.sparse = [g for g in self.windows if g.retention_interval is not None]
        self.tokens = ComputedTokens()
        # The last lookup's answer, kept while no index changes which block a key names:
        # admission asks about one prompt several times before it allocates.
        self._last_hit: tuple | None = None

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks a new sequence of ``num_tokens`` tokens takes in all groups."""
        return len(self.groups) * self.groups[0].blocks_for(num_tokens)

    # -- prefix hits -------------------------------------------------------------------------
    def lookup(self, tokens: np.ndarray, salt: int) -> CommonHit:
        """The longest prefix hit every group serves (group_hits.py). No mutation but
        the memos."""
        versions = tuple(index.version for index in self.indexes)
        raw = tokens.tobytes()
        last = self._last_hit
        if last is not None and last[0] == salt and last[1] == versions and last[2] == raw:
            return last[3]
        hit = common_hit(self.groups, self.indexes, tokens, salt)
        self._last_hit = (salt, versions, raw, hit)
        return hit

    def prompt_keys(self, tokens: np.ndarray, salt: int) -> tuple[list[int], int]:
        hit = self.lookup(tokens, salt)
        return hit.keys, len(hit.runs[0])

    def shared_prefix_blocks(self, tokens: np.ndarray, salt: int) -> int:
        return self.lookup(tokens, salt).shared_blocks

    def peak_blocks(self, shared_tokens, tokens, samples, in_flight) -> int:
        return peak_blocks(self.groups, shared_tokens, tokens, samples, in_flight)

    # -- allocation --------------------------------------------------------------------------
    def can_allocate(
        self, tokens: np.ndarray, salt: int, in_flight: int | None = None, external: int = 0
    ) -> bool:
        """Whether ``allocate`` of ``tokens`` (``external`` blocks after the hit supplied
        from outside) would succeed; with ``in_flight`` (tokens a step may have in
        flight), as vLLM's admission asks it: a window's share capped at its window,
        those tokens and one block (``SlidingWindowSpec``'s admission cap, what a window
        holds of a prompt prefilled in chunks). No mutation."""
        runs = self.lookup(tokens, salt).runs
        heads = self._heads(runs, external)
        hits = [block for head in heads for block in head if block != NULL_BLOCK]
        shares = [group.most_held(tokens.shape[0], in_flight) for group in self.groups]
        needed = sum(max(share - len(head), 0) for share, head in zip(shares, heads))
        return needed <= self.pool.available(self.pool.revived(hits))

    def _heads(self, runs: list[list[int]], external: int) -> list[list[int]]:
        """Each group's table before its first fresh block, for a hit of ``runs`` and
        ``external`` blocks after it: NULL_BLOCK where the group will not read again once
        the KV through their end exists (a window's blocks before its last
        ``hit_blocks_needed``), then the hit's blocks it still needs. A group reading
        every block gets its hit's run; the rest of the table is fresh blocks, the
        external ones first. Without ``external``, the hit's own runs."""
        if not external:
            return runs
        hit = len(runs[0])
        end = hit + external
        heads = []
        for group, run in zip(self.groups, runs):
            start = group.first_needed(end)
            head = [NULL_BLOCK] * min(start, hit) + run[start:hit]
            heads.append(head + [NULL_BLOCK] * max(start - hit, 0))
        return heads

    def allocate(
        self, seq: int, tokens: np.ndarray, salt: int, computed: int | None, external: int = 0
    ) -> int:
        """Give new sequence ``seq`` a table in every group for ``tokens``: the common hit
        shared, the rest written into fresh blocks; ``external`` blocks after the hit
        (supplied from outside: a KV connector loads them) counted computed, a group
        taking none where it would never read them (a window's before the end). Raises
        OutOfBlocks (nothing changed). Returns the hit and the external blocks in
        tokens."""
        pool, size = self.pool, self.block_size
        keys, runs, shared = self.lookup(tokens, salt)
        heads = self._heads(runs, external)
        hits = [block for head in heads for block in head if block != NULL_BLOCK]
        per_group = self.groups[0].blocks_for(tokens.shape[0])
        needed = sum(per_group - len(head) for head in heads)
        pool.admit(needed, keys, hits)
        hit = len(runs[0])
        hit_tokens = hit * size
        self._retain(seq, tokens.shape[0], shared)  # (the engine may say more: retain_tails)
        for group, index, head in zip(self.groups, self.indexes, heads):
            fresh = pool.take(per_group - len(head)).tolist()
            group.write_fresh(fresh, tokens[len(head) * size :])
            pool.token_slots += int(tokens.shape[0]) - len(head) * size
            table = head + fresh
            if index.enabled:
                index.add_sequence(seq, salt, keys, table, hit, computed)
                if external:  # loaded KV is computed KV: offered to lookups at once
                    index.publish_through(seq, hit + external, table)
            group.add(seq, table)
        self.indexes[0].count_lookup(int(tokens.shape[0]), hit_tokens)
        cached = hit_tokens + external * size
        done = tokens.shape[0] if computed is None else min(computed, tokens.shape[0])
        self.tokens.add(seq, max(done, cached), cached)
        return cached

    def retain_tails(self, seq: int, prompt_tokens: int, shared_blocks: int) -> None:
        """``seq`` has a prompt of ``prompt_tokens`` (perhaps allocated a first chunk of
        it) and a shared prefix of ``shared_blocks`` blocks found at its lookup: the
        windows with sparse retention keep the tails of both."""
        if self.sparse and self.indexes[0].enabled:
            self._retain(seq, prompt_tokens, shared_blocks)

    def _retain(self, seq: int, prompt_tokens: int, shared_blocks: int) -> None:
        """The windows with sparse retention keep the tails of a prompt of
        ``prompt_tokens`` and of a shared prefix of ``shared_blocks`` blocks."""
        for group, index in zip(self.groups, self.indexes):
            if group in self.sparse and index.enabled:
                index.retain(seq, group.retained(prompt_tokens, shared_blocks * self.block_size))

    def begin_step(self, lag: bool) -> None:
        self.tokens.begin_step(lag)

    def unpublish_last(self, seq: int) -> None:
        for group in self.groups:
            group.unpublish_last(seq)

    def mark_computed(self, seq: int, count: int) -> None:
        """``seq`` has the KV of its first ``count`` tokens (held ones): its full blocks
        among them are published in every group's index."""
        self.tokens.grow(np.array([seq]), count)
        for group, index in zip(self.groups, self.indexes):
            if index.enabled:
                index.publish_through(seq, count // self.block_size, group.tables[seq])

    # -- growth ------------------------------------------------------------------------------
    def _room(self, releasing: list[int]) -> int:
        """Blocks available once the windows give back ``releasing`` (one entry per
        reference dropped: a block comes back when every holder drops it)."""
        gained = 0
        if releasing:
            blocks, drops = np.unique(np.asarray(releasing, np.int64), return_counts=True)
            gained = int(np.count_nonzero(self.pool.refcount[blocks] == drops))
        return self.pool.available() + gained

    def _check_room(self, needed: int, releasing: list[int]) -> None:
        """Raise OutOfBlocks unless ``needed`` blocks fit in ``_room(releasing)``."""
        if needed > self.pool.available() and needed > (room := self._room(releasing)):
            raise OutOfBlocks(
                f"need {needed} blocks, {room} available", needed=needed, available=room
            )

    def _check_in_order(self, seqs: np.ndarray, held: np.ndarray, moving: np.ndarray):
        """Raise OutOfBlocks unless the decode step of ``seqs`` fits when they are served
        in ascending id order, each after its own windows' releases (those of ``moving``);
        returns the blocks they release. (Copy-on-write of a shared last block is counted
        in the whole batch's check only.)"""
        size, groups = self.block_size, len(self.groups)
        releases = {int(seq): self._releasing(np.array([seq])) for seq in moving.tolist()}
        left = {}  # references left to each releasing block, as members drop them
        for blocks in releases.values():
            for block in blocks:
                left[block] = left.get(block, int(self.pool.refcount[block]))
        free = self.pool.available()
        order = np.argsort(seqs, kind="stable")
        for served, position in enumerate(order.tolist()):
            for block in releases.get(int(seqs[position]), ()):
                left[block] -= 1
                free += left[block] == 0  # its last holder let it go
            free -= groups * int(held[position] % size == 0)  # a new block in every group
            if free < 0:
                self._release(seqs[order[: served + 1]])  # (the members it reached)
                raise OutOfBlocks(
                    f"sequence {int(seqs[position])} needs a block before later members' "
                    "windows give theirs back",
                    needed=groups,
                    available=free + groups,
                )
        return [block for blocks in releases.values() for block in blocks]

    def _release(self, seqs: np.ndarray) -> None:
        """Release the windows of ``seqs``, in order, before they grow."""
        for seq in seqs.tolist():
            for group in self.windows:
                group.release_window(seq, int(self.tokens.processed(np.array([seq]))[0]))

    def _releasing(self, seqs: np.ndarray) -> list[int]:
        """The blocks the windows of ``seqs`` would release before they grow."""
        computed = self.tokens.processed(seqs).tolist()
        return [
            block
            for group in self.windows
            for seq, count in zip(seqs.tolist(), computed)
            for block in group.releasing(seq, count)
        ]

    def append_need(self, seq: int, held: int, num_new: int) -> int:
        """Blocks growing ``seq`` by ``num_new`` tokens takes in all groups."""
        return sum(group.append_need(seq, held, num_new)[0] for group in self.groups)

    def can_append(self, seq: int, held: int, num_new: int) -> bool:
        releasing = self._releasing(np.array([seq])) if num_new else []
        return self.append_need(seq, held, num_new) <= self._room(releasing)

    def append(self, seq: int, held: int, tokens: np.ndarray) -> list[Transfer]:
        """Grow ``seq`` by ``tokens`` in every group, releasing what its windows left
        behind first. Raises OutOfBlocks, having changed nothing but those releases
        (vLLM frees a request's out-of-window blocks before it checks the pool)."""
        num_new = tokens.shape[0]
        if num_new:
            self._release(np.array([seq]))
        needs = [group.append_need(seq, held, num_new) for group in self.groups]
        self._check_room(sum(need for need, _ in needs), [])
        moves: list[Transfer] = []
        if num_new:
            for number, (group, need) in enumerate(zip(self.groups, needs)):
                grown = group.append(seq, held, tokens, need)
                moves += [move._replace(group=number) for move in grown]
            self.tokens.grow(np.array([seq]), held + num_new)
        self.pool.clock += 1  # one tick per command, after its growth
        return moves

    def plain_decode_steps(self, seqs, held, limit) -> int:
        return decode_stretch.plain_group_steps(self, seqs, held, limit)

    def append_steps(self, seqs, held, tokens) -> dict:
        return decode_stretch.write_group_rows(self, seqs, held, tokens)

    def batch_need(self, seqs: np.ndarray, held: np.ndarray) -> int:
        return sum(group.batch_need(seqs, held).needed for group in self.groups)

    def append_batch(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
        """One decode token for each of ``seqs`` in every group. Members are served in
        ascending id order (the order sequences were allocated: an engine's running
        list), each taking its blocks after its own windows gave theirs back, so a
        member never uses blocks a later member's window releases (vLLM's running loop
        frees a request's out-of-window blocks when it reaches that request). Raises
        OutOfBlocks (nothing changed) unless every member fits so. Returns the
        copy-on-write moves."""
        computed = self.tokens.processed(seqs)
        moving = seqs[:0]
        if self.windows:  # only sequences whose window passed a block release anything
            moved = np.zeros(seqs.shape[0], bool)
            for group in self.windows:
                moved |= group.skipped_blocks_of(computed) > group.released[seqs]
            moving = seqs[moved]
        releasing = self._check_in_order(seqs, held, moving) if moving.shape[0] else []
        needed = self.batch_need(seqs, held)
        self._check_room(needed, releasing)
        if moving.shape[0] and needed > len(self.pool.free):
            return self._append_in_order(seqs, held, tokens)
        self._release(np.sort(moving))
        moves: list[Transfer] = []
        for number, group in enumerate(self.groups):
            grown = group.append_batch(seqs, held, tokens)
            moves += [move._replace(group=number) for move in grown]
        self.tokens.grow(seqs, held + 1)
        return moves

    def _append_in_order(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
        """``append_batch`` member by member in ascending id order, each releasing its
        windows right before it grows. Needed once the step evicts: a window's block
        that is not retained goes back uncached and is taken before any cached block, so
        whether an earlier member evicts depends on whether a later member released yet
        (vLLM's running loop interleaves them so). The caller checked that all fit."""
        moves: list[Transfer] = []
        for position in np.argsort(seqs, kind="stable").tolist():
            moves += self.append(
                int(seqs[position]), int(held[position]), tokens[position : position + 1]
            )
        return moves

    # -- sharing and release ----------------------------------------------------------------
    def fork(self, parent: int, child: int) -> None:
        """``child`` shares every table of ``parent``."""
        for group, index in zip(self.groups, self.indexes):
            table = list(group.tables[parent])
            self.pool.add_references(table[group.first_held(parent) :])
            if index.enabled:
                index.fork(parent, child)
            group.add(child, table)
        self.tokens.fork(parent, child)

    def free(self, seq: int, held: int, swapped: bool = False) -> list[int]:
        """Drop ``seq``'s references in every group (it held ``held`` tokens), group by
        group, each table's tail first (vLLM's coordinator frees its managers in turn).
        (No sequence of several groups is ever swapped.)"""
        size, tables = self.block_size, []
        for group, index in zip(self.groups, self.indexes):
            start = group.first_held(seq)
            tables.append(group.remove(seq))
            self.pool.release(tables[-1][start:], held - start * size)
            if index.enabled:
                index.remove(seq)
        return tables[0]

    # -- queries -----------------------------------------------------------------------------
    def tables(self, seq: int) -> tuple[list[int], ...]:
        return tuple(list(group.tables[seq]) for group in self.groups)

    def held_blocks(self, seq: int) -> int:
        return sum(len(group.tables[seq]) - group.first_held(seq) for group in self.groups)

    def read(self, seq: int, held: int, group: int, memory: np.ndarray) -> np.ndarray:
        table = np.asarray(self.groups[group].tables[seq], np.int64)
        tokens = memory[table].reshape(-1)[:held].astype(np.int64)
        tokens[np.repeat(table == NULL_BLOCK, self.block_size)[:held]] = NULL_BLOCK
        return tokens

    # -- invariants --------------------------------------------------------------------------
    def check(self, on_device: list[int], num_tokens: np.ndarray, read_tokens) -> None:
        """Assert every group's tables and index, group by group, then the pool against
        them all."""
        references = np.zeros(self.pool.num_blocks, np.int64)
        slots = 0
        # (a full-attention group reads every token back; a model of windows only none)
        full = next((n for n, s in enumerate(self.specs) if s.sliding_window is None), None)
        reader = (lambda seq: read_tokens(seq, full)) if full is not None else None
        for group, index in zip(self.groups, self.indexes):
            counted, fill = group.check_tables(on_device, num_tokens)
            assert not (references.astype(bool) & counted.astype(bool)).any(), (
                "a block is in two groups' tables"
            )
            references += counted
            slots += int(fill.sum())
            index.check_invariants(group.tables, on_device, reader)
        self.pool.check_invariants(references, slots)

    def snapshot_state(self) -> tuple:
        return (
            tuple(
                (sorted(group.tables.items()), group.last_block, index.snapshot_state())
                + group.kind_state()
                for group, index in zip(self.groups, self.indexes)
            )
            + self.tokens.snapshot_state()
        )
