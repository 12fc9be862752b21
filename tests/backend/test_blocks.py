"""Example tests of the paged block manager that pin exact block ids, moves and counts."""

from __future__ import annotations

import numpy as np
import pytest

import backend.blocks.prefix_index as prefix_index_module
from backend.base import (
    DuplicateSequence,
    InvalidRequest,
    OutOfBlocks,
    UnknownSequence,
)
from backend.blocks import BlockManager
from backend.evictor import LeastRecentlyUsed
from backend.transfer import CPU, GPU, Transfer
from policies.context import PolicyContext, build_policy
from policies.eviction import EVICTORS


def caching(num_blocks: int, block_size: int, **kwargs) -> BlockManager:
    return BlockManager(num_blocks, block_size, enable_prefix_caching=True, **kwargs)


# -- the seed example ----------------------------------------------------------------------
def test_seed_example_35_tokens_take_3_blocks_with_13_unused_slots():
    mgr = BlockManager(8, 16)
    assert mgr.allocate(0, np.arange(35)) == 0
    assert mgr.block_table(0) == [0, 1, 2]
    usage = mgr.usage()
    assert (usage.used_blocks, usage.token_slots, usage.internal_frag_slots) == (3, 35, 13)
    assert usage.free_slots == 5 * 16
    assert mgr.read_tokens(0).tolist() == list(range(35))
    mgr.check_invariants()


def test_seed_example_table_7_2_11_after_a_free_history():
    mgr = BlockManager(12, 16)
    for seq in range(12):  # one block each: sequence i holds block i
        mgr.allocate(seq, [seq])
    for seq in (7, 2, 11):  # the free list is FIFO: freed blocks are reused in this order
        mgr.free(seq)
    mgr.allocate(100, np.arange(35))
    assert mgr.block_table(100) == [7, 2, 11]
    assert mgr.usage().internal_frag_slots == 13 + 9 * 15
    mgr.check_invariants()


# -- growth --------------------------------------------------------------------------------
def test_append_takes_a_block_only_when_the_last_is_full():
    mgr = BlockManager(4, 4)
    mgr.allocate(0, [1, 2, 3])
    assert mgr.append(0, [4]) == [] and mgr.block_table(0) == [0]
    assert mgr.append(0, [5]) == [] and mgr.block_table(0) == [0, 1]
    assert mgr.append(0, [6, 7, 8, 9, 10]) == [] and mgr.block_table(0) == [0, 1, 2]
    assert mgr.read_tokens(0).tolist() == list(range(1, 11))
    assert mgr.num_tokens(0) == 10 and mgr.usage().internal_frag_slots == 2


def test_append_batch_takes_blocks_in_batch_order_and_writes_every_token():
    mgr = BlockManager(8, 2)
    for seq, prompt in enumerate(([1, 2], [3], [4, 5])):
        mgr.allocate(seq, prompt)  # tables [0], [1], [2]
    assert mgr.blocks_needed_for_batch(np.array([2, 1, 0])) == 2
    assert mgr.append_batch(np.array([2, 1, 0]), np.array([50, 30, 10])) == []
    assert [mgr.block_table(s) for s in range(3)] == [[0, 4], [1], [2, 3]]
    assert [mgr.read_tokens(s).tolist() for s in range(3)] == [[1, 2, 10], [3, 30], [4, 5, 50]]
    mgr.check_invariants()


def test_sequence_ids_far_beyond_the_initial_capacity():
    mgr = BlockManager(4, 4)
    mgr.allocate(10_000, [7])
    mgr.append_batch(np.array([10_000]), np.array([8]))
    assert mgr.read_tokens(10_000).tolist() == [7, 8]


# -- fork and copy-on-write -----------------------------------------------------------------
def test_fork_shares_every_block_and_cow_copies_the_partly_filled_last_block():
    mgr = BlockManager(6, 4)
    mgr.allocate(0, [1, 2, 3, 4, 5, 6])  # [0, 1], block 1 half full
    assert mgr.fork(0, 1) == []
    assert mgr.block_table(1) == [0, 1] and mgr.usage().used_blocks == 2
    assert mgr.usage().token_slots == 6  # shared blocks count once

    assert mgr.append(1, [9]) == [Transfer(1, 2)]
    assert mgr.block_table(1) == [0, 2] and mgr.block_table(0) == [0, 1]
    assert mgr.read_tokens(1).tolist() == [1, 2, 3, 4, 5, 6, 9]
    assert mgr.read_tokens(0).tolist() == [1, 2, 3, 4, 5, 6]
    # The parent is now the only reader of block 1: it writes in place.
    assert mgr.append(0, [7]) == [] and mgr.block_table(0) == [0, 1]
    assert mgr.read_tokens(0).tolist() == [1, 2, 3, 4, 5, 6, 7]
    mgr.check_invariants()


def test_full_shared_blocks_are_never_copied():
    mgr = BlockManager(6, 4)
    mgr.allocate(0, np.arange(8))  # two full blocks
    mgr.fork(0, 1)
    assert mgr.append(1, [9]) == [] and mgr.block_table(1) == [0, 1, 2]
    assert mgr.block_table(0) == [0, 1]


def test_batch_cow_copies_once_when_every_sharer_writes():
    mgr = BlockManager(6, 4)
    mgr.allocate(0, [1, 2])
    mgr.fork(0, 1)
    assert mgr.blocks_needed_for_batch(np.array([0, 1])) == 1
    assert mgr.append_batch(np.array([0, 1]), np.array([3, 4])) == [Transfer(0, 1)]
    assert mgr.block_table(0) == [1] and mgr.block_table(1) == [0]
    assert mgr.read_tokens(0).tolist() == [1, 2, 3] and mgr.read_tokens(1).tolist() == [1, 2, 4]
    mgr.check_invariants()


# -- prefix caching -------------------------------------------------------------------------
def test_prefix_hits_share_full_blocks_and_are_counted_in_tokens():
    mgr = caching(8, 4)
    prompt = list(range(10))
    assert mgr.allocate(0, prompt) == 0 and mgr.block_table(0) == [0, 1, 2]
    assert mgr.cached_prefix_tokens(prompt) == 8
    assert mgr.allocate(1, prompt) == 8 and mgr.block_table(1) == [0, 1, 3]
    assert mgr.prefix_cache_stats == (20, 8) and mgr.prefix_cache_stats.hit_rate == 0.4
    assert mgr.usage().used_blocks == 4

    mgr.free(0)
    mgr.free(1)  # blocks 0 and 1 stay cached; the partial blocks 2, 3 go to the free list
    assert (mgr.num_cached_blocks, mgr.num_free_blocks) == (2, 6)
    assert mgr.usage().cached_slots == 8
    assert mgr.allocate(2, prompt + [99]) == 8 and mgr.block_table(2) == [0, 1, 4]
    assert mgr.num_cached_blocks == 0
    mgr.check_invariants()


def test_output_tokens_are_cached_so_the_next_turn_hits():
    mgr = caching(8, 4)
    mgr.allocate(0, [1, 2, 3, 4, 5, 6])
    mgr.append(0, [7])
    mgr.append_batch(np.array([0]), np.array([8]))  # block 1 becomes full here
    mgr.free(0)
    assert mgr.allocate(1, [1, 2, 3, 4, 5, 6, 7, 8, 9]) == 8


def test_salts_never_share():
    mgr = caching(8, 4)
    mgr.allocate(0, np.arange(8), salt=0)
    assert mgr.cached_prefix_tokens(np.arange(8), salt=1) == 0
    assert mgr.allocate(1, np.arange(8), salt=1) == 0
    assert set(mgr.block_table(0)).isdisjoint(mgr.block_table(1))
    # Same salt shares, except the block holding the prompt's last token (never reused).
    assert mgr.allocate(2, np.arange(8), salt=0) == 4


def test_block_of_the_last_prompt_token_is_never_a_hit():
    mgr = caching(8, 4)
    mgr.allocate(0, np.arange(12))
    # A block-aligned, fully cached prompt still computes its last token privately.
    assert mgr.cached_prefix_tokens(np.arange(8)) == 4
    assert mgr.allocate(1, np.arange(8)) == 4
    assert mgr.block_table(1)[0] == mgr.block_table(0)[0]
    assert mgr.block_table(1)[1] != mgr.block_table(0)[1]
    assert mgr.allocate(2, np.arange(9)) == 8


def test_blocks_are_published_only_once_computed():
    mgr = caching(16, 4)
    prompt = np.arange(16)
    mgr.allocate(0, prompt, computed_tokens=0)  # admitted whole, prefilled in chunks
    assert mgr.cached_prefix_tokens(prompt) == 0  # nothing computed: nothing to hit
    mgr.mark_computed(0, 6)  # first chunk: one full block computed
    assert mgr.cached_prefix_tokens(prompt) == 4
    mgr.mark_computed(0, 16)
    assert mgr.cached_prefix_tokens(np.arange(17)) == 16
    mgr.append(0, [99, 98, 97, 96])  # decode tokens fill a block: published as they come
    assert mgr.cached_prefix_tokens(np.concatenate([prompt, [99, 98, 97, 96, 0]])) == 20
    mgr.check_invariants()


def test_decode_blocks_wait_behind_unpublished_prompt_blocks():
    mgr = caching(16, 2)
    mgr.allocate(0, [1, 2, 3, 4], computed_tokens=2)
    mgr.append(0, [5, 6])  # sealed, but block 1 is still unpublished: so is this one
    assert mgr.cached_prefix_tokens([1, 2, 3, 4, 5, 6, 7]) == 2
    mgr.mark_computed(0, 6)
    assert mgr.cached_prefix_tokens([1, 2, 3, 4, 5, 6, 7]) == 6
    mgr.check_invariants()


def test_a_prefix_of_the_last_looked_up_prompt_gets_its_own_keys():
    # First-chunk admission: look the whole prompt up, then allocate a prefix of it. The
    # remembered keys are cut to the prefix's full blocks (check_invariants recomputes
    # every key chain from the tokens).
    mgr = caching(16, 2)
    mgr.allocate(0, [1, 2, 3, 4, 5])
    prompt = [1, 2, 3, 4, 6, 7, 8]
    assert mgr.cached_prefix_tokens(prompt) == 4
    assert mgr.allocate(1, prompt[:5]) == 4
    assert mgr.allocate(2, prompt[:3]) == 2
    mgr.check_invariants()


def test_only_the_longest_run_from_the_start_is_reused():
    mgr = caching(8, 2)
    mgr.allocate(0, [1, 2, 3, 4, 5, 6])
    assert mgr.cached_prefix_tokens([1, 2, 9, 9, 5, 6]) == 2  # same 3rd block, new parent
    assert mgr.cached_prefix_tokens([9, 9, 3, 4]) == 0


def test_refused_allocation_does_not_count_its_own_hits_as_evictable():
    mgr = caching(4, 2)
    mgr.allocate(0, [1, 2, 3, 4])  # blocks 0, 1
    mgr.free(0)  # both cached-evictable
    mgr.allocate(1, [5, 6, 7, 8])  # blocks 2, 3: free list empty, 2 cached
    before = mgr.snapshot()
    # Hits blocks 0, 1 and needs one more: the only evictable blocks are its own hits.
    assert not mgr.can_allocate([1, 2, 3, 4, 9])
    with pytest.raises(OutOfBlocks) as refused:
        mgr.allocate(2, [1, 2, 3, 4, 9])
    assert (refused.value.needed, refused.value.available) == (1, 0)
    assert mgr.snapshot() == before

    mgr.free(1)  # blocks 3, 2 cached (tail first)
    assert mgr.allocate(2, [1, 2, 3, 4, 9]) == 4
    assert mgr.block_table(2) == [0, 1, 3]  # LRU evicts the tail block 3 first
    mgr.check_invariants()


def test_evict_drops_keys_in_policy_order():
    mgr = caching(6, 1)
    mgr.allocate(0, [1, 2, 3])
    mgr.free(0)  # released tail first: 2, 1, 0
    assert mgr.evict(2) == [2, 1]
    assert mgr.cached_prefix_tokens([1, 2, 3]) == 1
    assert mgr.evict(5) == [0] and mgr.evict() == []
    assert mgr.num_free_blocks == 6
    mgr.check_invariants()


@pytest.mark.parametrize(
    ("policy", "order"),
    [("lru", [2, 0, 1]), ("fifo", [0, 1, 2]), ("lfu", [2, 1, 0]), ("reuse-weighted", [2, 1, 0])],
)
def test_eviction_order_through_the_manager(policy, order):
    context = PolicyContext.standalone(block_size=2, num_blocks=6)
    mgr = caching(6, 2, evictor=build_policy(EVICTORS, policy, {}, context))
    for seq, token in enumerate((1, 2, 3)):
        mgr.allocate(seq, [token, token])  # blocks 0, 1, 2
    for seq in range(3):
        mgr.free(seq)
    for seq, token in ((3, 1), (4, 1), (5, 2)):  # block 0 hit twice, block 1 once
        # (a third token, since the block holding the last prompt token is never a hit;
        # its partly filled block goes back to the free list, never to the cache)
        assert mgr.allocate(seq, [token, token, 7]) == 2
        mgr.free(seq)
    assert mgr.evict(3) == order


def test_a_hash_collision_cannot_alias_different_tokens_or_salts(monkeypatch):
    # Make every block collide (one key for any tokens and any salt), then check that a
    # hit is refused unless the tokens and the salt match.
    monkeypatch.setattr(
        prefix_index_module, "chain_keys", lambda digests, salt, parent=0: [7] * len(digests)
    )
    mgr = caching(16, 2)
    assert mgr.allocate(0, [1, 2, 3]) == 0  # publishes block [1, 2] under key 7
    assert mgr.cached_prefix_tokens([3, 4, 5]) == 0
    assert mgr.allocate(1, [3, 4, 5]) == 0 and mgr.read_tokens(1).tolist() == [3, 4, 5]
    assert mgr.cached_prefix_tokens([1, 2, 5], salt=1) == 0
    assert mgr.allocate(2, [1, 2, 5], salt=1) == 0
    assert mgr.allocate(3, [1, 2, 5]) == 2  # same tokens, same salt: the real hit
    # The second [1, 2] block has the same key and tokens, but sits at another position.
    assert mgr.allocate(4, [1, 2, 1, 2, 5]) == 2
    assert len(set(mgr.block_table(4))) == 3
    mgr.check_invariants()


# -- swap ------------------------------------------------------------------------------------
def test_swap_round_trip_moves_and_contents():
    mgr = BlockManager(4, 2, num_cpu_blocks=3)
    mgr.allocate(0, [1, 2, 3])  # blocks 0, 1
    mgr.allocate(1, [4])  # block 2
    assert mgr.can_swap_out(0)
    assert mgr.swap_out(0) == [Transfer(0, 0, GPU, CPU), Transfer(1, 1, GPU, CPU)]
    assert mgr.is_swapped(0) and mgr.block_table(0) == [0, 1]
    assert mgr.read_tokens(0).tolist() == [1, 2, 3]
    assert mgr.num_free_blocks == 3 and mgr.num_free_cpu_blocks == 1
    mgr.check_invariants()

    assert mgr.can_swap_in(0)
    # The free list is [3, 1, 0]: block 3 was never used, then the release (tail first).
    assert mgr.swap_in(0) == [Transfer(0, 3, CPU, GPU), Transfer(1, 1, CPU, GPU)]
    assert not mgr.is_swapped(0) and mgr.read_tokens(0).tolist() == [1, 2, 3]
    assert mgr.num_free_cpu_blocks == 3
    mgr.append(0, [5])
    assert mgr.read_tokens(0).tolist() == [1, 2, 3, 5]
    mgr.check_invariants()


def test_held_blocks_and_swapping_several_sequences_out_together():
    mgr = BlockManager(8, 2, num_cpu_blocks=3)
    mgr.allocate(0, [1, 2, 3])  # 2 blocks
    mgr.fork(0, 1)  # shares both: swapping both out takes 4 CPU blocks
    mgr.allocate(2, [4])  # 1 block
    assert [mgr.held_blocks(s) for s in (0, 1, 2)] == [2, 2, 1]
    assert mgr.can_swap_out(0, 2) and not mgr.can_swap_out(0, 1)
    mgr.swap_out(2)
    assert mgr.held_blocks(2) == 0 and not mgr.can_swap_out(0, 2)
    mgr.swap_out(0)  # CPU: 3 blocks used; device: 1 (sequence 1's) of 8 in use
    assert mgr.can_swap_in(0, 2) and not mgr.can_swap_in(0, 1)
    mgr.allocate(3, list(range(11)))  # 6 blocks: the pool is full, sequence 0 needs 2
    assert not mgr.can_swap_in(0) and not mgr.can_swap_in(2, 0)


def test_swap_refused_cleanly_when_either_pool_is_full():
    mgr = BlockManager(3, 2, num_cpu_blocks=1)
    mgr.allocate(0, [1, 2, 3])  # blocks 0, 1: needs 2 CPU blocks
    before = mgr.snapshot()
    assert not mgr.can_swap_out(0)
    with pytest.raises(OutOfBlocks):
        mgr.swap_out(0)
    assert mgr.snapshot() == before

    mgr.allocate(1, [1])  # block 2
    assert mgr.swap_out(1) == [Transfer(2, 0, GPU, CPU)]
    mgr.allocate(2, [5, 6])  # takes block 2 again: the device pool is full
    before = mgr.snapshot()
    assert not mgr.can_swap_in(1)
    with pytest.raises(OutOfBlocks):
        mgr.swap_in(1)
    assert mgr.snapshot() == before
    mgr.free(1)  # freeing a swapped sequence returns its CPU block
    assert mgr.num_free_cpu_blocks == 1


def test_refused_allocation_of_a_new_high_id_changes_nothing():
    # The per-sequence arrays start with room for 64 ids; a refused allocation of id 100
    # must not grow them (a refused command changes nothing, bit for bit).
    mgr = BlockManager(1, 4)
    before = mgr.snapshot()
    with pytest.raises(OutOfBlocks):
        mgr.allocate(100, list(range(9)))
    assert mgr.snapshot() == before
    assert mgr.allocate(100, [1]) == 0 and mgr.read_tokens(100).tolist() == [1]


def test_refused_append_changes_nothing():
    mgr = BlockManager(2, 2)
    mgr.allocate(0, [1, 2, 3, 4])
    before = mgr.snapshot()
    assert not mgr.can_append(0)
    with pytest.raises(OutOfBlocks):
        mgr.append(0, [5])
    with pytest.raises(OutOfBlocks):
        mgr.append_batch(np.array([0]), np.array([5]))
    assert mgr.snapshot() == before


def test_peak_and_usage_split():
    mgr = BlockManager(8, 4)
    mgr.allocate(0, np.arange(9))
    mgr.allocate(1, np.arange(2))
    mgr.free(0)
    usage = mgr.usage()
    assert mgr.peak_used_blocks == 4 and usage.used_blocks == 1
    assert (usage.token_slots, usage.internal_frag_slots, usage.free_slots) == (2, 2, 28)
    assert usage.reserved_slots == usage.external_frag_slots == 0


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_blocks": 0, "block_size": 16},
        {"num_blocks": 4, "block_size": 0},
        {"num_blocks": -1, "block_size": 16},
        {"num_blocks": 4, "block_size": -2},
        {"num_blocks": 4, "block_size": 16, "num_cpu_blocks": -1},
        {"num_blocks": 2.5, "block_size": 16},
    ],
)
def test_bad_sizes(kwargs):
    with pytest.raises(InvalidRequest, match="must be an integer"):
        BlockManager(**kwargs)


def test_lru_is_the_default_evictor():
    assert isinstance(BlockManager(4, 4).evictor, LeastRecentlyUsed)


@pytest.fixture
def mgr() -> BlockManager:
    mgr = BlockManager(8, 2, num_cpu_blocks=4)
    mgr.allocate(0, [1, 2, 3])
    return mgr


def test_unknown_sequence(mgr):
    for command in (mgr.free, mgr.read_tokens, mgr.block_table, mgr.swap_out, mgr.swap_in):
        with pytest.raises(UnknownSequence, match="sequence 5 is not live"):
            command(5)
    with pytest.raises(UnknownSequence):
        mgr.append(5, [1])
    with pytest.raises(UnknownSequence):
        mgr.fork(5, 6)
    with pytest.raises(UnknownSequence):
        mgr.append_batch(np.array([0, 5]), np.array([1, 1]))


def test_a_non_integer_id_is_never_a_live_sequence(mgr):
    for bad in (0.0, 0.5, True, "0"):
        with pytest.raises(UnknownSequence):
            mgr.free(bad)
    assert mgr.read_tokens(0).tolist() == [1, 2, 3]


def test_double_free_and_append_after_free(mgr):
    mgr.free(0)
    with pytest.raises(UnknownSequence):
        mgr.free(0)
    with pytest.raises(UnknownSequence):
        mgr.append(0, [4])
    mgr.check_invariants()


def test_duplicate_ids(mgr):
    with pytest.raises(DuplicateSequence, match="already live"):
        mgr.allocate(0, [1])
    mgr.allocate(1, [1])
    with pytest.raises(DuplicateSequence):
        mgr.fork(0, 1)
    with pytest.raises(InvalidRequest, match="duplicate"):
        mgr.append_batch(np.array([0, 1, 0]), np.array([1, 2, 3]))


def test_a_batch_checked_before_is_checked_again_after_a_state_change(mgr):
    # append_batch remembers the last id batch that passed its checks; freeing, swapping
    # out or forking must invalidate that memo, however identical the ids array is.
    mgr.allocate(1, [4])
    ids = np.array([0, 1])
    mgr.append_batch(ids, np.array([5, 6]))
    mgr.swap_out(1)
    with pytest.raises(InvalidRequest, match="swapped out"):
        mgr.append_batch(ids, np.array([7, 8]))
    mgr.swap_in(1)
    mgr.append_batch(ids, np.array([7, 8]))
    mgr.free(1)
    before = mgr.snapshot()
    with pytest.raises(UnknownSequence):
        mgr.append_batch(ids, np.array([9, 9]))
    assert mgr.snapshot() == before
    assert mgr.read_tokens(0).tolist() == [1, 2, 3, 5, 7]


@pytest.mark.parametrize("salt", [2**63, -(2**63) - 1, 1.5, True])
def test_bad_salts(mgr, salt):
    with pytest.raises(InvalidRequest, match="salt"):
        mgr.allocate(1, [1], salt=salt)
    with pytest.raises(InvalidRequest, match="salt"):
        mgr.can_allocate([1], salt=salt)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [([], "empty prompt"), ([1, -2], r"\[0, 2\*\*31"), ([[1, 2]], "1-D"), ([1.5], "integers")],
)
def test_bad_prompts(mgr, prompt, message):
    with pytest.raises(InvalidRequest, match=message):
        mgr.allocate(1, prompt)


def test_bad_appends(mgr):
    with pytest.raises(InvalidRequest):
        mgr.append(0, [-1])
    with pytest.raises(InvalidRequest, match="equal length"):
        mgr.append_batch(np.array([0]), np.array([1, 2]))
    with pytest.raises(InvalidRequest, match="seq_ids and token_ids must be 1-D"):
        mgr.blocks_needed_for_batch(np.array([[0]]))
    with pytest.raises(InvalidRequest):
        mgr.append_batch(np.array([0]), np.array([-1]))
    with pytest.raises(InvalidRequest):
        mgr.allocate(-1, [1])
    with pytest.raises(InvalidRequest):
        mgr.evict(-1)
    assert mgr.read_tokens(0).tolist() == [1, 2, 3]


def test_swap_state_errors(mgr):
    with pytest.raises(InvalidRequest, match="not swapped out"):
        mgr.swap_in(0)
    mgr.swap_out(0)
    for command, args in ((mgr.swap_out, (0,)), (mgr.append, (0, [1])), (mgr.fork, (0, 1))):
        with pytest.raises(InvalidRequest, match="swapped out"):
            command(*args)
    with pytest.raises(InvalidRequest):
        mgr.append_batch(np.array([0]), np.array([1]))


def test_swap_in_shares_blocks_still_cached_instead_of_copying():
    mgr = caching(8, 2, num_cpu_blocks=4)
    mgr.allocate(0, [1, 2, 3, 4, 5])  # blocks 0, 1 full (cached keys), block 2 partial
    mgr.fork(0, 1)
    assert mgr.swap_out(1) == [Transfer(b, b, GPU, CPU) for b in (0, 1, 2)]
    assert mgr.num_used_blocks == 3  # the parent still holds every block
    # The full blocks are shared again (no copy); only the partial block comes back.
    assert mgr.swap_in(1) == [Transfer(2, 3, CPU, GPU)]
    assert mgr.block_table(1) == [0, 1, 3] and mgr.read_tokens(1).tolist() == [1, 2, 3, 4, 5]
    assert mgr.prefix_cache_stats == (5, 0)  # a swap-in is not a prompt lookup
    mgr.check_invariants()
