"""Decode stretches on the block manager: ``append_steps`` is ``append_batch`` row after
row, and ``plain_decode_steps`` grants exactly the steps that need no copy, no eviction
and no refusal (with sliding windows, never more: what a window gives back during a
stretch is not counted as room).

Hypothesis builds a block manager's state from random commands (allocations with
prefix hits, marks, appends, forks, frees, decode steps), then asks for a stretch of the
live sequences; a deep copy driven one step at a time is the reference. A third of the
managers keep several KV cache groups with sliding windows (dense or sparse retention),
some under async scheduling, so a stretch releases window blocks as it goes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from backend.base import InvalidRequest, KVGroup, OutOfBlocks
from backend.blocks import BlockManager
from backend.stretch import DecodeStretches, append_steps_one_by_one


@st.composite
def kv_groups(draw, block_size: int) -> tuple[KVGroup, ...]:
    """No groups (one full-attention group) in two draws of three, else a layout of
    full-attention and sliding-window groups, each window with its retention."""
    if draw(st.integers(0, 2)):
        return ()
    retention = st.sampled_from([None, 0, block_size, 3 * block_size])
    window = st.builds(KVGroup, st.integers(1, 12), retention)
    return tuple(draw(st.lists(st.one_of(st.just(KVGroup()), window), min_size=1, max_size=3)))


@st.composite
def managers(draw, groups: bool = True) -> tuple[BlockManager, list[int], bool]:
    """A block manager after random commands (with KV cache groups at times, if
    ``groups``), its live sequences, and whether a step is in flight while the next
    plans (async scheduling)."""
    block_size = draw(st.sampled_from([1, 2, 3, 4, 16]))
    manager = BlockManager(
        draw(st.integers(4, 40)),
        block_size,
        enable_prefix_caching=draw(st.booleans()),
        kv_groups=draw(kv_groups(block_size)) if groups else (),
    )
    lag = draw(st.booleans())  # (async scheduling: a step in flight while the next plans)
    live: list[int] = []
    next_id = 0
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["allocate", "allocate", "append", "fork", "free", "step"]))
        try:
            if op == "allocate":
                prompt = draw(st.lists(st.integers(0, 2), min_size=1, max_size=24))
                computed = draw(st.sampled_from([None, 0]))
                kwargs = {} if computed is None else {"computed_tokens": computed}
                manager.allocate(next_id, np.array(prompt), salt=0, max_new_tokens=8, **kwargs)
                if computed == 0:
                    manager.mark_computed(next_id, len(prompt))
                live.append(next_id)
                next_id += 1
            elif op == "append" and live:
                seq = draw(st.sampled_from(live))
                manager.append(seq, draw(st.lists(st.integers(0, 2), max_size=5)))
            elif op == "fork" and live:
                manager.fork(draw(st.sampled_from(live)), next_id)
                live.append(next_id)
                next_id += 1
            elif op == "free" and live:
                seq = draw(st.sampled_from(live))
                manager.free(seq)
                live.remove(seq)
            elif op == "step" and live:
                manager.begin_step(lag=lag)
                manager.append_batch(np.array(live), np.zeros(len(live), np.int32))
        except OutOfBlocks:
            pass
    manager.begin_step(lag=lag)
    return manager, live, lag


@given(state=managers(), limit=st.integers(1, 40), data=st.data())
def test_append_steps_equals_append_batch_row_after_row(state, limit, data):
    manager, live, lag = state
    if not live:
        return
    seqs = np.array(data.draw(st.permutations(live)), dtype=np.int64)
    steps = manager.plain_decode_steps(seqs, limit)
    event(f"granted {'all' if steps == limit else 'some' if steps else 'none'}")
    assert 0 <= steps <= limit
    tokens = np.array(
        data.draw(
            st.lists(st.integers(0, 2), min_size=steps * seqs.size, max_size=steps * seqs.size)
        ),
        dtype=np.int32,
    ).reshape(steps, seqs.size)
    reference = copy.deepcopy(manager)
    evicted_before = reference.usage().evictions
    expected = append_steps_one_by_one(reference, seqs, tokens, lag=lag)
    assert reference.usage().evictions == evicted_before  # nothing was evicted
    usage = manager.append_steps(seqs, tokens)
    manager.check_invariants()
    assert manager.snapshot() == reference.snapshot()
    assert manager.peak_used_blocks == reference.peak_used_blocks
    assert {k: v.tolist() for k, v in usage.items()} == {k: v.tolist() for k, v in expected.items()}
    windows = any(group.sliding_window for group in manager.kv_groups)
    # One more step would copy, evict or be refused: the grant is exact, but for windows,
    # whose releases during a stretch it does not count as room (a lower bound there).
    if steps < limit and not windows:
        row = np.zeros(seqs.size, np.int32)
        evicted = reference.usage().evictions
        if lag is not None:
            reference.begin_step(lag=lag)
        try:
            moves = reference.append_batch(seqs, row)
        except OutOfBlocks:
            return
        assert moves or reference.usage().evictions > evicted


def test_a_stretch_beyond_the_grant_is_refused_and_changes_nothing():
    manager = BlockManager(3, 2)
    manager.allocate(0, np.array([1, 2]), max_new_tokens=8)
    manager.allocate(1, np.array([3]), max_new_tokens=8)
    seqs = np.array([0, 1])
    assert manager.plain_decode_steps(seqs, 10) == 1  # seq 0 takes the last free block
    before = manager.snapshot()
    with pytest.raises(InvalidRequest):
        manager.append_steps(seqs, np.zeros((2, 2), np.int32))
    assert manager.snapshot() == before


def test_a_shared_partly_filled_block_grants_no_stretch():
    manager = BlockManager(8, 4)
    manager.allocate(0, np.array([1, 2]), max_new_tokens=8)
    manager.fork(0, 1)  # both hold the half-filled block: the next write copies
    assert manager.plain_decode_steps(np.array([0, 1]), 5) == 0
    assert isinstance(manager, DecodeStretches)
