"""Issue 14: a sequence swapped out mid-prefill and swapped back in must compute the rest
of its prompt into blocks no other sequence reads.

The shortest case, found by the state machine in test_pool_state.py: sequence 0 is
admitted with ``computed_tokens=0`` and swapped out; sequence 1, the same one-token
prompt, is admitted and computed (its block is published in the prefix cache); sequence
0 comes back and its prefill writes its K/V through its block table. If the swap-in had
shared sequence 1's cached block (its key matches sequence 0's uncomputed block), that
write would land in sequence 1's K/V.
"""

from __future__ import annotations

import numpy as np
import torch

from backend.blocks import BlockManager
from backend.real import KVCache, ModelShape, ops

SHAPE = ModelShape(
    num_layers=2,
    hidden_size=8,
    num_heads=1,
    num_kv_heads=1,
    head_dim=2,
    intermediate_size=8,
    vocab_size=4,
    max_model_len=64,
)


def compute(alloc: BlockManager, kv: KVCache, seq: int, first: int, stop: int, value: float):
    """The executor's prefill of ``seq``'s positions ``first..stop - 1``: ``value`` in every
    K/V element, written through the block table (slot mapping + write_kv per layer)."""
    size, table = alloc.block_size, np.asarray(alloc.block_table(seq))
    positions = np.arange(first, stop)
    slots = torch.as_tensor(table[positions // size] * size + positions % size)
    rows = torch.full((stop - first, SHAPE.num_kv_heads, SHAPE.head_dim), value, dtype=kv.dtype)
    for layer in range(SHAPE.num_layers):
        ops.write_kv(rows, rows, kv.key_cache(layer), kv.value_cache(layer), slots)


def kv_values(alloc: BlockManager, kv: KVCache, seq: int, first: int = 0) -> list[float]:
    """The distinct values in ``seq``'s K/V from position ``first`` on, read back through
    its block table."""
    rows = kv.read_sequence(alloc.block_table(seq), alloc.num_tokens(seq))[:, :, first:]
    return sorted(set(rows.flatten().tolist()))


def test_the_one_token_case_writes_into_a_private_block():
    alloc = BlockManager(4, 1, num_cpu_blocks=1, enable_prefix_caching=True)
    kv = KVCache(SHAPE, 4, 1, num_cpu_blocks=1, dtype=torch.float64)
    assert alloc.allocate(0, [0], computed_tokens=0) == 0  # mid-prefill: nothing computed
    kv.transfer(alloc.swap_out(0))
    assert alloc.allocate(1, [0]) == 0  # sequence 0's block was never published: no hit
    compute(alloc, kv, 1, 0, 1, 1.0)
    kv.transfer(alloc.swap_in(0))
    alloc.mark_computed(0, 1)  # the engine plans the prefill chunk ...
    compute(alloc, kv, 0, 0, 1, 2.0)  # ... and the executor computes it
    alloc.check_invariants()
    assert kv_values(alloc, kv, 1) == [1.0], "sequence 1's K/V was overwritten"
    assert kv_values(alloc, kv, 0) == [2.0]
    (mine,), (theirs,) = alloc.block_table(0), alloc.block_table(1)
    assert mine != theirs, "sequence 0's uncomputed token maps to sequence 1's block"
    assert alloc._pool.refcount[[mine, theirs]].tolist() == [1, 1]


def test_the_computed_blocks_are_shared_again_and_the_rest_come_back_private():
    # Block size 2: sequence 0 computed its first block before it was swapped out;
    # sequence 1 (the same 6-token prompt) hit that block and computed the other two.
    alloc = BlockManager(8, 2, num_cpu_blocks=3, enable_prefix_caching=True)
    kv = KVCache(SHAPE, 8, 2, num_cpu_blocks=3, dtype=torch.float64)
    prompt = [1, 2, 3, 1, 2, 3]
    alloc.allocate(0, prompt, computed_tokens=0)
    alloc.mark_computed(0, 2)
    compute(alloc, kv, 0, 0, 2, 1.0)
    kv.transfer(alloc.swap_out(0))
    assert alloc.allocate(1, prompt) == 2  # sequence 0's computed block, cached
    compute(alloc, kv, 1, 2, 6, 3.0)
    moves = alloc.swap_in(0)
    kv.transfer(moves)
    alloc.mark_computed(0, 6)
    compute(alloc, kv, 0, 2, 6, 2.0)
    alloc.check_invariants()
    assert kv_values(alloc, kv, 1) == [1.0, 3.0], "sequence 1's K/V was overwritten"
    assert kv_values(alloc, kv, 1, 2) == [3.0]
    assert kv_values(alloc, kv, 0) == [1.0, 2.0] and kv_values(alloc, kv, 0, 2) == [2.0]
    mine, theirs = alloc.block_table(0), alloc.block_table(1)
    assert mine[0] == theirs[0], "the block sequence 0 computed is shared again"
    assert not set(mine[1:]) & set(theirs), "its uncomputed blocks come back private"
    assert [move.dst for move in moves] == mine[1:]
    assert alloc._pool.refcount[theirs].tolist() == [2, 1, 1]
