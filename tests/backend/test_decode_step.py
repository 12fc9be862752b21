"""The decode step's fast path (no block shared anywhere, so no copy-on-write to weigh)
is one ``append`` per member in batch order, done at once: the same state bit for bit
(but the clock, which a command ticks once) and no moves; or, refused, no change at all.
Hypothesis builds the block manager's state from random commands (the strategy of
test_stretch.py: prefix hits, forks, frees, steps) and runs a few steps of a random
batch; a deep copy appending member by member is the reference."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from backend.base import OutOfBlocks
from tests.backend.test_stretch import managers


@given(state=managers(groups=False), data=st.data())
def test_the_fast_decode_step_is_one_append_per_member(state, data):
    # (KV cache groups take blocks group by group, not member by member: one group here)
    manager, live, _ = state
    assume(live and not manager._pool.num_shared)  # a shared block takes the general path
    members = data.draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
    seqs = np.array(members, dtype=np.int64)
    for _ in range(data.draw(st.integers(1, 20))):
        tokens = data.draw(st.lists(st.integers(0, 2), min_size=seqs.size, max_size=seqs.size))
        reference, before = copy.deepcopy(manager), manager.snapshot()
        try:
            moves = manager.append_batch_trusted(seqs, np.array(tokens, dtype=np.int32))
        except OutOfBlocks:
            assert manager.snapshot() == before
            assert reference.blocks_needed_for_batch(seqs) > reference.available_blocks()
            return
        assert moves == []
        for seq, token in zip(members, tokens):
            assert reference.append(seq, [token]) == []
        reference._pool.clock -= len(members) - 1  # one tick for the batch's one command
        assert manager.snapshot() == reference.snapshot()
        assert manager.peak_used_blocks == reference.peak_used_blocks
        manager.check_invariants()
