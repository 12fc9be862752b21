"""Example tests pinning the contiguous baselines' placements, sizes and usage split."""

import numpy as np
import pytest

from backend.base import (
    Allocator,
    DuplicateSequence,
    InvalidRequest,
    OutOfBlocks,
    ReservingAllocator,
    UnknownSequence,
)
from backend.blocks import BlockManager
from backend.contiguous import ContiguousAllocator, make_contiguous
from backend.transfer import CPU, GPU, Transfer


def oracle(num_slots=16, max_model_len=16, num_cpu_slots=0):
    return ContiguousAllocator(
        num_slots, mode="oracle", max_model_len=max_model_len, num_cpu_slots=num_cpu_slots
    )


def prompt(n, first=1):
    return list(range(first, first + n))


# -- reservation sizes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output_len", "expected"),
    [(0, 10), (1, 11), (2, 12), (3, 14), (4, 14), (5, 18), (8, 18), (9, 26), (17, 42)],
)
def test_pow2_reserves_prompt_plus_next_power_of_two(output_len, expected):
    alloc = ContiguousAllocator(64, mode="pow2", max_model_len=64)
    assert alloc.reservation_size(10, output_len) == expected


def test_pow2_is_capped_at_max_model_len():
    alloc = ContiguousAllocator(64, mode="pow2", max_model_len=40)
    assert alloc.reservation_size(10, 17) == 40  # prompt + 32 would be 42


@pytest.mark.parametrize(("prompt_len", "output_len"), [(1, 0), (3, 5), (10, 6), (7, 9)])
def test_oracle_reserves_exactly_prompt_plus_output(prompt_len, output_len):
    alloc = oracle()
    assert alloc.reservation_size(prompt_len, output_len) == prompt_len + output_len
    alloc.allocate(0, prompt(prompt_len), max_new_tokens=output_len)
    assert alloc.block_table(0) == [0, prompt_len + output_len]


def test_max_reserves_max_model_len_whatever_the_request():
    alloc = ContiguousAllocator(32, mode="max", max_model_len=12)
    alloc.allocate(0, prompt(2), max_new_tokens=1)
    alloc.allocate(1, prompt(5), max_new_tokens=7)
    assert alloc.block_table(0) == [0, 12]
    assert alloc.block_table(1) == [12, 12]
    assert not alloc.can_allocate(prompt(1), max_new_tokens=1)  # 8 slots left < 12


def test_factory_maps_names_to_modes():
    for name, mode in [
        ("contiguous-max", "max"),
        ("contiguous-pow2", "pow2"),
        ("contiguous-oracle", "oracle"),
    ]:
        alloc = make_contiguous(name, 8, max_model_len=8, num_cpu_slots=4)
        assert (alloc.mode, alloc.num_blocks, alloc.block_size) == (mode, 8, 1)
        assert alloc.num_cpu_blocks == 4
    with pytest.raises(InvalidRequest, match="contiguous-oracle"):
        make_contiguous("contiguous-best", 8, max_model_len=8)


def test_only_the_reserving_allocators_declare_a_reservation_size():
    # The engine sizes a request it may never admit with reservation_size, which only
    # reserving allocators have; both kinds report their peak through the interface.
    contiguous = make_contiguous("contiguous-pow2", 8, max_model_len=8)
    paged = BlockManager(4, 2)
    assert isinstance(contiguous, ReservingAllocator)
    assert isinstance(paged, Allocator) and not isinstance(paged, ReservingAllocator)
    assert not hasattr(paged, "reservation_size")
    assert {"peak_used_blocks", "reservation_size"} <= ReservingAllocator.__abstractmethods__
    contiguous.allocate(0, prompt(3), max_new_tokens=2)  # reserves 3 + 2 slots
    contiguous.free(0)
    assert (contiguous.peak_used_blocks, contiguous.usage().used_blocks) == (5, 0)


# -- placement ---------------------------------------------------------------------------


def test_regions_are_packed_from_slot_zero():
    alloc = oracle()
    alloc.allocate(0, prompt(3), max_new_tokens=2)
    alloc.allocate(1, prompt(4), max_new_tokens=0)
    alloc.allocate(2, prompt(1), max_new_tokens=1)
    assert [alloc.block_table(i) for i in range(3)] == [[0, 5], [5, 4], [9, 2]]


def test_first_fit_picks_the_lowest_hole_that_fits():
    alloc = oracle(num_slots=20, max_model_len=20)
    for seq, size in enumerate([3, 2, 5, 2, 4]):  # [0,3) [3,5) [5,10) [10,12) [12,16)
        alloc.allocate(seq, prompt(size))
    alloc.free(0)  # hole [0,3)
    alloc.free(2)  # hole [5,10)
    # holes: 3 @ 0, 5 @ 5, 4 @ 16. A 4-slot request skips the 3-slot hole.
    alloc.allocate(10, prompt(4))
    assert alloc.block_table(10) == [5, 4]
    alloc.allocate(11, prompt(2))  # lowest hole first, even though others fit too
    assert alloc.block_table(11) == [0, 2]
    alloc.allocate(12, prompt(4))  # [3,5) has 2, [9,10) has 1: only [16,20) fits
    assert alloc.block_table(12) == [16, 4]
    alloc.check_invariants()


def test_a_freed_middle_region_is_reused_and_holes_merge():
    alloc = oracle(num_slots=12, max_model_len=12)
    for seq in range(3):
        alloc.allocate(seq, prompt(4))
    alloc.free(1)
    alloc.allocate(3, prompt(4, first=50))
    assert alloc.block_table(3) == [4, 4]
    assert alloc.read_tokens(3).tolist() == prompt(4, first=50)
    alloc.free(0)
    alloc.free(3)  # [0,4) and [4,8) merge into one 8-slot hole
    alloc.allocate(4, prompt(8))
    assert alloc.block_table(4) == [0, 8]
    alloc.check_invariants()


def test_allocate_writes_the_prompt_into_slot_memory():
    alloc = oracle()
    alloc.allocate(0, [5, 6], max_new_tokens=1)
    alloc.allocate(1, [7, 8, 9])
    assert alloc.slots[:6].tolist() == [5, 6, 0, 7, 8, 9]
    assert alloc.read_tokens(1).tolist() == [7, 8, 9]
    assert alloc.allocate(2, [1]) == 0  # no prefix caching
    assert alloc.cached_prefix_tokens([5, 6]) == 0


# -- refusals and bad input -------------------------------------------------------------


def test_oom_when_no_hole_fits_leaves_state_unchanged():
    alloc = oracle(num_slots=10, max_model_len=10)
    alloc.allocate(0, prompt(4))
    alloc.allocate(1, prompt(2))
    alloc.allocate(2, prompt(4))
    alloc.free(0)
    alloc.free(2)  # holes 4 @ 0 and 4 @ 6: 8 free, yet 5 cannot be placed
    before = (alloc.usage(5), alloc.slots.copy())
    assert not alloc.can_allocate(prompt(5))
    with pytest.raises(OutOfBlocks) as err:
        alloc.allocate(3, prompt(5))
    assert (err.value.needed, err.value.available) == (5, 4)
    assert alloc.usage(5) == before[0]
    assert np.array_equal(alloc.slots, before[1])
    with pytest.raises(UnknownSequence):
        alloc.num_tokens(3)


def test_request_longer_than_max_model_len_is_out_of_blocks():
    alloc = oracle(num_slots=32, max_model_len=10)
    assert not alloc.can_allocate(prompt(6), max_new_tokens=5)
    with pytest.raises(OutOfBlocks, match="max_model_len"):
        alloc.allocate(0, prompt(6), max_new_tokens=5)
    assert alloc.can_allocate(prompt(6), max_new_tokens=4)


def test_misuse_raises_the_documented_errors():
    alloc = oracle(num_cpu_slots=8)
    alloc.allocate(0, prompt(2), max_new_tokens=2)
    with pytest.raises(DuplicateSequence):
        alloc.allocate(0, prompt(1))
    with pytest.raises(DuplicateSequence):
        alloc.fork(0, 0)
    for bad_tokens in ([], [-1], [[1, 2]], [1.5]):
        with pytest.raises(InvalidRequest):
            alloc.allocate(1, bad_tokens)
    with pytest.raises(InvalidRequest):
        alloc.allocate(-1, prompt(1))
    with pytest.raises(InvalidRequest):
        alloc.allocate(1, prompt(1), max_new_tokens=-1)
    with pytest.raises(InvalidRequest):
        alloc.can_append(0, 0)
    with pytest.raises(InvalidRequest):
        alloc.append_batch(np.array([0, 0]), np.array([1, 2]))
    with pytest.raises(InvalidRequest):
        alloc.append_batch(np.array([0]), np.array([1, 2]))
    with pytest.raises(UnknownSequence):
        alloc.append_batch(np.array([0, 7]), np.array([1, 2]))
    with pytest.raises(InvalidRequest):
        alloc.swap_in(0)
    alloc.swap_out(0)
    for swapped_only_misuse in (
        lambda: alloc.swap_out(0),
        lambda: alloc.append(0, [1]),
        lambda: alloc.append_batch(np.array([0]), np.array([1])),
        lambda: alloc.fork(0, 1),
    ):
        with pytest.raises(InvalidRequest):
            swapped_only_misuse()
    alloc.free(0)
    for unknown in (lambda: alloc.free(0), lambda: alloc.block_table(0), lambda: alloc.free(99)):
        with pytest.raises(UnknownSequence):
            unknown()
    alloc.check_invariants()


def test_constructor_rejects_bad_configuration():
    with pytest.raises(InvalidRequest, match="mode"):
        ContiguousAllocator(8, mode="best", max_model_len=8)
    with pytest.raises(InvalidRequest):
        ContiguousAllocator(0, mode="max", max_model_len=8)
    with pytest.raises(InvalidRequest):
        ContiguousAllocator(8, mode="max", max_model_len=0)


# -- growth ------------------------------------------------------------------------------


def test_decode_within_the_reservation_moves_nothing():
    alloc = ContiguousAllocator(16, mode="pow2", max_model_len=16)
    alloc.allocate(0, [1, 2], max_new_tokens=3)  # reserve 2 + 4
    alloc.allocate(1, [3], max_new_tokens=1)
    assert alloc.blocks_needed_for_batch(np.array([0, 1])) == 0
    assert alloc.append_batch(np.array([0, 1]), np.array([10, 11])) == []
    assert alloc.append(0, [12, 13]) == []
    assert alloc.read_tokens(0).tolist() == [1, 2, 10, 12, 13]
    assert alloc.read_tokens(1).tolist() == [3, 11]
    assert alloc.block_table(0) == [0, 6]
    assert alloc.blocks_needed_for_batch(np.array([0, 1])) == 1  # seq 1 is full


def test_append_past_the_reservation_extends_in_place_when_the_next_slots_are_free():
    alloc = oracle()
    alloc.allocate(0, [1, 2], max_new_tokens=1)
    assert alloc.append(0, [3, 4, 5]) == []
    assert alloc.block_table(0) == [0, 5]
    assert alloc.read_tokens(0).tolist() == [1, 2, 3, 4, 5]
    alloc.check_invariants()


def test_append_past_the_reservation_relocates_first_fit_and_returns_one_range_move():
    alloc = oracle(num_slots=12, max_model_len=12)
    alloc.allocate(0, [1, 2, 3])  # [0,3)
    alloc.allocate(1, [4])  # [3,4) blocks growth in place
    moves = alloc.append(0, [5])
    assert moves == [Transfer(0, 4, count=3)]  # the region, one range
    assert alloc.block_table(0) == [4, 4]
    assert alloc.read_tokens(0).tolist() == [1, 2, 3, 5]
    alloc.allocate(2, [9, 9, 9])  # the old region is a hole again
    assert alloc.block_table(2) == [0, 3]
    alloc.check_invariants()


def test_append_with_no_room_to_grow_is_refused_and_changes_nothing():
    alloc = oracle(num_slots=6, max_model_len=6)
    alloc.allocate(0, [1, 2])
    alloc.allocate(1, [3, 4])
    alloc.allocate(2, [5])  # one free slot at 5, not next to seq 0
    assert not alloc.can_append(0)
    before = (alloc.usage(), alloc.slots.copy(), alloc.block_table(0))
    with pytest.raises(OutOfBlocks):
        alloc.append(0, [7])
    with pytest.raises(OutOfBlocks):
        alloc.append_batch(np.array([2, 0]), np.array([7, 8]))  # seq 2 could grow alone
    assert (alloc.usage(), alloc.block_table(0)) == (before[0], before[2])
    assert np.array_equal(alloc.slots, before[1])
    assert alloc.num_tokens(2) == 1
    alloc.check_invariants()


def test_append_batch_grows_full_sequences_and_writes_every_token():
    alloc = oracle(num_slots=10, max_model_len=10)
    alloc.allocate(0, [1, 2])  # full at [0,2)
    alloc.allocate(1, [3], max_new_tokens=2)  # [2,5), room for 2 more
    alloc.allocate(2, [4])  # full at [5,6), free slots after it
    moves = alloc.append_batch(np.array([2, 1, 0]), np.array([40, 30, 10]))
    # seq 2 grows in place to [5,7); seq 0 cannot, and relocates to the lowest 3-slot hole
    assert moves == [Transfer(0, 7, count=2)]
    assert [alloc.block_table(i) for i in range(3)] == [[7, 3], [2, 3], [5, 2]]
    assert [alloc.read_tokens(i).tolist() for i in range(3)] == [[1, 2, 10], [3, 30], [4, 40]]
    alloc.check_invariants()


# -- fork and swap ------------------------------------------------------------------------


def test_fork_copies_every_slot_into_a_region_of_the_parents_size():
    alloc = ContiguousAllocator(16, mode="pow2", max_model_len=16)
    alloc.allocate(0, [7, 8, 9], max_new_tokens=2)  # reserve 3 + 2
    moves = alloc.fork(0, 1)
    assert moves == [Transfer(0, 5, count=3)]
    assert alloc.block_table(1) == [5, 5]
    alloc.append(1, [1])
    assert alloc.read_tokens(0).tolist() == [7, 8, 9]
    assert alloc.read_tokens(1).tolist() == [7, 8, 9, 1]
    alloc.fork(0, 2)
    with pytest.raises(OutOfBlocks):  # one slot left
        alloc.fork(0, 3)
    assert alloc.usage().used_blocks == 15
    alloc.check_invariants()


def test_swap_moves_only_the_tokens_and_swap_in_needs_the_whole_reservation():
    alloc = oracle(num_slots=10, max_model_len=10, num_cpu_slots=4)
    alloc.allocate(0, [1, 2], max_new_tokens=4)  # [0,6)
    alloc.allocate(1, [3, 4, 5])  # [6,9)
    assert alloc.swap_out(0) == [Transfer(0, 0, GPU, CPU, count=2)]
    assert alloc.is_swapped(0) and alloc.block_table(0) == [0, 2]
    assert alloc.read_tokens(0).tolist() == [1, 2]
    assert alloc.usage().used_blocks == 3
    assert not alloc.can_swap_out(1)  # 2 CPU slots left < 3 tokens
    with pytest.raises(OutOfBlocks):
        alloc.swap_out(1)
    alloc.allocate(2, [6], max_new_tokens=1)  # takes [0,2): no 6-slot hole remains
    assert not alloc.can_swap_in(0)
    with pytest.raises(OutOfBlocks):
        alloc.swap_in(0)
    alloc.free(2)
    assert alloc.swap_in(0) == [Transfer(0, 0, CPU, GPU, count=2)]
    assert not alloc.is_swapped(0) and alloc.block_table(0) == [0, 6]
    alloc.append(0, [9])
    assert alloc.read_tokens(0).tolist() == [1, 2, 9]
    alloc.check_invariants()


def test_held_blocks_and_swapping_several_sequences_out_together():
    alloc = oracle(num_slots=24, max_model_len=16, num_cpu_slots=7)
    for seq, tokens in ((0, [1, 2, 3]), (1, [4, 5]), (2, [6, 7, 8]), (3, [8, 9])):
        alloc.allocate(seq, tokens, max_new_tokens=2)
    assert alloc.held_blocks(0) == 5 and alloc.held_blocks(1) == 4
    alloc.swap_out(0)  # CPU [0,3)
    alloc.swap_out(1)  # CPU [3,5)
    alloc.swap_in(0)  # CPU holes now [0,3) and [5,7): 5 slots free
    assert alloc.held_blocks(1) == 0
    assert alloc.can_swap_out(2) and alloc.can_swap_out(3)
    assert alloc.can_swap_out(2, 3)  # 3 tokens to [0,3), then 2 to [5,7)
    assert not alloc.can_swap_out(3, 2)  # 2 tokens to [0,2) leave no hole of 3
    assert not alloc.can_swap_out(1, 2)  # sequence 1 is already on the CPU
    # Back in: with 2 and 3 out too, the device hole [5, 24) is split by a new sequence
    # taking [5, 15): [15, 24) holds 9 slots.
    alloc.swap_out(2)
    alloc.swap_out(3)
    alloc.allocate(4, list(range(10)))
    assert alloc.can_swap_in(1, 2)  # 4 slots -> [15, 19), then 5 -> [19, 24)
    assert not alloc.can_swap_in(1, 2, 3)  # a third region (4 slots) finds no hole
    assert not alloc.can_swap_in(0, 1)  # sequence 0 is on the device
    alloc.check_invariants()


def test_a_swapped_sequence_can_be_freed_from_the_cpu():
    alloc = oracle(num_cpu_slots=4)
    alloc.allocate(0, [1, 2, 3])
    alloc.swap_out(0)
    alloc.free(0)
    alloc.allocate(1, [4, 5, 6, 7])
    alloc.swap_out(1)  # the CPU space is whole again
    assert alloc.block_table(1) == [0, 4]
    alloc.check_invariants()


# -- usage split ----------------------------------------------------------------------------


def test_usage_splits_tokens_reservation_and_over_reservation():
    alloc = ContiguousAllocator(32, mode="pow2", max_model_len=32)
    alloc.allocate(0, prompt(3), max_new_tokens=5)  # 3 + 8 = 11, true length 8
    alloc.append(0, [9])
    usage = alloc.usage()
    assert usage.token_slots == 4
    assert usage.reserved_slots == 4  # will still write 4 of its 5 outputs
    assert usage.internal_frag_slots == 3  # 11 reserved, only 8 ever written
    assert (usage.used_blocks, usage.free_blocks, usage.free_slots) == (11, 21, 21)
    assert usage.external_frag_slots == 0 and usage.cached_slots == 0


def test_max_mode_over_reservation_is_internal_fragmentation():
    alloc = ContiguousAllocator(40, mode="max", max_model_len=20)
    alloc.allocate(0, prompt(4), max_new_tokens=2)
    usage = alloc.usage()
    assert (usage.token_slots, usage.reserved_slots, usage.internal_frag_slots) == (4, 2, 14)


def test_external_fragmentation_counts_holes_too_small_for_the_head_request():
    alloc = oracle(num_slots=20, max_model_len=20)
    for seq, size in enumerate([3, 4, 2, 5, 6]):  # [0,3) [3,7) [7,9) [9,14) [14,20)
        alloc.allocate(seq, prompt(size))
    alloc.free(0)  # hole 3
    alloc.free(2)  # hole 2
    alloc.free(4)  # hole 6
    head = alloc.reservation_size(4, 1)  # 5 slots
    usage = alloc.usage(head)
    assert usage.external_frag_slots == 5  # the 3- and 2-slot holes
    assert usage.free_slots == 6
    assert alloc.usage(7).external_frag_slots == 11  # nothing fits a 7-slot request
    assert alloc.usage(2).external_frag_slots == 0
    assert alloc.usage(0).external_frag_slots == 0


def test_usage_parts_sum_to_the_pool_and_peak_is_tracked():
    alloc = ContiguousAllocator(24, mode="pow2", max_model_len=24)
    alloc.allocate(0, prompt(5), max_new_tokens=3)
    alloc.allocate(1, prompt(2), max_new_tokens=6)
    alloc.free(0)
    usage = alloc.usage(9)
    parts = (
        usage.token_slots
        + usage.reserved_slots
        + usage.internal_frag_slots
        + usage.external_frag_slots
        + usage.free_slots
    )
    assert parts == usage.total_slots == 24
    assert alloc.peak_used_blocks == 9 + 10
    assert usage.used_blocks == 10
