"""The paged manager with several KV cache groups and sliding windows (kv_groups.py,
sliding_window.py): what a window releases and when, hits that must hold in every
group, copy-on-write per group, refusals that change nothing."""

from __future__ import annotations

import numpy as np
import pytest

from backend.base import NULL_BLOCK, InvalidRequest, KVGroup, OutOfBlocks
from backend.blocks import BlockManager
from backend.blocks.kv_groups import KVGroups
from backend.blocks.one_group import OneGroup, OneGroupNoCache

FULL, SLIDING_8 = KVGroup(), KVGroup(sliding_window=8)


def manager(groups, num_blocks=64, block_size=4, caching=False) -> BlockManager:
    return BlockManager(
        num_blocks, block_size, enable_prefix_caching=caching, kv_groups=tuple(groups)
    )


def grow(alloc: BlockManager, seq: int, tokens: list[int]) -> None:
    for token in tokens:
        alloc.append(seq, [token])
        alloc.check_invariants()


def test_a_window_releases_the_blocks_wholly_behind_it_and_reads_back_the_rest():
    alloc = manager([SLIDING_8])
    alloc.allocate(0, list(range(4)))
    for token in range(4, 30):
        alloc.append(0, [token])
        alloc.check_invariants()
        held = token + 1
        # what the next token computes reads tokens held - 8 .. held - 1; a block wholly
        # before held - 1 - 8 + 1 (the window of the token just written) may be released
        read = alloc.read_tokens(0).tolist()
        start = max(0, token - 8 + 1)
        assert read[start:] == list(range(start, held)), f"window lost at {held} tokens"
        released = sum(block == NULL_BLOCK for block in alloc.block_table(0))
        assert released == max(0, token - 8 + 1) // 4  # released as soon as allowed
        assert alloc.held_blocks(0) == len(alloc.block_table(0)) - released
    # a window of 8 tokens in blocks of 4 never holds more than 3 blocks
    assert alloc.held_blocks(0) <= 3 and alloc.num_used_blocks == alloc.held_blocks(0)


def test_a_window_smaller_than_a_block_releases_every_block_behind_the_last():
    alloc = manager([KVGroup(sliding_window=2)])
    alloc.allocate(0, list(range(9)))
    grow(alloc, 0, list(range(9, 21)))
    table = alloc.block_table(0)
    assert table[:-2] == [NULL_BLOCK] * (len(table) - 2) and alloc.held_blocks(0) <= 2


def test_a_window_longer_than_the_context_releases_nothing():
    windowed, full = manager([KVGroup(sliding_window=10_000)]), manager([FULL])
    for alloc in (windowed, full):
        alloc.allocate(0, list(range(7)))
        grow(alloc, 0, list(range(7, 40)))
    assert windowed.block_table(0) == full.block_table(0)
    assert windowed.read_tokens(0).tolist() == full.read_tokens(0).tolist()


def test_groups_take_their_tables_from_one_pool_and_each_reads_back_its_tokens():
    alloc = manager([FULL, SLIDING_8, FULL])
    alloc.allocate(0, list(range(10)))
    grow(alloc, 0, list(range(10, 25)))
    tables = alloc.block_tables(0)
    assert len(tables) == 3 and tables[0] == alloc.block_table(0)
    held = [block for table in tables for block in table if block != NULL_BLOCK]
    assert len(set(held)) == len(held) == alloc.held_blocks(0) == alloc.num_used_blocks
    assert alloc.read_tokens(0, 0).tolist() == list(range(25))
    assert alloc.read_tokens(0, 2).tolist() == list(range(25))
    window = alloc.read_tokens(0, 1).tolist()
    assert window[16:] == list(range(16, 25)) and set(window[:16]) == {NULL_BLOCK}


def test_a_hit_must_hold_in_every_group():
    alloc = manager([FULL, SLIDING_8], caching=True)
    prompt = list(range(100, 116))  # four blocks
    alloc.allocate(0, prompt)  # both groups publish blocks 0-3
    alloc.append(0, [7])  # the window releases blocks 0 and 1 of group 1: cached
    assert sorted(alloc.evict(2)) == sorted(
        set(range(8)) - {*alloc.block_tables(0)[0], *alloc.block_tables(0)[1]}
    )
    alloc.check_invariants()
    # full attention alone would serve 8 tokens; the window has no block 0 or 1
    assert alloc.cached_prefix_tokens(prompt[:8] + [1]) == 0
    assert alloc.cached_prefix_tokens(prompt[:12] + [1]) == 0  # block 2 alone: short
    # blocks 2 and 3 hold the window before token 16: both groups serve 16 tokens
    assert alloc.cached_prefix_tokens(prompt + [1]) == 16
    assert alloc.allocate(1, prompt + [1]) == 16
    first, second = alloc.block_tables(0), alloc.block_tables(1)
    assert second[0][:4] == first[0][:4]  # full attention shares all four
    assert second[1][:2] == [NULL_BLOCK] * 2 and second[1][2:4] == first[1][2:4]
    alloc.check_invariants()


def test_copy_on_write_happens_in_every_group_and_names_its_group():
    alloc = manager([FULL, KVGroup(sliding_window=16)])
    alloc.allocate(0, list(range(6)))
    alloc.fork(0, 1)
    moves = alloc.append(1, [99])
    assert sorted(move.group for move in moves) == [0, 1]
    for move in moves:
        assert alloc.block_tables(1)[move.group][-1] == move.dst
        assert alloc.block_tables(0)[move.group][-1] == move.src
    alloc.check_invariants()
    assert alloc.read_tokens(0, 1).tolist() == list(range(6))
    assert alloc.read_tokens(1, 1).tolist() == list(range(6)) + [99]


def test_a_window_gives_back_a_block_before_its_sequence_grows():
    # two blocks, both held: only the block the window leaves behind lets it grow
    alloc = manager([KVGroup(sliding_window=4)], num_blocks=2)
    alloc.allocate(0, list(range(8)))
    assert alloc.num_free_blocks == 0 and alloc.can_append(0)
    alloc.append(0, [8])
    assert alloc.block_table(0)[0] == NULL_BLOCK and alloc.num_used_blocks == 2
    alloc.check_invariants()


def test_a_refused_growth_changes_nothing():
    alloc = manager([FULL, SLIDING_8], num_blocks=4)
    alloc.allocate(0, list(range(8)))  # two blocks in each group: the pool is full
    before = alloc.snapshot()
    assert not alloc.can_append(0)
    with pytest.raises(OutOfBlocks):
        alloc.append(0, [8])
    with pytest.raises(OutOfBlocks):
        alloc.append_batch(np.array([0]), np.array([8], np.int32))
    assert alloc.snapshot() == before


def test_a_decode_batch_releases_and_grows_every_member():
    batch, single = manager([FULL, SLIDING_8]), manager([FULL, SLIDING_8])
    for alloc in (batch, single):
        alloc.allocate(0, list(range(5)))
        alloc.allocate(1, list(range(50, 61)))
    for step in range(20):
        batch.append_batch(np.array([0, 1]), np.array([step, 100 + step], np.int32))
        single.append(0, [step])
        single.append(1, [100 + step])
        batch.check_invariants()
    for seq in (0, 1):
        assert batch.block_tables(seq) == single.block_tables(seq)


def test_freeing_returns_every_group_s_blocks():
    alloc = manager([FULL, SLIDING_8, SLIDING_8])
    alloc.allocate(0, list(range(30)))
    grow(alloc, 0, [1, 2, 3])
    alloc.free(0)
    alloc.check_invariants()
    assert alloc.num_free_blocks == 64 and alloc.usage().token_slots == 0


def test_sizes_count_every_group():
    alloc = manager([FULL, SLIDING_8])
    assert alloc.num_kv_groups == 2 and alloc.kv_groups == (FULL, SLIDING_8)
    assert alloc.blocks_for_tokens(9) == 6
    assert alloc.blocks_to_grow(8, 9) == 2 and alloc.tokens_that_fit(8, 2) == 4


@pytest.mark.parametrize(
    "groups, build, message",
    [
        ([KVGroup(sliding_window=0)], {}, "sliding_window must be a positive int"),
        ([KVGroup(sliding_window=True)], {}, "sliding_window must be a positive int"),
        (["full"], {}, "must be a KVGroup"),
        ([FULL, SLIDING_8], {"num_cpu_blocks": 4}, "swap space is not modelled"),
    ],
)
def test_bad_groups_are_refused(groups, build, message):
    with pytest.raises(InvalidRequest, match=message):
        BlockManager(8, 4, kv_groups=groups, **build)


def test_a_refused_growth_still_releases_its_window_as_vllm_does():
    # at 8 tokens a 5-token window passes block 0 just as the sequence needs a new block
    # in each group: the release comes first (vLLM frees it before it checks the pool)
    alloc = manager([FULL, KVGroup(sliding_window=5)], num_blocks=4)
    alloc.allocate(0, list(range(8)))  # two blocks in each group: the pool is full
    with pytest.raises(OutOfBlocks):
        alloc.append(0, [8])  # two blocks needed, one given back
    assert alloc.block_tables(0)[1][0] == NULL_BLOCK and alloc.num_free_blocks == 1
    assert alloc.num_tokens(0) == 8
    alloc.check_invariants()


def test_a_member_never_uses_the_blocks_a_later_members_window_gives_back():
    # sequence 0 needs a block in each group; only sequence 1's window frees one: vLLM's
    # running loop reaches sequence 0 first and finds the pool short
    alloc = manager([FULL, KVGroup(sliding_window=4)], num_blocks=7)
    alloc.allocate(0, list(range(4)))  # 1 + 1, held 4: at a boundary
    alloc.allocate(1, list(range(7)))  # 2 + 2, held 7: its window passes block 0 next
    assert alloc.num_free_blocks == 1
    with pytest.raises(OutOfBlocks):
        alloc.append_batch(np.array([0, 1]), np.array([4, 7], np.int32))
    alloc.check_invariants()
    assert alloc.block_tables(1)[1][0] != NULL_BLOCK  # (not reached: not released)
    alloc.free(0)  # the victim: the rest fits
    alloc.append_batch(np.array([1]), np.array([7], np.int32))
    alloc.check_invariants()


def test_admission_caps_a_windows_share_at_its_window_and_the_tokens_in_flight():
    # a 40-token prompt fills 10 blocks a group; prefilled in chunks of at most 8 tokens,
    # a 4-token window never holds more than ceil((4 - 1 + 8) / 4) + 1 = 4 of them
    alloc = manager([FULL, KVGroup(sliding_window=4)], num_blocks=15)
    prompt = list(range(40))
    assert not alloc.can_allocate(prompt)  # 20 blocks
    assert alloc.can_admit(prompt, in_flight_tokens=8)  # 10 + 4
    assert not alloc.can_admit(prompt, in_flight_tokens=24)  # 10 + 8
    full = manager([FULL], num_blocks=15)
    assert full.can_admit(prompt, in_flight_tokens=8) == full.can_allocate(prompt)


def test_a_decode_step_that_evicts_serves_each_member_after_its_own_release():
    # vLLM's running loop frees a request's out-of-window blocks right before the
    # request allocates. Sequence 0 crosses a boundary (a block in each group) with one
    # free block left: it releases its window's first block (kept: the tail before its
    # prompt's end, so cached) and must evict a cached block for its second. Only later
    # does sequence 1 release an unkept window block, which would have spared the
    # eviction had every member released first.
    alloc = manager([FULL, KVGroup(sliding_window=2, retention_interval=0)], 11, 2, True)
    alloc.allocate(0, [1, 1, 0, 1], max_new_tokens=8)
    alloc.allocate(1, [0, 1, 0, 1, 0], max_new_tokens=8)
    assert alloc.usage().free_blocks == 1
    alloc.append_batch(np.array([0, 1]), np.zeros(2, np.int32))
    alloc.check_invariants()
    assert alloc.usage().evictions == 1


@pytest.mark.parametrize("told", [True, False])
def test_a_window_keeps_the_shared_prefix_junction_it_is_told(told):
    # Full attention caches all 8 tokens of the first prompt; the window (sparse
    # retention) only the tail before its end, so the second request hits 6 tokens and
    # its lookup shows a shared prefix of 8 that the window lacks. Told that junction
    # (vLLM reads it at the lookup, before the allocation can evict what showed it),
    # the second request keeps the window block before it, and a third request
    # sharing those 8 tokens hits all of them.
    alloc = manager([FULL, KVGroup(sliding_window=2, retention_interval=0)], 40, 2, True)
    prefix = [1, 2, 3, 4, 5, 6, 7, 8]
    alloc.allocate(0, prefix, max_new_tokens=4)
    alloc.free(0)
    second = prefix + [9, 9, 9, 9]
    assert alloc.cached_prefix_tokens(second) == 6
    assert alloc.shared_prefix_tokens(second) == 8
    junction = alloc.shared_prefix_tokens(second) if told else 0
    alloc.allocate(1, second, max_new_tokens=4, computed_tokens=6)
    alloc.retain_prefix_tails(1, num_prompt_tokens=12, shared_prefix_tokens=junction)
    alloc.mark_computed(1, 12)
    alloc.free(1)
    alloc.check_invariants()
    assert alloc.cached_prefix_tokens(prefix + [7, 7, 7, 7]) == (8 if told else 6)


@pytest.mark.parametrize(
    "groups, caching, shape",
    [
        ((), True, OneGroup),
        ((), False, OneGroupNoCache),
        ([FULL, SLIDING_8], True, KVGroups),
        ([SLIDING_8], False, KVGroups),
    ],
)
def test_the_manager_picks_one_coordinator_per_shape_when_built(groups, caching, shape):
    """vLLM's get_kv_cache_coordinator: the shape decides the class once; every command
    goes to it without asking the shape again."""
    alloc = BlockManager(8, 4, enable_prefix_caching=caching, kv_groups=groups)
    assert type(alloc._coord) is shape
    alloc.allocate(0, list(range(9)))  # computed: its two full blocks are published
    assert alloc.cached_prefix_tokens(list(range(9))) == (8 if caching else 0)
    alloc.check_invariants()
