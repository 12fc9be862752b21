"""Stateful property test of the paged block manager against a plain-Python shadow.

Tiny pools (4-12 blocks of 1-4 slots, 0-6 CPU blocks) make free-list misses, eviction
and copy-on-write frequent. Prompts are built from a few shared prefixes so prefix hits
really happen, under salts 0 and 1 so isolation is exercised.
"""

from __future__ import annotations

import numpy as np
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from backend.base import InvalidRequest, OutOfBlocks
from backend.blocks import BlockManager
from backend.transfer import CPU, GPU, Transfer
from policies.context import PolicyContext, build_policy
from policies.eviction import EVICTORS

PREFIXES = ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [5, 5, 5, 5, 5, 5, 5, 5])
tokens_st = st.lists(st.integers(0, 3), min_size=1, max_size=9)


class BlockManagerMachine(RuleBasedStateMachine):
    seqs = Bundle("seqs")

    @initialize(
        num_blocks=st.integers(4, 12),
        block_size=st.integers(1, 4),
        num_cpu_blocks=st.integers(0, 6),
        caching=st.sampled_from([True, True, True, False]),
        eviction=st.sampled_from(EVICTORS.names()),
    )
    def setup(self, num_blocks, block_size, num_cpu_blocks, caching, eviction):
        self.mgr = BlockManager(
            num_blocks,
            block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_caching=caching,
            evictor=build_policy(
                EVICTORS,
                eviction,
                {},
                PolicyContext.standalone(block_size=block_size, num_blocks=num_blocks),
            ),
        )
        self.initial = self.mgr.usage()
        self.shadow: dict[int, list[int]] = {}  # what each live sequence was given
        self.salt: dict[int, int] = {}
        self.swapped: set[int] = set()
        # (salt, full-block prefix) of every token run any sequence ever held: a prefix
        # hit is legitimate only if its exact tokens were once computed under that salt.
        self.computed: set[tuple[int, tuple[int, ...]]] = set()
        self.next_id = 0

    # -- helpers ------------------------------------------------------------------------
    def _record(self, seq: int) -> None:
        size, tokens = self.mgr.block_size, self.shadow[seq]
        for end in range(size, len(tokens) + 1, size):
            self.computed.add((self.salt[seq], tuple(tokens[:end])))

    def _refused(self, before: bytes, command, *args):
        """Run a command that may be refused: (refused, its result). A refused command
        must have changed nothing at all."""
        try:
            return False, command(*args)
        except OutOfBlocks:
            assert self.mgr.snapshot() == before, "a refused command mutated the state"
            event(f"refused {command.__name__}")
            return True, None

    def _on_device(self) -> list[int]:
        return sorted(set(self.shadow) - self.swapped)

    # -- rules ----------------------------------------------------------------------------
    @rule(
        target=seqs,
        prefix=st.sampled_from(PREFIXES),
        prefix_len=st.integers(0, 8),
        suffix=st.lists(st.integers(0, 3), max_size=3),
        salt=st.integers(0, 1),
    )
    def allocate(self, prefix, prefix_len, suffix, salt):
        # At most half the pool, so that most prompts fit and a few collide on memory.
        longest = max(1, self.mgr.num_blocks * self.mgr.block_size // 2)
        prompt = (prefix[:prefix_len] + suffix or [0])[:longest]
        seq, before = self.next_id, self.mgr.snapshot()
        expected_hit = self.mgr.cached_prefix_tokens(prompt, salt=salt)
        possible = self.mgr.can_allocate(prompt, salt=salt)
        try:
            hit = self.mgr.allocate(seq, prompt, salt=salt)
        except OutOfBlocks:
            assert not possible and self.mgr.snapshot() == before
            event("refused allocate")
            return multiple()
        assert possible and hit == expected_hit and hit % self.mgr.block_size == 0
        assert hit == 0 or (salt, tuple(prompt[:hit])) in self.computed, "foreign prefix hit"
        event("prefix hit" if hit else "prefix miss")
        self.next_id += 1
        self.shadow[seq], self.salt[seq] = list(prompt), salt
        self._record(seq)
        return seq

    def _append(self, seq, tokens):
        before = self.mgr.snapshot()
        if seq in self.swapped:
            try:
                self.mgr.append(seq, tokens)
            except InvalidRequest:
                assert self.mgr.snapshot() == before
                return
            raise AssertionError("append to a swapped-out sequence was accepted")
        possible = self.mgr.can_append(seq, len(tokens))
        try:
            moves = self.mgr.append(seq, tokens)
        except OutOfBlocks:
            assert not possible and self.mgr.snapshot() == before
            event("refused append")
            return
        assert possible
        if moves:
            event("copy-on-write")
        held, size = len(self.shadow[seq]), self.mgr.block_size
        for src, dst, *_ in moves:
            # CoW copied the shared, partly filled block into a private one in place;
            # the original keeps its tokens for the other readers.
            assert self.mgr.block_table(seq)[held // size] == dst
            assert self.mgr.block_table(seq)[held // size] != src
            assert self.mgr.slots[src][: held % size].tolist() == self.shadow[seq][-(held % size) :]
        self.shadow[seq].extend(tokens)
        self._record(seq)

    @rule(seq=seqs, token=st.integers(0, 3))
    def append_one(self, seq, token):
        self._append(seq, [token])

    @rule(seq=seqs, tokens=tokens_st)
    def append_many(self, seq, tokens):
        self._append(seq, tokens)

    @precondition(lambda self: self._on_device())
    @rule(data=st.data())
    def append_batch(self, data):
        batch = data.draw(st.lists(st.sampled_from(self._on_device()), min_size=1, unique=True))
        tokens = data.draw(st.lists(st.integers(0, 3), min_size=len(batch), max_size=len(batch)))
        seq_ids, token_ids = np.array(batch), np.array(tokens, np.int32)
        before, needed = self.mgr.snapshot(), self.mgr.blocks_needed_for_batch(seq_ids)
        free = self.mgr.num_free_blocks + self.mgr.num_cached_blocks
        used = self.mgr.num_used_blocks
        if self._refused(before, self.mgr.append_batch, seq_ids, token_ids)[0]:
            assert needed > free
            return
        # The query is checked against what the command really took.
        assert self.mgr.num_used_blocks - used == needed <= free
        for seq, token in zip(batch, tokens):
            self.shadow[seq].append(token)
            self._record(seq)

    @rule(target=seqs, parent=seqs)
    def fork(self, parent):
        if parent in self.swapped:
            return multiple()
        child = self.next_id
        assert self.mgr.fork(parent, child) == []
        self.next_id += 1
        self.shadow[child], self.salt[child] = list(self.shadow[parent]), self.salt[parent]
        return child

    @rule(seq=consumes(seqs))
    def free(self, seq):
        self.mgr.free(seq)
        del self.shadow[seq], self.salt[seq]
        self.swapped.discard(seq)

    @rule(seq=seqs)
    def swap_out(self, seq):
        if seq in self.swapped:
            return
        before, possible = self.mgr.snapshot(), self.mgr.can_swap_out(seq)
        device = self.mgr.block_table(seq)
        refused, moves = self._refused(before, self.mgr.swap_out, seq)
        if refused:
            assert not possible
            return
        assert possible and self.mgr.is_swapped(seq)
        # Every device block, in table order, goes to the CPU block now in the table.
        cpu = self.mgr.block_table(seq)
        assert moves == [Transfer(d, c, GPU, CPU) for d, c in zip(device, cpu)]
        self.swapped.add(seq)

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        seq = data.draw(st.sampled_from(sorted(self.swapped)))
        before, possible = self.mgr.snapshot(), self.mgr.can_swap_in(seq)
        cpu = self.mgr.block_table(seq)
        refused, moves = self._refused(before, self.mgr.swap_in, seq)
        if refused:
            assert not possible
            return
        assert possible and not self.mgr.is_swapped(seq)
        # Blocks still cached on the device are shared again; the rest (a tail) are copied.
        table = self.mgr.block_table(seq)
        shared = len(table) - len(moves)
        assert moves == [Transfer(c, d, CPU, GPU) for c, d in zip(cpu[shared:], table[shared:])]
        self.swapped.discard(seq)

    @rule(count=st.integers(1, 3))
    def evict(self, count):
        cached, evictions = self.mgr.num_cached_blocks, self.mgr.usage().evictions
        victims = self.mgr.evict(count)
        event(f"evicted {len(victims)}")
        assert len(victims) == min(count, cached)
        assert self.mgr.num_cached_blocks == cached - len(victims)
        assert self.mgr.usage().evictions == evictions + len(victims)

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def allocator_invariants(self):
        # partition, refcounts, counters, prefix-cache maps, CPU pool (1, 2, 7)
        self.mgr.check_invariants()

    @invariant()
    def reads_back_what_it_was_given(self):
        for seq, tokens in self.shadow.items():
            assert self.mgr.read_tokens(seq).tolist() == tokens, f"sequence {seq}"
            assert self.mgr.is_swapped(seq) == (seq in self.swapped)

    @invariant()
    def accounting_identities(self):
        # usage() against the model: blocks and tokens counted from the block tables and
        # the shadow contents, not from the manager's own counters.
        usage, size = self.mgr.usage(), self.mgr.block_size
        fill: dict[int, int] = {}  # distinct device block -> tokens it holds
        for seq in self._on_device():
            held = len(self.shadow[seq])
            for index, block in enumerate(self.mgr.block_table(seq)):
                fill[block] = min(size, held - index * size)
        tokens = sum(fill.values())
        assert (usage.used_blocks, usage.token_slots) == (len(fill), tokens)
        assert usage.internal_frag_slots == len(fill) * size - tokens
        assert usage.free_slots == (self.mgr.num_blocks - len(fill)) * size

    def teardown(self):
        if not hasattr(self, "mgr"):
            return
        for seq in list(self.shadow):
            self.mgr.free(seq)
        self.mgr.evict(self.mgr.num_blocks)
        self.mgr.check_invariants()
        # every block back where it started; only the count of evictions moved on
        assert self.mgr.usage()._replace(evictions=0) == self.initial, "blocks leaked"
        assert self.mgr.num_free_cpu_blocks == self.mgr.num_cpu_blocks
        assert not self.mgr._index.keyed_blocks(), "prefix keys leaked"


TestBlockManagerStateMachine = BlockManagerMachine.TestCase
