"""The KV pool's block moves (copy-on-write, swap) and slot arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.real import KVCache, ModelShape, slot_mapping
from backend.real.kv_cache import independent_waves
from backend.transfer import CPU, DISK, GPU, PEER, Medium, Transfer

from .harness import TINY
from .helpers import TRITON_DEVICE, needs_triton

SHAPE = ModelShape(
    num_layers=2,
    hidden_size=16,
    num_heads=4,
    num_kv_heads=2,
    head_dim=4,
    intermediate_size=32,
    vocab_size=50,
    max_model_len=64,
)


def _random_pool(rng, *, device="cpu", use_triton=False, num_blocks=6, num_cpu_blocks=4):
    cache = KVCache(
        SHAPE, num_blocks, 4, num_cpu_blocks=num_cpu_blocks, device=device, use_triton=use_triton
    )
    cache.data.copy_(torch.from_numpy(rng.standard_normal(cache.data.shape)))
    cache.cpu_data.copy_(torch.from_numpy(rng.standard_normal(cache.cpu_data.shape)))
    return cache


@pytest.mark.parametrize(
    "use_triton", [False, pytest.param(True, marks=needs_triton)], ids=["torch", "triton"]
)
def test_copy_blocks_copies_every_layer_and_only_the_destinations(rng, use_triton):
    device = TRITON_DEVICE if use_triton else "cpu"
    cache = _random_pool(rng, device=device, use_triton=use_triton)
    before = cache.data.clone()
    moves = [Transfer(1, 4), Transfer(1, 0), Transfer(3, 5)]
    cache.copy_blocks(moves)
    for src, dst, *_ in moves:
        assert torch.equal(cache.data[:, :, dst], before[:, :, src])
    for untouched in (1, 2, 3):
        assert torch.equal(cache.data[:, :, untouched], before[:, :, untouched])


@pytest.mark.parametrize(
    "use_triton", [False, pytest.param(True, marks=needs_triton)], ids=["torch", "triton"]
)
def test_dependent_copies_act_as_if_performed_in_order(rng, use_triton):
    device = TRITON_DEVICE if use_triton else "cpu"
    cache = _random_pool(rng, device=device, use_triton=use_triton)
    before = cache.data.clone()
    # A chain (1 -> 4 -> 5), a block overwritten twice (0), and a read of a block that a
    # later move overwrites (2 read, then written).
    cache.copy_blocks(
        [
            Transfer(1, 4),
            Transfer(4, 5),
            Transfer(2, 0),
            Transfer(3, 0),
            Transfer(2, 1),
            Transfer(3, 2),
        ]
    )
    expected = before.clone()
    for src, dst in [(1, 4), (4, 5), (2, 0), (3, 0), (2, 1), (3, 2)]:
        expected[:, :, dst] = expected[:, :, src]
    assert torch.equal(cache.data, expected)


def test_waves_split_only_at_conflicts():
    moves = [Transfer(1, 4), Transfer(2, 5), Transfer(4, 6), Transfer(7, 5)]
    waves = list(independent_waves(moves, same_pool=True))
    assert waves == [moves[:2], moves[2:]]
    # Between pools (swap) reading a src that is also some dst id is no conflict.
    assert list(independent_waves(moves[:3], same_pool=False)) == [moves[:3]]


def test_swap_round_trip_restores_contents_into_other_blocks(rng):
    cache = _random_pool(rng)
    before = cache.data.clone()
    cache.transfer([Transfer(2, 3, GPU, CPU), Transfer(5, 0, GPU, CPU)])
    assert torch.equal(cache.cpu_data[:, :, 3], before[:, :, 2])
    assert torch.equal(cache.cpu_data[:, :, 0], before[:, :, 5])
    cache.data.fill_(float("nan"))  # the device blocks were released and reused
    cache.transfer([Transfer(3, 1, CPU, GPU), Transfer(0, 4, CPU, GPU)])
    assert torch.equal(cache.data[:, :, 1], before[:, :, 2])
    assert torch.equal(cache.data[:, :, 4], before[:, :, 5])
    assert cache.data[:, :, [0, 2, 3, 5]].isnan().all()


def test_transfer_performs_each_route_in_order(rng):
    """One call with a step's transfers (swap-out, swap-in, copy) performs them in order:
    the swap-in rewrites the block the swap-out read, and the copy reads the rewritten one."""
    transfers = [
        Transfer(2, 3, GPU, CPU),
        Transfer(1, 2, CPU, GPU),
        Transfer(2, 5),
        Transfer(4, 0),
    ]
    cache = _random_pool(rng)
    device, host = cache.data.clone(), cache.cpu_data.clone()
    cache.transfer(transfers)
    assert torch.equal(cache.cpu_data[:, :, 3], device[:, :, 2])
    assert torch.equal(cache.data[:, :, 2], host[:, :, 1])
    assert torch.equal(cache.data[:, :, 5], host[:, :, 1])
    assert torch.equal(cache.data[:, :, 0], device[:, :, 4])


def test_a_range_moves_as_its_blocks_and_may_not_overlap_itself(rng):
    """A Transfer of ``count`` blocks is those blocks' moves; one whose source and
    destination overlap in one pool is refused (block by block it would read what it
    had just written)."""
    cache, ranged = _random_pool(rng), _random_pool(rng)
    ranged.data.copy_(cache.data)
    ranged.cpu_data.copy_(cache.cpu_data)
    cache.transfer([Transfer(1, 0, GPU, CPU), Transfer(2, 1, GPU, CPU), Transfer(3, 2, GPU, CPU)])
    ranged.transfer([Transfer(1, 0, GPU, CPU, count=3)])
    assert torch.equal(ranged.cpu_data, cache.cpu_data)
    with pytest.raises(ValueError, match="overlaps itself"):
        ranged.transfer([Transfer(0, 2, count=3)])
    ranged.transfer([Transfer(0, 3, count=3)])  # disjoint in one pool: fine


def test_a_lower_tier_is_reached_through_the_cpu_pool_only(rng):
    """A disk tier's pool takes cascades from the CPU pool and gives promotions back to
    it; a move between it and the device is refused by name."""
    cache = KVCache(SHAPE, 4, 2, num_cpu_blocks=2, lower_tier_blocks={DISK: 3})
    cache.cpu_data.normal_(generator=torch.Generator().manual_seed(1))
    stored = cache.cpu_data[:, :, 1].clone()
    cache.transfer([Transfer(1, 2, CPU, DISK)])
    cache.cpu_data.zero_()
    cache.transfer([Transfer(2, 0, DISK, CPU), Transfer(0, 3, CPU, GPU)])
    assert torch.equal(cache.data[:, :, 3], stored)
    with pytest.raises(ValueError, match="no move from disk to gpu"):
        cache.transfer([Transfer(2, 0, DISK, GPU)])


def test_transfer_refuses_a_route_it_has_no_pool_for(rng):
    cache = _random_pool(rng)
    with pytest.raises(ValueError, match="no move from cpu to disk"):
        cache.transfer([Transfer(0, 0, CPU, Medium.DISK)])


def test_read_sequence_follows_the_block_table(rng):
    cache = _random_pool(rng)
    table, num_tokens = [4, 1, 3], 10
    got = cache.read_sequence(table, num_tokens)
    for pos in range(num_tokens):
        block, offset = table[pos // 4], pos % 4
        assert torch.equal(got[:, :, pos], cache.data[:, :, block, offset])


def test_slot_mapping_and_out_of_table_position():
    # Two sequences (ids 5 and 9) with padded tables [7, 2, 11] and [3, 0, 0] (1 block).
    tables = np.array([[7, 2, 11], [3, 0, 0]])
    num_blocks = np.array([3, 1])
    rows, positions = np.array([0, 0, 1, 0, 0, 1]), np.array([0, 3, 2, 4, 9, 3])
    got = slot_mapping(tables, num_blocks, rows, positions, 4, [5, 9])
    assert got.tolist() == [28, 31, 14, 8, 45, 15]
    with pytest.raises(ValueError, match="sequence 9: position 4 lies beyond its 1 blocks"):
        slot_mapping(tables, num_blocks, np.array([0, 1]), np.array([11, 4]), 4, [5, 9])


def test_pool_size_matches_the_capacity_formula():
    cache = KVCache(SHAPE, 3, 8, dtype=torch.float16)
    per_token = SHAPE.num_layers * 2 * SHAPE.num_kv_heads * SHAPE.head_dim * 2
    assert cache.bytes_per_block == per_token * 8
    assert cache.key_cache(1).shape == (3, 8, SHAPE.num_kv_heads, SHAPE.head_dim)


def test_a_read_from_a_peer_takes_only_peer_to_gpu_moves_of_its_geometry():
    mine, peer = KVCache(TINY, 4, 2), KVCache(TINY, 6, 2)
    peer.data[:, :, 5] = 7.0
    mine.receive([Transfer(5, 1, PEER, GPU)], peer)
    assert (mine.data[:, :, 1] == 7.0).all() and (mine.data[:, :, 0] == 0).all()
    with pytest.raises(ValueError, match="peer -> gpu"):
        mine.receive([Transfer(0, 1, CPU, GPU)], peer)
    with pytest.raises(ValueError, match="geometry"):
        mine.receive([Transfer(0, 1, PEER, GPU)], KVCache(TINY, 4, 4))
